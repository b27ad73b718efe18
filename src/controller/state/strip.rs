//! What the watch caches keep of each object: only what the controller reads.
//!
//! ```text
//!   LIST / WATCH ──▶ decode ──▶ strip ──▶ node Store, TenantCache, claims, ...
//!                               drops metadata the controller never reads
//! ```
//!
//! Rules enforced here:
//! - every object is stripped once, as the watch delivers it, before any cache or index keeps
//!   it; [`strip`] is the one function that decides what is kept (the memory bench measures it);
//! - kept of metadata: name, namespace, uid, resourceVersion, generation, creationTimestamp,
//!   deletionTimestamp, deletionGracePeriodSeconds, finalizers, and labels of the kinds whose
//!   labels are read ([`Cached::LABELS_READ`]: Node, NodeClass, NodeRequest), and the two
//!   annotations consolidation reads (`do-not-disrupt`, `consolidating`). Dropped:
//!   managedFields, every other annotation (kubectl's last-applied copy doubles an object), ownerReferences,
//!   generateName, selfLink, and a Tenant's labels (its pool is chosen by the watch's label
//!   selector, server side; a tenant outside it is checked by a direct read);
//! - a controller's trigger keeps an object's name and namespace only ([`trigger`]): the
//!   scheduler's request for it never carries the resourceVersion and UID;
//! - spec and status are kept whole: the status the controller writes is compared with the cached
//!   one (a condition keeps its transition time while it stays the same). A core `v1/Node`
//!   (watched to register nodes) is the exception: it keeps only what the registration reads
//!   (`spec.unschedulable`, `status.allocatable` and the Ready condition); its image list,
//!   addresses and the rest, often tens of KB, are dropped ([`Cached::strip_body`]).
//!
//! NB: a cached object is never written back whole: Node status is written with a JSON patch of
//! the status subresource (the resourceVersion and what changed in `status`), and Tenants are
//! patched. Were a write to send a cached object's metadata, the dropped fields would
//! be erased on the server.

use kube::Resource;
use kube::runtime::reflector::ObjectRef;

use k8s_openapi::api::core::v1::{
    Node as CoreNode, NodeSpec as CoreNodeSpec, NodeStatus as CoreNodeStatus,
};

use super::decode::Decoded;
use crate::api::{
    CONSOLIDATING_ANNOTATION, DO_NOT_DISRUPT_ANNOTATION, Node, NodeClass, NodeRequest, NodeStatus,
    Tenant,
};

/// A kind the controller caches from a watch.
pub trait Cached: Resource {
    /// Whether the controller reads this kind's labels (a Node's: tenants' node selectors and
    /// the node-request label).
    const LABELS_READ: bool;

    /// Drops what the controller never reads of the spec and status (nothing, unless a kind
    /// says otherwise).
    fn strip_body(&mut self) {}
}

/// What registration reads of a core Node: its labels, `spec.unschedulable`,
/// `status.allocatable` and the Ready condition.
impl Cached for CoreNode {
    const LABELS_READ: bool = true;

    fn strip_body(&mut self) {
        let unschedulable = self.spec.as_ref().and_then(|s| s.unschedulable);
        self.spec = Some(CoreNodeSpec {
            unschedulable,
            ..CoreNodeSpec::default()
        });
        let status = self.status.take().unwrap_or_default();
        let ready = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.type_ == "Ready")
            .collect();
        self.status = Some(CoreNodeStatus {
            allocatable: status.allocatable,
            conditions: Some(ready),
            ..CoreNodeStatus::default()
        });
    }
}

impl Cached for Tenant {
    const LABELS_READ: bool = false;
}

impl Cached for Node {
    const LABELS_READ: bool = true;
}

// Few objects: their labels are kept, read or not.
impl Cached for NodeClass {
    const LABELS_READ: bool = true;
}

impl Cached for NodeRequest {
    const LABELS_READ: bool = true;
}

impl<K: Cached<DynamicType = ()>> Cached for Decoded<K> {
    const LABELS_READ: bool = K::LABELS_READ;

    fn strip_body(&mut self) {
        if let Decoded::Readable(object) | Decoded::Salvaged(object, _) = self {
            object.strip_body();
        }
    }
}

/// The annotations the controller reads (consolidation's), kept on any kind.
const ANNOTATIONS_READ: [&str; 2] = [DO_NOT_DISRUPT_ANNOTATION, CONSOLIDATING_ANNOTATION];

