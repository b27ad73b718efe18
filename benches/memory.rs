//! Memory per cached object: the bytes the controller's watch caches hold per Tenant and per
//! Node, counted by a counting global allocator, without and with `controller::state::strip::strip`.
//!
//! `cargo bench --bench memory -- [--tenants N] [--nodes N]` (defaults: 10000 tenants, 1000 nodes).
//!
//! The objects are what the API server serves once the controller has settled them: a Tenant
//! applied with `kubectl apply` (two labels, kubectl's last-applied annotation, managedFields of
//! kubectl and of the controller's status writes), Active on a node with its Placed condition as
//! the controller writes it; a Node applied the same way (three labels) holding 10 entries, its
//! status as the controller writes it. They are decoded as the watch decodes a list page
//! (`ObjectList<Decoded<K>>`), stripped (or not), and applied to a kube reflector `Store` as the
//! reflector does (Init, InitApply each, InitDone). "Held" is what stays allocated once the page
//! is dropped: the Store's map, its keys and the `Arc`ed objects, in bytes requested from the
//! allocator (malloc adds about 8 to 16 bytes per allocation: the allocations held are printed
//! too).
//!
//! Also measured: the claims index (`controller::state::claims::Claims`), which holds one entry per
//! Tenant.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects,
    clippy::cast_precision_loss,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss
)]

use std::alloc::System;

use kube::ResourceExt;
use kube::core::ObjectList;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

use tenant_placer::api::{AllocationEntry, Node, ResourceAmounts, Tenant, TenantPhase};
use tenant_placer::controller::state::claims::Claims;
use tenant_placer::controller::state::decode::{self, Decoded};
use tenant_placer::controller::state::strip::{self, Cached};
use tenant_placer::controller::{TenantCache, TenantKey};
use tenant_placer::testing;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

mod common;
use common::arg;

const API_VERSION: &str = "placement.tenant-placer.dev/v1alpha1";
const TIME: &str = "2026-11-30T10:00:00Z";

fn uid(kind: u32, i: usize) -> String {
    format!("{:08x}-7c2e-4b1a-9f3d-{:012x}", kind, i)
}

/// What the API server adds to a manifest applied with `kubectl apply` and then written by the
/// controller: identity, kubectl's last-applied copy, and managedFields.
fn served(mut object: Value, uid: String, rv: usize, status_fields: Value) -> Value {
    let mut applied = object.clone();
    applied.as_object_mut().unwrap().remove("status");
    let applied_meta = applied["metadata"].as_object_mut().unwrap();
    for field in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "finalizers",
    ] {
        applied_meta.remove(field);
    }
    applied_meta.insert("annotations".into(), json!({}));
    let labels: serde_json::Map<String, Value> = object["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default()
        .keys()
        .map(|k| (format!("f:{k}"), json!({})))
        .collect();
    let spec_fields: serde_json::Map<String, Value> = object["spec"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| (format!("f:{k}"), json!({})))
        .collect();
    let meta = object["metadata"].as_object_mut().unwrap();
    meta.insert("uid".into(), json!(uid));
    meta.insert("resourceVersion".into(), json!(rv.to_string()));
    meta.insert("creationTimestamp".into(), json!(TIME));
    meta.insert(
        "annotations".into(),
        json!({"kubectl.kubernetes.io/last-applied-configuration": format!("{applied}\n")}),
    );
    meta.insert(
        "managedFields".into(),
        json!([
            {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": API_VERSION,
             "time": TIME, "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}},
                                         "f:labels": labels},
                          "f:spec": spec_fields}},
            {"manager": "tenant-placer", "operation": "Update", "apiVersion": API_VERSION,
             "time": TIME, "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": status_fields}},
        ]),
    );
    object
}

