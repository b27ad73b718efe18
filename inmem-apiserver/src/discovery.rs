//! Discovery documents: the legacy ones (`APIVersions`, `APIGroupList`,
//! `APIResourceList`) and, for clients that ask for it in `Accept` as
//! kubectl does, the aggregated `apidiscovery.k8s.io` `APIGroupDiscoveryList`
//! of `/api` and `/apis` (v2, or v2beta1), which spares them a request per
//! group version. Resources carry their short names, categories, verbs,
//! singular names and kinds, so that `kubectl get tn` and `kubectl get
//! placement` resolve. A custom kind's `scale` subresource is listed as the
//! real server lists it: `{plural}/scale`, kind `Scale` of `autoscaling/v1`,
//! verbs get, patch and update.

use serde_json::{Value, json};

use crate::kinds::Kind;
use crate::store::State;

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

const STATUS_VERBS: [&str; 3] = ["get", "patch", "update"];

/// The aggregated discovery version `Accept` asks for (`v2` or `v2beta1`),
/// if it names one before plain JSON.
pub(crate) fn aggregated_version(accept: Option<&str>) -> Option<&'static str> {
    for media in accept.unwrap_or_default().split(',') {
        let mut parts = media.split(';').map(str::trim);
        if !matches!(parts.next(), Some("application/json")) {
            continue;
        }
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |name: &str| params.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
        if params.is_empty() {
            return None;
        }
        if param("g") == Some("apidiscovery.k8s.io") && param("as") == Some("APIGroupDiscoveryList")
        {
            match param("v") {
                Some("v2") => return Some("v2"),
                Some("v2beta1") => return Some("v2beta1"),
                _ => {}
            }
        }
    }
    None
}

/// The content type of an aggregated discovery answer.
pub(crate) fn aggregated_content_type(version: &str) -> &'static str {
    if version == "v2beta1" {
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    } else {
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    }
}

/// `/api`, legacy form.
pub(crate) fn api_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
    })
}

/// The served groups other than core, each with its versions, the storage
/// version (preferred) first.
fn groups(state: &State) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for kind in state.kinds.values().filter(|k| !k.group.is_empty()) {
        let index = match groups.iter().position(|(g, _)| *g == kind.group) {
            Some(i) => i,
            None => {
                groups.push((kind.group.clone(), vec![kind.storage_version.clone()]));
                groups.len().saturating_sub(1)
            }
        };
        if let Some((_, versions)) = groups.get_mut(index) {
            for v in &kind.versions {
                if !versions.contains(&v.name) {
                    versions.push(v.name.clone());
                }
            }
        }
    }
    groups
}

/// `/apis`, legacy form.
pub(crate) fn group_list(state: &State) -> Value {
    let groups: Vec<Value> = groups(state)
        .into_iter()
        .map(|(group, versions)| {
            let gv = |v: &String| json!({"groupVersion": format!("{group}/{v}"), "version": v});
            json!({
                "name": group,
                "versions": versions.iter().map(gv).collect::<Vec<_>>(),
                "preferredVersion": versions.first().map(gv),
            })
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn kinds_at<'a>(
    state: &'a State,
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'a Kind> {
    state
        .kinds
        .values()
        .filter(move |k| k.group == group && k.version(version).is_some())
        .map(AsRef::as_ref)
}

/// `/api/v1` and `/apis/{group}/{version}`: None when nothing is served there.
pub(crate) fn resource_list(state: &State, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for kind in kinds_at(state, group, version) {
        let mut resource = json!({
            "name": kind.plural, "singularName": kind.singular, "namespaced": kind.namespaced,
            "kind": kind.kind, "verbs": VERBS,
        });
        if !kind.short_names.is_empty() {
            resource["shortNames"] = json!(kind.short_names);
        }
        if !kind.categories.is_empty() {
            resource["categories"] = json!(kind.categories);
        }
        resources.push(resource);
        if kind.version(version).is_some_and(|v| v.status) {
            resources.push(json!({
                "name": format!("{}/status", kind.plural), "singularName": "", "namespaced": kind.namespaced,
                "kind": kind.kind, "verbs": STATUS_VERBS,
            }));
        }
        // The scale subresource answers another group's kind, and says so.
        if kind.version(version).is_some_and(|v| v.scale.is_some()) {
            resources.push(json!({
                "name": format!("{}/scale", kind.plural), "singularName": "", "namespaced": kind.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": STATUS_VERBS,
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    (!resources.is_empty()).then(|| {
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
    })
}

/// The aggregated discovery of `/api` (`core`) or `/apis`.
pub(crate) fn aggregated(state: &State, core: bool, version: &str) -> Value {
    let groups = if core {
        vec![(String::new(), vec!["v1".to_owned()])]
    } else {
        groups(state)
    };
    let items: Vec<Value> = groups
        .into_iter()
        .filter_map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .filter_map(|v| {
                    let resources: Vec<Value> = kinds_at(state, &group, v)
                        .map(|kind| aggregated_resource(kind, v))
                        .collect();
                    (!resources.is_empty()).then(
                        || json!({"version": v, "resources": resources, "freshness": "Current"}),
                    )
                })
                .collect();
            (!versions.is_empty()).then(|| {
                let mut metadata = json!({"creationTimestamp": null});
                if !group.is_empty() {
                    metadata["name"] = json!(group);
                }
                json!({"metadata": metadata, "versions": versions})
            })
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

fn aggregated_resource(kind: &Kind, version: &str) -> Value {
    let response_kind = json!({"group": kind.group, "version": version, "kind": kind.kind});
    let mut resource = json!({
        "resource": kind.plural,
        "responseKind": response_kind,
        "scope": if kind.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": kind.singular,
        "verbs": VERBS,
    });
    if !kind.short_names.is_empty() {
        resource["shortNames"] = json!(kind.short_names);
    }
    if !kind.categories.is_empty() {
        resource["categories"] = json!(kind.categories);
    }
    let mut subresources = Vec::new();
    if kind.version(version).is_some_and(|v| v.status) {
        subresources.push(json!({
            "subresource": "status", "responseKind": response_kind, "verbs": STATUS_VERBS,
        }));
    }
    if kind.version(version).is_some_and(|v| v.scale.is_some()) {
        subresources.push(json!({
            "subresource": "scale",
            "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": STATUS_VERBS,
        }));
    }
    if !subresources.is_empty() {
        resource["subresources"] = subresources.into();
    }
    resource
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_asks_for_aggregated_discovery_first() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(aggregated_version(Some(kubectl)), Some("v2"));
        let beta = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
        assert_eq!(aggregated_version(Some(beta)), Some("v2beta1"));
        assert_eq!(aggregated_version(Some("application/json, */*")), None);
        assert_eq!(aggregated_version(None), None);
    }
}