/// Drops what the controller never reads of `object` (see the module doc). Idempotent.
pub fn strip<K: Cached>(object: &mut K) {
    object.strip_body();
    let meta = object.meta_mut();
    // `None`, not emptied: an empty Vec or map may keep its allocation.
    meta.managed_fields = None;
    meta.annotations = meta.annotations.take().and_then(|mut annotations| {
        annotations.retain(|key, _| ANNOTATIONS_READ.contains(&key.as_str()));
        (!annotations.is_empty()).then_some(annotations)
    });
    meta.owner_references = None;
    meta.generate_name = None;
    meta.self_link = None;
    if !K::LABELS_READ {
        meta.labels = None;
    }
}

/// A placement Node as the registration keeps it: without its status, which the registration
/// never reads (a Node's allocations are most of it), but for the mark of a Node the types
/// cannot hold ([`Node::unreadable_reason`]), which stays.
pub fn without_status(node: &mut Node) {
    node.status = node
        .status
        .take()
        .and_then(|status| status.unreadable)
        .map(|why| NodeStatus {
            unreadable: Some(why),
            ..NodeStatus::default()
        });
}

/// `object`, [`strip`]ped.
pub fn stripped<K: Cached>(mut object: K) -> K {
    strip(&mut object);
    object
}

/// What a controller's trigger needs of an object: its name and namespace.
///
/// The scheduler holds a request per object while it is due (a Node waits there for its next
/// sweep), and a request made from the whole object also copies its resourceVersion and UID,
/// which no reconcile reads (a reconcile gets the object from the cache). The cache keeps its
/// own copy.
pub fn trigger<K: Resource>(mut object: K) -> K {
    let meta = object.meta_mut();
    meta.resource_version = None;
    meta.uid = None;
    object
}