/// Tenant `i` as served once the controller placed it on `node`.
fn tenant(i: usize, node: &str) -> Value {
    let reserved = ResourceAmounts::new(2, 8, 120).to_resources().unwrap();
    let mut tenant: Tenant = testing::tenant(&format!("t{i:06}"))
        .resources(2, 8, 120)
        .label("app.kubernetes.io/part-of", "shop")
        .label("team", &format!("team-{:02}", i % 40))
        .finalizer(tenant_placer::api::TENANT_FINALIZER)
        .on(node)
        .reserved(2, 8, 120)
        .phase(TenantPhase::Active)
        .message(&format!("holds {reserved} on {node}"))
        .placed("Reserved")
        .build();
    if let Some(status) = tenant.status.as_mut() {
        status.observed_generation = Some(1);
    }
    let status_fields = json!({".": {}, "f:phase": {}, "f:nodeName": {}, "f:message": {},
        "f:observedGeneration": {}, "f:reserved": {".": {}, "f:threads": {}, "f:memoryGB": {}, "f:storageGB": {}},
        "f:conditions": {".": {}, "k:{\"type\":\"Placed\"}": {".": {}, "f:type": {}, "f:status": {},
            "f:reason": {}, "f:message": {}, "f:lastTransitionTime": {}}}});
    served(
        serde_json::to_value(&tenant).unwrap(),
        uid(1, i),
        1_000_000 + i,
        status_fields,
    )
}

/// Node `i` as served, holding 10 entries, its status as the controller writes it.
fn node(i: usize) -> Value {
    let mut builder = testing::node(&format!("node-{i:05}"))
        .capacity(64, 256, 8000)
        .label("topology.kubernetes.io/zone", &format!("eu-{}", i % 3))
        .label("placement.tenant-placer.dev/class", "xlarge")
        .label("kubernetes.io/hostname", &format!("node-{i:05}"))
        .finalizer(tenant_placer::api::NODE_FINALIZER);
    for e in 0..10 {
        let t = i * 10 + e;
        builder = builder.entry(AllocationEntry {
            tenant: format!("default/t{t:06}").into(),
            uid: uid(1, t).into(),
            resources: ResourceAmounts::new(2, 8, 120),
            replicas: None,
        });
    }
    let status_fields = json!({".": {}, "f:allocations": {}, "f:allocated": {".": {}, "f:threads": {},
        "f:memoryGB": {}, "f:storageGB": {}}, "f:free": {".": {}, "f:threads": {}, "f:memoryGB": {},
        "f:storageGB": {}}, "f:tenants": {}, "f:conditions": {}});
    served(
        serde_json::to_value(builder.settled().build()).unwrap(),
        uid(2, i),
        2_000_000 + i,
        status_fields,
    )
}

/// A list page as the API server sends it.
fn list(kind: &str, items: Vec<Value>) -> String {
    json!({"apiVersion": API_VERSION, "kind": format!("{kind}List"),
        "metadata": {"resourceVersion": "3000000"}, "items": items})
    .to_string()
}

/// What is done to each object before the Store keeps it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Keep {
    /// Everything the API server sent.
    Everything,
    /// What the controller kept before `strip`: managedFields emptied, kubectl's last-applied
    /// annotation removed (the reflector's modify step until then).
    ManagedFieldsAndLastApplied,
    /// `controller::state::strip::strip`, as the controller's watches run it.
    Stripped,
}

/// Bytes still allocated, and allocations, since `region` began.
fn held(region: &Region<'_, System>) -> (isize, isize) {
    let c = region.change();
    // NB: stats_alloc counts a reallocation's growth in `bytes_allocated` (and its shrinking in
    // `bytes_deallocated`) as well as in `bytes_reallocated`: adding that too counted the
    // decoded page's vector growth as held.
    (
        c.bytes_allocated as isize - c.bytes_deallocated as isize,
        c.allocations as isize - c.deallocations as isize,
    )
}

/// Decodes `page` as the watch does, treats each object as `keep` says, and fills a Store:
/// the Store and what it holds, in bytes and allocations.
fn cached<K>(page: &str, keep: Keep) -> (reflector::Store<K>, isize, isize)
where
    K: Cached<DynamicType = ()> + decode::Lenient + Clone + serde::de::DeserializeOwned + 'static,
{
    let region = Region::new(GLOBAL);
    let (store, mut writer) = reflector::store::<K>();
    {
        let list: ObjectList<Decoded<K>> = serde_json::from_str(page).unwrap();
        writer.apply_watcher_event(&Event::Init);
        for mut object in list.items {
            match keep {
                Keep::Everything => {}
                Keep::ManagedFieldsAndLastApplied => {
                    object.managed_fields_mut().clear();
                    object
                        .annotations_mut()
                        .remove("kubectl.kubernetes.io/last-applied-configuration");
                }
                Keep::Stripped => strip::strip(&mut object),
            }
            let event = decode::readable(Event::InitApply(object), &mut |_| {
                panic!("every object decodes")
            })
            .unwrap();
            writer.apply_watcher_event(&event);
        }
        writer.apply_watcher_event(&Event::InitDone);
    }
    let (bytes, allocations) = held(&region);
    (store, bytes, allocations)
}

