//! The tenant watch cache: every Tenant of the pool as the watch last delivered it, stripped,
//! and what the runner needs to know about each change.
//!
//! ```text
//!   watch Tenants ──▶ decode ──▶ strip ──▶ TenantCache::apply ──▶ keys whose asks changed ──▶ runner
//!                                              │
//!                                              └──▶ get / state (reconcile, sweeps, page, gauges)
//! ```
//!
//! Rules enforced here:
//! - one entry per tenant, keyed by namespace and name; the key is shared (an `Arc`) with
//!   whoever queues the tenant, so a queued tenant costs a pointer, not a copy of its names;
//! - a relist (`Init` .. `InitDone`) is applied as one swap at `InitDone`: until then the
//!   cache shows the previous list, and a tenant deleted while the watch was down is gone after
//!   it;
//! - a tenant is due for a reconcile when what it asks of the controller changed: it is new (or
//!   re-created under its name: another UID), its generation (spec) changed, or its deletion
//!   started. A change of its status alone (our own writes) is not: the claims check it.
//!   Changes seen during a relist are due at its swap, when the cache shows them;
//! - each tenant is held in its compact form ([`compact`]) and told back whole when read;
//! - the keys of the tenants whose status says they wait for a machine ([`Glance::may_wait`])
//!   are kept beside the table, exactly: set or cleared at each event, rebuilt at a relist's
//!   swap. The look that buys reads these, not 100,000 glances a second.

mod compact;
mod key;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};

use kube::runtime::watcher;

use crate::api::Claim;
use crate::api::Tenant;

pub use key::{NameRef, Named, TenantKey, TenantName};

pub use compact::Glance;
use compact::{Compact, Interner};

// NB: boxed, so that the table's empty room (up to half of it after a resize) costs a pointer
// per slot rather than a whole tenant.
type Tenants = HashMap<TenantKey, Box<Compact>>;

#[derive(Debug, Default)]
struct Inner {
    tenants: Tenants,
    /// A relist in progress: the new list and the keys it makes due.
    relist: Option<(Tenants, Vec<TenantKey>)>,
    names: Interner,
    /// The keys in `tenants` whose glance may wait ([`Glance::may_wait`]).
    waiting: HashSet<TenantKey>,
}

/// What applying one watch event did.
#[derive(Debug, Default)]
pub struct Applied {
    /// The tenant it put in or took out (`Apply`, `InitApply`, `Delete`).
    pub key: Option<TenantKey>,
    /// The tenants now due for a reconcile.
    pub due: Vec<TenantKey>,
    /// What the version it replaced or took out claimed.
    pub before: Option<Claim>,
}

/// The tenant watch cache (cheap to clone: every clone is the same cache).
#[derive(Clone, Debug, Default)]
pub struct TenantCache {
    inner: Arc<RwLock<Inner>>,
}

/// Whether `tenant` asks of the controller what the `cached` version asked: a reconcile is due
/// when this changes (its UID, its generation, or whether its deletion started).
fn asks_the_same(cached: &Compact, tenant: &Tenant) -> bool {
    cached.has_uid(tenant.metadata.uid.as_deref())
        && cached.generation() == tenant.metadata.generation
        && cached.is_deleting() == tenant.metadata.deletion_timestamp.is_some()
}

fn told(key: &TenantKey, cached: &Compact) -> Arc<Tenant> {
    Arc::new(cached.tenant(key.name(), Some(key.namespace())))
}

impl Named for Tenant {
    fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}

/// A tenant, as a lookup of its key.
fn key_of(tenant: &Tenant) -> &dyn Named {
    tenant
}

impl TenantCache {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies one watch event; returns the keys of the tenants now due for a reconcile.
    pub fn apply(&self, event: &watcher::Event<Tenant>) -> Vec<TenantKey> {
        self.apply_keyed(event).due
    }

