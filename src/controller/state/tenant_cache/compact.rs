//! A cached Tenant in as few bytes as it can be told back from: what [`strip`] keeps of a Tenant,
//! and nothing of its struct's empty room.
//!
//! Rules enforced here:
//! - lossless: [`Compact::tenant`] gives back exactly the stripped Tenant [`Compact::of`] was
//!   made from (a property test checks it);
//! - names shared by many tenants (node names, a condition's type, status and reason) are
//!   interned: one allocation each for the whole cache;
//! - a condition's message that repeats the status message is kept once; the reservation
//!   finalizer, which nearly every tenant carries alone, is a flag.
//!
//! [`strip`]: crate::controller::state::strip::strip

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::api::Claim;
use crate::api::{
    Condition, MigrationStatus, ResourceAmounts, Tenant, TenantPhase, TenantSpec, TenantStatus,
};
use crate::api::{DO_NOT_DISRUPT_ANNOTATION, TENANT_FINALIZER};

/// One allocation per distinct name, shared by every tenant that uses it.
#[derive(Debug, Default)]
pub struct Interner(HashSet<Arc<str>>);

impl Interner {
    pub fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(known) = self.0.get(name) {
            return known.clone();
        }
        let name: Arc<str> = Arc::from(name);
        self.0.insert(name.clone());
        name
    }

    /// Forgets the names no tenant uses any more.
    pub fn prune(&mut self) {
        self.0.retain(|name| Arc::strong_count(name) > 1);
    }
}

/// A UID: in the canonical form the API server gives (lowercase 8-4-4-4-12 hex), its 128 bits
/// (no allocation); otherwise its text.
#[derive(Clone, Debug, PartialEq)]
enum Uid {
    Uuid(u128),
    Text(Box<str>),
}

impl Uid {
    fn of(text: &str) -> Uid {
        Self::canonical(text).map_or_else(|| Uid::Text(Box::from(text)), Uid::Uuid)
    }

    /// The bits of a canonical UUID; `None` for any other text (which is kept as text, so
    /// telling it back is exact either way).
    fn canonical(text: &str) -> Option<u128> {
        if text.len() != 36 {
            return None;
        }
        let mut bits = 0u128;
        for (i, c) in text.chars().enumerate() {
            if matches!(i, 8 | 13 | 18 | 23) {
                if c != '-' {
                    return None;
                }
                continue;
            }
            let digit = match c {
                '0'..='9' | 'a'..='f' => c.to_digit(16)?,
                _ => return None,
            };
            bits = bits.checked_shl(4)? | u128::from(digit);
        }
        Some(bits)
    }

    /// Whether this is the UID `text` (no allocation: a canonical text is compared as bits).
    fn is(&self, text: &str) -> bool {
        match self {
            Uid::Uuid(bits) => Self::canonical(text) == Some(*bits),
            Uid::Text(own) => **own == *text,
        }
    }

    fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Uid::Text(text) => std::borrow::Cow::Borrowed(text),
            Uid::Uuid(bits) => std::borrow::Cow::Owned(format!(
                "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                bits >> 96,
                (bits >> 80) & 0xffff,
                (bits >> 64) & 0xffff,
                (bits >> 48) & 0xffff,
                bits & 0xffff_ffff_ffff
            )),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Finalizers {
    None,
    /// Exactly `[TENANT_FINALIZER]`.
    Reservation,
    Other(Box<[Box<str>]>),
}

#[derive(Clone, Debug, PartialEq)]
struct CompactCondition {
    type_: Arc<str>,
    status: Arc<str>,
    reason: Arc<str>,
    /// `None`: the status message.
    message: Option<Box<str>>,
    last_transition_time: Time,
    observed_generation: Option<i64>,
}

#[derive(Clone, Debug, PartialEq)]
struct CompactStatus {
    phase: TenantPhase,
    node_name: Option<Arc<str>>,
    reserved: ResourceAmounts,
    message: Box<str>,
    observed_generation: Option<i64>,
    conditions: Box<[CompactCondition]>,
    migration: Option<Box<MigrationStatus>>,
}

/// A cached Tenant, less its name and namespace (the cache's key holds them).
#[derive(Clone, Debug, PartialEq)]
pub struct Compact {
    uid: Option<Uid>,
    resource_version: Option<Box<str>>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    /// `deletionTimestamp`, `deletionGracePeriodSeconds` and the `do-not-disrupt` annotation
    /// (the one annotation kept: `strip`), rare (boxed: a pointer otherwise).
    rare: Option<Box<Rare>>,
    finalizers: Finalizers,
    spec: TenantSpec,
    status: Option<CompactStatus>,
}

/// What few tenants carry.
#[derive(Clone, Debug, Default, PartialEq)]
struct Rare {
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    do_not_disrupt: Option<Box<str>>,
}

fn boxed(text: &Option<String>) -> Option<Box<str>> {
    text.as_deref().map(Box::from)
}

impl Compact {
    /// The compact form of a stripped tenant.
    pub fn of(tenant: &Tenant, names: &mut Interner) -> Compact {
        let meta = &tenant.metadata;
        let finalizers = match meta.finalizers.as_deref() {
            None => Finalizers::None,
            Some([only]) if only == TENANT_FINALIZER => Finalizers::Reservation,
            Some(all) => Finalizers::Other(all.iter().map(|f| Box::from(f.as_str())).collect()),
        };
        let status = tenant.status.as_ref().map(|status| CompactStatus {
            phase: status.phase,
            node_name: (!status.node_name.is_empty()).then(|| names.intern(&status.node_name)),
            reserved: status.reserved,
            message: Box::from(status.message.as_str()),
            observed_generation: status.observed_generation,
            conditions: status
                .conditions
                .iter()
                .map(|c| CompactCondition {
                    type_: names.intern(&c.type_),
                    status: names.intern(&c.status),
                    reason: names.intern(&c.reason),
                    message: (c.message != status.message).then(|| Box::from(c.message.as_str())),
                    last_transition_time: c.last_transition_time.clone(),
                    observed_generation: c.observed_generation,
                })
                .collect(),
            migration: status.migration.clone().map(Box::new),
        });
        Compact {
            uid: meta.uid.as_deref().map(Uid::of),
            resource_version: boxed(&meta.resource_version),
            generation: meta.generation,
            creation_timestamp: meta.creation_timestamp.clone(),
            rare: {
                let rare = Rare {
                    deletion_timestamp: meta.deletion_timestamp.clone(),
                    deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
                    do_not_disrupt: meta
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(DO_NOT_DISRUPT_ANNOTATION))
                        .map(|v| Box::from(v.as_str())),
                };
                (rare != Rare::default()).then(|| Box::new(rare))
            },
            finalizers,
            spec: tenant.spec.clone(),
            status,
        }
    }

    pub fn uid(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.uid.as_ref().map(Uid::text)
    }

    pub fn generation(&self) -> Option<i64> {
        self.generation
    }

    /// What its status claims to hold (`None` without a UID), read without telling it back.
    pub fn claim(&self) -> Option<Claim> {
        let status = self.status.as_ref();
        Some(Claim {
            uid: self.uid()?.into(),
            node: status
                .and_then(|s| s.node_name.clone())
                .unwrap_or_else(|| Arc::from("")),
            reserved: status.map(|s| s.reserved).unwrap_or_default(),
            phase: status.map(|s| s.phase).unwrap_or_default(),
        })
    }

    /// The node its status names, if it has this UID: `Some(None)` when the status names none.
    /// Allocates nothing (node repair asks it for every entry of every changed node).
    pub fn node_named_if_uid(&self, uid: &str) -> Option<Option<Arc<str>>> {
        self.uid.as_ref().filter(|own| own.is(uid))?;
        Some(self.status.as_ref().and_then(|s| s.node_name.clone()))
    }

    /// Whether this is the version of this resourceVersion.
    pub fn is_version(&self, resource_version: Option<&str>) -> bool {
        resource_version.is_some() && self.resource_version.as_deref() == resource_version
    }

    pub fn is_deleting(&self) -> bool {
        self.rare
            .as_ref()
            .is_some_and(|r| r.deletion_timestamp.is_some())
    }