/// One row of the table: the JSON per object, then bytes (allocations) held per object for
/// each way of keeping it.
fn report<K>(kind: &str, page: &str, n: usize)
where
    K: Cached<DynamicType = ()> + decode::Lenient + Clone + serde::de::DeserializeOwned + 'static,
{
    let mut row = format!("| {kind} | {:.0} |", page.len() as f64 / n as f64);
    for keep in [
        Keep::Everything,
        Keep::ManagedFieldsAndLastApplied,
        Keep::Stripped,
    ] {
        let (store, bytes, allocations) = cached::<K>(page, keep);
        assert_eq!(store.state().len(), n, "{keep:?}");
        row.push_str(&format!(
            " {:.0} ({:.1}) |",
            bytes as f64 / n as f64,
            allocations as f64 / n as f64
        ));
    }
    println!("{row}");
}

fn main() {
    let (tenants, nodes) = (arg("--tenants", 10_000), arg("--nodes", 1_000));
    let tenant_page = list(
        "Tenant",
        (0..tenants)
            .map(|i| tenant(i, &format!("node-{:05}", i / 10)))
            .collect(),
    );
    let node_page = list("Node", (0..nodes).map(node).collect());
    println!(
        "memory per cached object: {tenants} Tenants, {nodes} Nodes; bytes (allocations) held per object in a reflector Store"
    );
    println!(
        "| kind | JSON as served, bytes | everything kept | managedFields and last-applied dropped (before strip) | stripped (`strip::strip`) |"
    );
    println!("|---|---:|---:|---:|---:|");
    report::<Tenant>("Tenant", &tenant_page, tenants);
    report::<Node>("Node", &node_page, nodes);

    // The controller's own tenant cache (`controller::TenantCache`): stripped, then compact.
    let region = Region::new(GLOBAL);
    let cache = TenantCache::default();
    let mut keys = Vec::with_capacity(tenants);
    {
        let list: ObjectList<Decoded<Tenant>> = serde_json::from_str(&tenant_page).unwrap();
        cache.apply(&Event::Init);
        for mut object in list.items {
            strip::strip(&mut object);
            let event = decode::readable(Event::InitApply(object), &mut |_| {
                panic!("every object decodes")
            })
            .unwrap();
            keys.push(cache.apply_keyed(&event).key.unwrap());
        }
        cache.apply(&Event::InitDone);
    }
    // The keys' vector is the bench's, not the cache's.
    let vector = (keys.capacity() * std::mem::size_of::<TenantKey>()) as isize;
    let (bytes, allocations) = held(&region);
    let (bytes, allocations) = (bytes - vector, allocations - 1);
    assert_eq!(cache.len(), tenants);
    println!(
        "tenant cache (TenantCache, compact): {:.0} bytes ({:.1} allocations) per Tenant",
        bytes as f64 / tenants as f64,
        allocations as f64 / tenants as f64
    );

    // The claims index: one claim per tenant, as the tenant watch leaves it once a pass has
    // taken the changes (keyed by the tenant cache's keys, which it shares).
    let claims = Claims::default();
    let told: Vec<_> = keys.iter().map(|key| cache.get(key).unwrap()).collect();
    let region = Region::new(GLOBAL);
    for (key, tenant) in keys.iter().zip(&told) {
        claims.observe(key, None, tenant);
    }
    drop(claims.unbacked(&cache, |_| None));
    let (bytes, allocations) = held(&region);
    println!(
        "claims index: {:.0} bytes ({:.1} allocations) per Tenant",
        bytes as f64 / tenants as f64,
        allocations as f64 / tenants as f64
    );
    assert_eq!(claims.len(), tenants);
}