/// An object's reference by name and namespace only (see [`trigger`]).
// NB: not `ObjectRef::from_obj`, which also copies the resourceVersion and UID (ignored by its
// equality and hash): two strings more per reference for nothing.
pub fn trigger_ref<K: Resource<DynamicType = ()>>(object: &K) -> ObjectRef<K> {
    let meta = object.meta();
    let reference = ObjectRef::new(meta.name.as_deref().unwrap_or_default());
    match meta.namespace.as_deref() {
        Some(namespace) => reference.within(namespace),
        None => reference,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::testing;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, OwnerReference};
    use std::collections::BTreeMap;

    fn cluttered(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
        meta.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl-client-side-apply".into()),
            ..ManagedFieldsEntry::default()
        }]);
        meta.annotations = Some(BTreeMap::from([(
            "kubectl.kubernetes.io/last-applied-configuration".into(),
            "{}".into(),
        )]));
        meta.owner_references = Some(vec![OwnerReference::default()]);
        meta.generate_name = Some("t-".into());
        meta.self_link = Some("/apis/x".into());
    }

    #[test]
    fn a_tenant_keeps_what_the_controller_reads_and_nothing_else() {
        let mut tenant = testing::tenant("a")
            .label("team", "x")
            .finalizer("f")
            .generation(3)
            .resource_version(9)
            .on("n")
            .reserved(1, 2, 3)
            .placed("Reserved")
            .build();
        cluttered(&mut tenant.metadata);
        let before = tenant.clone();
        strip(&mut tenant);
        let m = &tenant.metadata;
        assert_eq!(
            (
                m.managed_fields.as_ref(),
                m.annotations.as_ref(),
                m.labels.as_ref()
            ),
            (None, None, None)
        );
        assert_eq!(
            (m.owner_references.as_ref(), m.generate_name.as_ref()),
            (None, None)
        );
        assert_eq!(m.self_link, None);
        // What is read stays as it was.
        assert_eq!(
            (&m.name, &m.namespace, &m.uid),
            (
                &before.metadata.name,
                &before.metadata.namespace,
                &before.metadata.uid
            )
        );
        assert_eq!(
            (&m.resource_version, m.generation),
            (
                &before.metadata.resource_version,
                before.metadata.generation
            )
        );
        assert_eq!(
            (&m.finalizers, &m.creation_timestamp),
            (
                &before.metadata.finalizers,
                &before.metadata.creation_timestamp
            )
        );
        assert_eq!(
            (&tenant.spec, &tenant.status),
            (&before.spec, &before.status)
        );
        let again = tenant.clone();
        strip(&mut tenant);
        assert_eq!(
            serde_json::to_value(&tenant).unwrap(),
            serde_json::to_value(&again).unwrap(),
            "idempotent"
        );
    }

    #[test]
    fn a_trigger_names_the_same_object_without_its_version_and_uid() {
        use kube::runtime::reflector::ObjectRef;
        let tenant = testing::tenant("a").resource_version(9).build();
        let whole = ObjectRef::from_obj(&tenant);
        let named = ObjectRef::from_obj(&trigger(tenant));
        assert_eq!(named, whole);
        assert_eq!(
            (named.extra.resource_version, named.extra.uid),
            (None, None)
        );
        assert!(whole.extra.uid.is_some());
    }

    #[test]
    fn a_node_keeps_its_labels_for_node_selectors() {
        let mut node = testing::node("n")
            .label("zone", "eu-1")
            .holding("a", (1, 1, 1))
            .build();
        cluttered(&mut node.metadata);
        let labels = node.metadata.labels.clone();
        strip(&mut node);
        assert_eq!(node.metadata.labels, labels);
        assert_eq!(node.metadata.annotations, None);
        assert_eq!(node.metadata.managed_fields, None);
    }

    #[test]
    fn the_annotations_consolidation_reads_are_kept_and_no_other() {
        let mut tenant = testing::tenant("a").build();
        cluttered(&mut tenant.metadata);
        let annotations = tenant.metadata.annotations.get_or_insert_default();
        annotations.insert(DO_NOT_DISRUPT_ANNOTATION.into(), "true".into());
        let mut node = testing::node("n").build();
        cluttered(&mut node.metadata);
        let annotations = node.metadata.annotations.get_or_insert_default();
        annotations.insert(
            CONSOLIDATING_ANNOTATION.into(),
            "2026-12-03T08:00:00Z".into(),
        );
        strip(&mut tenant);
        strip(&mut node);
        let kept = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            meta.annotations
                .clone()
                .unwrap()
                .into_keys()
                .collect::<Vec<_>>()
        };
        assert_eq!(kept(&tenant.metadata), [DO_NOT_DISRUPT_ANNOTATION]);
        assert_eq!(kept(&node.metadata), [CONSOLIDATING_ANNOTATION]);
    }

    #[test]
    fn a_core_node_keeps_only_what_registration_reads() {
        use k8s_openapi::api::core::v1::{ContainerImage, NodeAddress, NodeCondition, Taint};
        let mut core = testing::core_node("n")
            .label("pool", "eu")
            .cordoned()
            .build();
        cluttered(&mut core.metadata);
        let spec = core.spec.as_mut().unwrap();
        spec.taints = Some(vec![Taint::default()]);
        spec.provider_id = Some("metal://n".into());
        let status = core.status.as_mut().unwrap();
        status.images = Some(vec![ContainerImage::default(); 50]);
        status.addresses = Some(vec![NodeAddress::default()]);
        status.capacity = status.allocatable.clone();
        status.conditions.as_mut().unwrap().push(NodeCondition {
            type_: "MemoryPressure".into(),
            status: "False".into(),
            ..NodeCondition::default()
        });
        let before = core.clone();
        strip(&mut core);
        assert_eq!(core.metadata.labels, before.metadata.labels);
        assert_eq!(core.metadata.annotations, None);
        let spec = core.spec.as_ref().unwrap();
        assert_eq!(
            (spec.unschedulable, &spec.taints, &spec.provider_id),
            (Some(true), &None, &None)
        );
        let status = core.status.as_ref().unwrap();
        assert_eq!(
            status.allocatable,
            before.status.as_ref().unwrap().allocatable
        );
        assert_eq!(
            (&status.images, &status.addresses, &status.capacity),
            (&None, &None, &None)
        );
        let kept: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(kept, ["Ready"]);
        assert_eq!(
            crate::api::Registration::of(&core),
            crate::api::Registration::of(&before),
            "the registration reads the same"
        );
    }

    #[test]
    fn the_registrations_placement_nodes_keep_no_status_but_the_unreadable_mark() {
        let mut node = testing::node("n").holding("a", (1, 1, 1)).build();
        without_status(&mut node);
        assert_eq!(node.status, None);
        let mut unreadable = Node::unreadable(
            testing::node("u").build().metadata,
            "{}",
            "spec.capacity: bad".into(),
        );
        without_status(&mut unreadable);
        assert_eq!(unreadable.unreadable_reason(), Some("spec.capacity: bad"));
    }
}