    /// The whole tenant again, named `name` in `namespace`.
    pub fn tenant(&self, name: &str, namespace: Option<&str>) -> Tenant {
        let finalizers = match &self.finalizers {
            Finalizers::None => None,
            Finalizers::Reservation => Some(vec![TENANT_FINALIZER.to_owned()]),
            Finalizers::Other(all) => Some(all.iter().map(|f| f.to_string()).collect()),
        };
        let status = self.status.as_ref().map(|status| TenantStatus {
            phase: status.phase,
            node_name: status.node_name.as_deref().unwrap_or_default().to_owned(),
            reserved: status.reserved,
            message: status.message.to_string(),
            observed_generation: status.observed_generation,
            conditions: status
                .conditions
                .iter()
                .map(|c| Condition {
                    type_: c.type_.to_string(),
                    status: c.status.to_string(),
                    reason: c.reason.to_string(),
                    message: c.message.as_deref().unwrap_or(&status.message).to_owned(),
                    last_transition_time: c.last_transition_time.clone(),
                    observed_generation: c.observed_generation,
                })
                .collect(),
            migration: status.migration.as_deref().cloned(),
        });
        Tenant {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: namespace.map(str::to_owned),
                uid: self.uid().map(std::borrow::Cow::into_owned),
                resource_version: self.resource_version.as_deref().map(str::to_owned),
                generation: self.generation,
                creation_timestamp: self.creation_timestamp.clone(),
                deletion_timestamp: self
                    .rare
                    .as_ref()
                    .and_then(|r| r.deletion_timestamp.clone()),
                deletion_grace_period_seconds: self
                    .rare
                    .as_ref()
                    .and_then(|r| r.deletion_grace_period_seconds),
                finalizers,
                annotations: self
                    .rare
                    .as_ref()
                    .and_then(|r| r.do_not_disrupt.as_ref())
                    .map(|v| {
                        std::collections::BTreeMap::from([(
                            DO_NOT_DISRUPT_ANNOTATION.to_owned(),
                            v.to_string(),
                        )])
                    }),
                ..ObjectMeta::default()
            },
            spec: self.spec.clone(),
            status,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::arithmetic_side_effects,
        clippy::type_complexity
    )]
    use super::*;
    use crate::api::TenantMode;
    use crate::controller::state::strip;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn time(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), "[a-z0-9 ,;-]{1,40}"]
    }

    fn condition(status_message: String) -> impl Strategy<Value = Condition> {
        (
            prop_oneof![Just("Placed".to_owned()), "[A-Z][a-z]{0,8}"],
            prop_oneof![Just("True".to_owned()), Just("False".to_owned())],
            "[A-Z][a-zA-Z]{0,12}",
            prop_oneof![Just(status_message), text()],
            0i64..2_000_000_000,
            proptest::option::of(0i64..100),
        )
            .prop_map(
                |(type_, status, reason, message, at, observed_generation)| Condition {
                    type_,
                    status,
                    reason,
                    message,
                    last_transition_time: time(at),
                    observed_generation,
                },
            )
    }

    fn status() -> impl Strategy<Value = TenantStatus> {
        (
            prop_oneof![
                Just(TenantPhase::Active),
                Just(TenantPhase::PendingCapacity),
                Just(TenantPhase::Migrating)
            ],
            prop_oneof![Just(String::new()), "node-[a-c]"],
            (0i64..100, 0i64..100, 0i64..100),
            text(),
            proptest::option::of(0i64..100),
            proptest::option::of(("node-[a-c]", "node-[a-c]")),
        )
            .prop_flat_map(
                |(phase, node_name, (t, m, s), message, observed_generation, migration)| {
                    proptest::collection::vec(condition(message.clone()), 0..3).prop_map(
                        move |conditions| TenantStatus {
                            phase,
                            node_name: node_name.clone(),
                            reserved: ResourceAmounts {
                                threads: t,
                                memory_gb: m,
                                storage_gb: s,
                            },
                            message: message.clone(),
                            observed_generation,
                            conditions,
                            migration: migration
                                .clone()
                                .map(|(from, to)| MigrationStatus { from, to }),
                        },
                    )
                },
            )
    }

    fn finalizers() -> impl Strategy<Value = Option<Vec<String>>> {
        proptest::option::of(proptest::collection::vec(
            prop_oneof![Just(TENANT_FINALIZER.to_owned()), "[a-z./]{1,20}"],
            0..3,
        ))
    }

    fn tenant() -> impl Strategy<Value = Tenant> {
        (
            ("[a-z]{1,8}", proptest::option::of("[a-z]{1,8}")),
            (
                proptest::option::of("[a-f0-9-]{1,36}"),
                proptest::option::of("[0-9]{1,8}"),
            ),
            (
                proptest::option::of(0i64..100),
                proptest::option::of(0i64..2_000_000_000),
                proptest::option::of(0i64..2_000_000_000),
                proptest::option::of(0i64..60),
            ),
            (finalizers(), proptest::option::of("true|false|[a-z]{0,5}")),
            (
                1i64..100,
                1i64..100,
                0i64..100,
                any::<bool>(),
                proptest::option::of(1i32..10),
                any::<bool>(),
            ),
            proptest::collection::btree_map("[a-z]{1,5}", "[a-z]{0,5}", 0..3),
            proptest::option::of(status()),
        )
            .prop_map(
                |(
                    (name, namespace),
                    (uid, rv),
                    (generation, created, deleted, grace),
                    (finalizers, do_not_disrupt),
                    (t, m, s, cluster, replicas, suspend),
                    node_selector,
                    status,
                ): (
                    (String, Option<String>),
                    (Option<String>, Option<String>),
                    (Option<i64>, Option<i64>, Option<i64>, Option<i64>),
                    (Option<Vec<String>>, Option<String>),
                    (i64, i64, i64, bool, Option<i32>, bool),
                    BTreeMap<String, String>,
                    Option<TenantStatus>,
                )| {
                    let mut tenant = Tenant {
                        metadata: ObjectMeta {
                            name: Some(name),
                            namespace,
                            uid,
                            resource_version: rv,
                            generation,
                            creation_timestamp: created.map(time),
                            deletion_timestamp: deleted.map(time),
                            deletion_grace_period_seconds: grace,
                            finalizers,
                            labels: Some(BTreeMap::from([("pool".into(), "eu".into())])),
                            // The one annotation kept, beside one dropped.
                            annotations: Some(
                                do_not_disrupt
                                    .map(|v| (DO_NOT_DISRUPT_ANNOTATION.to_owned(), v))
                                    .into_iter()
                                    .chain([("note".to_owned(), "dropped".to_owned())])
                                    .collect(),
                            ),
                            ..ObjectMeta::default()
                        },
                        spec: TenantSpec {
                            resources: ResourceAmounts {
                                threads: t,
                                memory_gb: m,
                                storage_gb: s,
                            },
                            mode: if cluster {
                                TenantMode::Cluster
                            } else {
                                TenantMode::Standalone
                            },
                            replicas,
                            suspend,
                            node_selector,
                        },
                        status,
                    };
                    strip::strip(&mut tenant);
                    tenant
                },
            )
    }

    proptest! {
        #[test]
        fn a_compact_tenant_gives_back_the_stripped_tenant_it_was_made_from(tenant in tenant()) {
            let mut names = Interner::default();
            let compact = Compact::of(&tenant, &mut names);
            let back = compact.tenant(
                tenant.metadata.name.as_deref().unwrap(),
                tenant.metadata.namespace.as_deref(),
            );
            // Tenant has no PartialEq (kube's derive): compare what the API would see.
            prop_assert_eq!(compact.claim(), Claim::of(&tenant));
            prop_assert_eq!(back.metadata, tenant.metadata);
            prop_assert_eq!(back.spec, tenant.spec);
            prop_assert_eq!(back.status, tenant.status);
        }
    }

    #[test]
    fn a_canonical_uid_is_held_as_its_bits_and_told_back_exactly() {
        let uid = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
        assert!(matches!(Uid::of(uid), Uid::Uuid(_)));
        assert_eq!(Uid::of(uid).text(), uid);
        // Upper case, or anything else, is kept as it came.
        for text in [
            "0A1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D",
            "uid-1",
            "",
            "0a1b2c3d4e5f4a6b8c7d9e0f1a2b3c4d",
        ] {
            assert!(matches!(Uid::of(text), Uid::Text(_)), "{text}");
            assert_eq!(Uid::of(text).text(), text);
        }
    }

    #[test]
    fn a_compact_tenant_is_smaller_than_a_tenant() {
        // What each cached tenant costs before any of its strings.
        assert!(
            std::mem::size_of::<Compact>() * 2 < std::mem::size_of::<Tenant>(),
            "{} against {}",
            std::mem::size_of::<Compact>(),
            std::mem::size_of::<Tenant>()
        );
    }

    #[test]
    fn node_names_and_condition_words_are_shared_and_pruned_when_unused() {
        let mut names = Interner::default();
        let placed = |node: &str| {
            crate::testing::tenant("a")
                .on(node)
                .placed("Reserved")
                .build()
        };
        let first = Compact::of(&placed("node-eu-1"), &mut names);
        let second = Compact::of(&placed("node-eu-1"), &mut names);
        let (Some(a), Some(b)) = (&first.status, &second.status) else {
            panic!("both have a status");
        };
        assert!(Arc::ptr_eq(
            a.node_name.as_ref().unwrap(),
            b.node_name.as_ref().unwrap()
        ));
        assert!(Arc::ptr_eq(
            &a.conditions[0].reason,
            &b.conditions[0].reason
        ));
        drop((first, second));
        names.prune();
        assert!(names.0.is_empty());
    }
}