    /// [`apply`](Self::apply), with the key of the tenant the event names and what the version
    /// it replaced claimed (for the claims index).
    pub fn apply_keyed(&self, event: &watcher::Event<Tenant>) -> Applied {
        let mut inner = self.write();
        let Inner {
            tenants,
            relist,
            names,
            waiting,
        } = &mut *inner;
        match event {
            watcher::Event::Apply(tenant) => {
                let (key, due, before, waits) = upsert(tenants, None, tenant, names);
                if waits {
                    waiting.insert(key.clone());
                } else if !waiting.is_empty() {
                    waiting.remove(&key);
                }
                let due = due.then(|| key.clone()).into_iter().collect();
                Applied {
                    key: Some(key),
                    due,
                    before,
                }
            }
            watcher::Event::Delete(tenant) => match tenants.remove_entry(key_of(tenant)) {
                Some((key, gone)) => {
                    waiting.remove(&key);
                    Applied {
                        key: Some(key),
                        due: Vec::new(),
                        before: gone.claim(),
                    }
                }
                None => Applied::default(),
            },
            watcher::Event::Init => {
                *relist = Some((HashMap::new(), Vec::new()));
                Applied::default()
            }
            watcher::Event::InitApply(tenant) => {
                let (list, due) = relist.get_or_insert_with(Default::default);
                let (key, is_due, before, _) = upsert(list, Some(tenants), tenant, names);
                if is_due {
                    due.push(key.clone());
                }
                Applied {
                    key: Some(key),
                    due: Vec::new(),
                    before,
                }
            }
            watcher::Event::InitDone => {
                let (list, due) = relist.take().unwrap_or_default();
                *tenants = list;
                *waiting = tenants
                    .iter()
                    .filter(|(_, cached)| cached.glance().may_wait())
                    .map(|(key, _)| key.clone())
                    .collect();
                names.prune();
                Applied {
                    key: None,
                    due,
                    before: None,
                }
            }
        }
    }

    /// Puts a tenant in (tests and fixtures that fill a cache by hand).
    pub fn insert(&self, tenant: Tenant) {
        self.apply(&watcher::Event::Apply(tenant));
    }

    /// The cached tenant of this name and namespace.
    pub fn get(&self, tenant: &dyn Named) -> Option<Arc<Tenant>> {
        self.entry(tenant).map(|(_, tenant)| tenant)
    }

    /// What the cached tenant's status claims to hold, read without telling the tenant back.
    pub fn claim(&self, tenant: &dyn Named) -> Option<Claim> {
        self.read().tenants.get(tenant)?.claim()
    }

    /// The node the cached tenant's status names, if it is cached under this UID: `Some(None)`
    /// when its status names none, `on` when it is one of a spread tenant's placements.
    /// Allocates nothing but for a spread tenant.
    pub fn node_named_if_uid(
        &self,
        tenant: &dyn Named,
        uid: &str,
        on: &str,
    ) -> Option<Option<Arc<str>>> {
        self.read().tenants.get(tenant)?.node_named_if_uid(uid, on)
    }

    /// Whether the cached copy of this tenant is the version of `resource_version`.
    pub fn holds_version(&self, tenant: &dyn Named, resource_version: Option<&str>) -> bool {
        self.read()
            .tenants
            .get(tenant)
            .is_some_and(|cached| cached.is_version(resource_version))
    }

    /// Whether a tenant of this name and namespace is cached.
    pub fn contains(&self, tenant: &dyn Named) -> bool {
        self.read().tenants.contains_key(tenant)
    }

    /// The shared key of the cached tenant of this name.
    pub fn key(&self, tenant: &dyn Named) -> Option<TenantKey> {
        self.read()
            .tenants
            .get_key_value(tenant)
            .map(|(key, _)| key.clone())
    }

    /// The cached tenant and its shared key.
    pub fn entry(&self, tenant: &dyn Named) -> Option<(TenantKey, Arc<Tenant>)> {
        self.read()
            .tenants
            .get_key_value(tenant)
            .map(|(key, cached)| (key.clone(), told(key, cached)))
    }

    /// Every cached tenant, in no order.
    pub fn state(&self) -> Vec<Arc<Tenant>> {
        self.read()
            .tenants
            .iter()
            .map(|(key, cached)| told(key, cached))
            .collect()
    }

    /// Shows `visit` each cached tenant whose status says it may wait for a machine
    /// ([`Glance::may_wait`]), in no order, one at a time: the look holds one whole tenant at a
    /// time, not a copy of the cache, and reads only these (at 100,000 tenants, a glance at each
    /// once a second was 6 % of the controller's CPU while placing).
    pub fn each_waiting(&self, mut visit: impl FnMut(&Tenant)) {
        let inner = self.read();
        for key in &inner.waiting {
            if let Some(cached) = inner.tenants.get(key) {
                visit(&cached.tenant(key.name(), Some(key.namespace())));
            }
        }
    }

    /// Shows `visit` the node that each move a cached tenant's status records leaves, in no
    /// order, read from the compact form.
    pub fn each_move_from(&self, mut visit: impl FnMut(&str)) {
        for cached in self.read().tenants.values() {
            if let Some(from) = cached.moving_from() {
                visit(from);
            }
        }
    }

