//! Who a managedFields entry names: the request's `fieldManager`, else its User-Agent's product,
//! else no one; and a direct write through the `ApiServer` handle names no request's writer.

use inmem_apiserver::ApiServer;
use serde_json::{Value, json};

use crate::*;

fn managers(obj: &Value) -> Vec<String> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|entry| entry["manager"].as_str().unwrap().to_owned())
        .collect()
}

async fn create_as(api: &ApiServer, name: &str, query: &str, agent: Option<&str>) -> Value {
    let headers: Vec<(&str, &str)> = [("content-type", "application/json")]
        .into_iter()
        .chain(agent.map(|agent| ("user-agent", agent)))
        .collect();
    let uri = format!("{TENANTS}{query}");
    let body = raw_tenant(name, json!({"replicas": 1}));
    let (code, _, created) = request(api, "POST", &uri, &headers, body).await;
    assert_eq!(code, 201, "{created}");
    created
}

#[tokio::test]
async fn a_write_is_recorded_under_its_field_manager_else_its_user_agent_product() {
    let (api, _client) = setup();
    api.set_managed_fields(true);
    let named = create_as(&api, "a", "?fieldManager=kubectl", Some("other/1")).await;
    assert_eq!(managers(&named), ["kubectl"]);
    let by_agent = create_as(&api, "b", "", Some("tenant-placer/0.1.0 (linux)")).await;
    assert_eq!(managers(&by_agent), ["tenant-placer"]);
    let anonymous = create_as(&api, "c", "", None).await;
    assert_eq!(managers(&anonymous), [""]);
}

#[tokio::test]
async fn a_direct_write_after_a_request_is_not_recorded_under_that_request_s_manager() {
    let (api, _client) = setup();
    api.set_managed_fields(true);
    create_as(&api, "a", "?fieldManager=kubectl", None).await;
    let crd = api
        .install_crd(cluster_crd("widgets", "Widget", json!({})))
        .unwrap();
    assert_eq!(managers(&crd), Vec::<String>::new());
}