    /// Shows `visit` the UID and node selector of each cached tenant that may be moved for room
    /// ([`crate::api::Resting`]), in no order, read from the compact form: a make-room look that
    /// told back every Active tenant whole allocated tens of times per tenant, at every look
    /// while one waited.
    pub fn each_resting(
        &self,
        mut visit: impl FnMut(std::borrow::Cow<'_, str>, Option<&placement::Labels>),
    ) {
        for cached in self.read().tenants.values() {
            if cached.resting().may_move()
                && let Some(uid) = cached.uid()
            {
                visit(uid, cached.selector());
            }
        }
    }

    /// The keys of the cached tenants whose UID `pick` takes.
    pub fn keys_by_uid(&self, mut pick: impl FnMut(&str) -> bool) -> Vec<TenantKey> {
        self.read()
            .tenants
            .iter()
            .filter(|(_, cached)| pick(cached.uid().as_deref().unwrap_or_default()))
            .map(|(key, _)| key.clone())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.read().tenants.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Puts `tenant` into `into` (keeping the key already held there, or in `previous`, for its
/// name); returns its key, whether it is due, judged against the version in `previous` (a
/// relist) or in `into`, what that version claimed, and whether it now may wait
/// ([`Glance::may_wait`]).
fn upsert(
    into: &mut Tenants,
    previous: Option<&Tenants>,
    tenant: &Tenant,
    names: &mut Interner,
) -> (TenantKey, bool, Option<Claim>, bool) {
    let before = previous
        .unwrap_or(into)
        .get_key_value(key_of(tenant))
        .map(|(key, before)| (key.clone(), !asks_the_same(before, tenant), before.claim()));
    let (key, due, claim) = before.unwrap_or_else(|| {
        let namespace = names.intern(Named::namespace(tenant));
        let key = TenantName::new(namespace, Named::name(tenant));
        (Arc::new(key), true, None)
    });
    let compact = Box::new(Compact::of(tenant, names));
    let waits = compact.glance().may_wait();
    into.insert(key.clone(), compact);
    (key, due, claim, waits)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use super::*;
    use crate::testing::tenant;
    use kube::runtime::reflector::ObjectRef;

    fn names(keys: &[TenantKey]) -> Vec<&str> {
        let mut names: Vec<&str> = keys.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn a_tenant_is_due_when_new_and_when_what_it_asks_changes_not_for_its_status() {
        let cache = TenantCache::default();
        let acme = tenant("acme").uid("u1").generation(1).build();
        assert_eq!(
            names(&cache.apply(&watcher::Event::Apply(acme.clone()))),
            ["acme"]
        );
        // Only the status changed (our own write): not due.
        let written = tenant("acme")
            .uid("u1")
            .generation(1)
            .on("node-eu-1")
            .build();
        assert!(cache.apply(&watcher::Event::Apply(written)).is_empty());
        assert!(
            cache
                .get(&ObjectRef::new("acme").within("default"))
                .is_some_and(|t| t
                    .status
                    .as_ref()
                    .is_some_and(|s| s.node_name == "node-eu-1"))
        );
        // The spec changed.
        let edited = tenant("acme").uid("u1").generation(2).build();
        assert_eq!(
            names(&cache.apply(&watcher::Event::Apply(edited))),
            ["acme"]
        );
        // Re-created under its name.
        let again = tenant("acme").uid("u2").generation(2).build();
        assert_eq!(names(&cache.apply(&watcher::Event::Apply(again))), ["acme"]);
        // Being deleted.
        let deleting = tenant("acme").uid("u2").generation(2).deleting().build();
        assert_eq!(
            names(&cache.apply(&watcher::Event::Apply(deleting.clone()))),
            ["acme"]
        );
        assert!(cache.apply(&watcher::Event::Delete(deleting)).is_empty());
        assert!(cache.is_empty());
    }

    #[test]
    fn a_relist_shows_the_old_list_until_it_is_done_then_drops_what_it_did_not_list() {
        let cache = TenantCache::default();
        cache.insert(tenant("kept").uid("k").generation(1).build());
        cache.insert(tenant("gone").uid("g").generation(1).build());
        assert!(cache.apply(&watcher::Event::Init).is_empty());
        let unchanged = cache.apply(&watcher::Event::InitApply(
            tenant("kept").uid("k").generation(1).build(),
        ));
        let new = cache.apply(&watcher::Event::InitApply(
            tenant("new").uid("n").generation(1).build(),
        ));
        assert!(unchanged.is_empty() && new.is_empty());
        // Still the old list.
        assert_eq!(cache.len(), 2);
        assert!(
            cache
                .get(&ObjectRef::new("gone").within("default"))
                .is_some()
        );
        let due = cache.apply(&watcher::Event::InitDone);
        assert_eq!(names(&due), ["new"]);
        assert_eq!(cache.len(), 2);
        assert!(
            cache
                .get(&ObjectRef::new("gone").within("default"))
                .is_none()
        );
        assert!(
            cache
                .get(&ObjectRef::new("new").within("default"))
                .is_some()
        );
    }

    #[test]
    fn the_node_a_status_names_is_read_only_under_its_own_uid_and_a_version_is_matched_exactly() {
        let cache = TenantCache::default();
        let uid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        cache.insert(
            tenant("acme")
                .uid(uid)
                .on("node-eu-1")
                .resource_version(7)
                .build(),
        );
        cache.insert(tenant("idle").uid("not-a-uuid").build());
        let acme = NameRef {
            namespace: "default",
            name: "acme",
        };
        let idle = NameRef {
            namespace: "default",
            name: "idle",
        };
        assert_eq!(
            cache
                .node_named_if_uid(&acme, uid, "node-eu-2")
                .flatten()
                .as_deref(),
            Some("node-eu-1")
        );
        // Another UID, the same one in capitals (not the API server's form), another tenant.
        assert_eq!(
            cache.node_named_if_uid(&acme, "0f8fad5b-d9cb-469f-a165-70867728950f", "n"),
            None
        );
        assert_eq!(
            cache.node_named_if_uid(&acme, &uid.to_uppercase(), "n"),
            None
        );
        assert_eq!(
            cache.node_named_if_uid(
                &NameRef {
                    name: "other",
                    ..acme
                },
                uid,
                "n"
            ),
            None
        );
        // A UID kept as text, and a status that names no node.
        assert_eq!(
            cache.node_named_if_uid(&idle, "not-a-uuid", "n"),
            Some(None)
        );
        assert!(cache.holds_version(&acme, Some("7")));
        assert!(!cache.holds_version(&acme, Some("8")));
        assert!(!cache.holds_version(&acme, None));
    }

    /// The waiting keys, read the slow way: a glance at every cached tenant.
    fn waiting_by_glance(cache: &TenantCache) -> Vec<String> {
        let mut names: Vec<String> = cache
            .state()
            .iter()
            .filter(|t| Glance::of(t).may_wait())
            .map(|t| t.name().to_owned())
            .collect();
        names.sort_unstable();
        names
    }

    fn waiting_kept(cache: &TenantCache) -> Vec<String> {
        let mut names = Vec::new();
        cache.each_waiting(|t| names.push(t.name().to_owned()));
        names.sort_unstable();
        names
    }

    /// One of the states a tenant's status may say: 0 none, 1 waiting for its first
    /// placement, 2 placed, 3 a blocked move, 4 a move under way.
    fn in_state(name: &str, state: u8) -> Tenant {
        let t = tenant(name).uid(name).generation(1);
        match state {
            1 => t.phase(crate::api::TenantPhase::PendingCapacity),
            2 => t.on("node-a"),
            3 => t.on("node-a").placed("MigrationBlocked"),
            4 => t.on("node-a").migrating("node-a", "node-b"),
            _ => t,
        }
        .build()
    }

    proptest::proptest! {
        /// The keys kept as waiting are exactly those a glance at each tenant finds, after any
        /// run of changes, deletions and relists.
        #[test]
        fn the_waiting_keys_are_those_a_glance_at_each_finds(
            events in proptest::collection::vec((0u8..4, 0usize..5, 0u8..5), 0..60)
        ) {
            let cache = TenantCache::default();
            let names = ["a", "b", "c", "d", "e"];
            for (kind, who, state) in events {
                let t = in_state(names[who], state);
                match kind {
                    0 => { cache.apply(&watcher::Event::Apply(t)); }
                    1 => { cache.apply(&watcher::Event::Delete(t)); }
                    // A relist listing this tenant in its new state and, as they are, the
                    // others named before "c" (the rest are gone after it).
                    2 => {
                        let listed: Vec<Tenant> = cache
                            .state()
                            .iter()
                            .filter(|c| c.name() != names[who] && c.name() < "c")
                            .map(|c| (**c).clone())
                            .collect();
                        cache.apply(&watcher::Event::Init);
                        for other in listed {
                            cache.apply(&watcher::Event::InitApply(other));
                        }
                        cache.apply(&watcher::Event::InitApply(t));
                        cache.apply(&watcher::Event::InitDone);
                    }
                    _ => { cache.apply(&watcher::Event::Apply(in_state(names[who], 1))); }
                }
                proptest::prop_assert_eq!(waiting_kept(&cache), waiting_by_glance(&cache));
            }
        }
    }

    #[test]
    fn a_tenant_keeps_one_key_however_often_it_changes() {
        let cache = TenantCache::default();
        let first = cache.apply(&watcher::Event::Apply(
            tenant("acme").uid("u").generation(1).build(),
        ));
        let second = cache.apply(&watcher::Event::Apply(
            tenant("acme").uid("u").generation(2).build(),
        ));
        assert!(Arc::ptr_eq(&first[0], &second[0]));
        let (key, _) = cache
            .entry(&ObjectRef::new("acme").within("default"))
            .expect("cached");
        assert!(Arc::ptr_eq(&key, &first[0]));
    }
}
