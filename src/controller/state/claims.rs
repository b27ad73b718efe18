//! Claims: what each tenant's status says it holds, checked against the node it names.
//!
//! ```text
//!   Tenant status (nodeName, reserved) ──▶ Claims (by node) ◀── node changed / deleted
//!                                              │  one check per requeue window, against the
//!                                              ▼  engine's view (never behind our own writes)
//!                            not backed by the node's entry ──▶ wake the tenant
//! ```
//!
//! Rules enforced here (docs/design.md, rule 10):
//! - a tenant's status and the node's entry for its UID are two records of one reservation; the
//!   node's entry is the truth. A claim is backed when the node it names exists and holds an
//!   entry of the tenant's UID with exactly the amounts the status shows, and the node a move
//!   the status records goes to holds one too; a status that names no node is backed unless its
//!   phase says it holds something (Active, Resizing, Migrating);
//! - when a node changes or goes, every tenant whose status names it (or a move to it) is
//!   checked; when a tenant's status changes (by us or by another actor), that tenant is
//!   checked; a tenant whose status stops naming a node is woken too (another actor may have
//!   wiped it while the node holds the entry). An unbacked tenant is woken: its reconcile
//!   restores the entry where it still fits, or places it again (see `placement::plan_restore`);
//! - a node showing an entry of a tenant whose status names no node is noted; if at the next
//!   pass the status still names none and the node still holds the entry, the tenant is woken
//!   (its reconcile takes the entry as its reservation);
//! - checks run in the waiting room's passes, against the engine's view, so our own write in
//!   flight (node first, tenant status second) is never mistaken for a loss.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use kube::runtime::reflector::ObjectRef;

use super::tenant_cache::Named;
use crate::api::{Claim, Node, Tenant};

/// A tenant's key: the tenant cache's, shared by every map and set that holds it.
type Key = super::TenantKey;

// NB: the claims themselves are not kept here: the tenant cache holds every status and answers
// what a tenant claims (`TenantCache::claim`), and hands over what a replaced version claimed.
#[derive(Debug, Default)]
struct Index {
    /// Tenants by the nodes their status names: its node and a recorded move's target (the one
    /// allocation of each node's name).
    by_node: HashMap<Arc<str>, HashSet<Key>>,
    /// To check at the next pass: tenants whose claim changed, and nodes that changed.
    changed_tenants: HashSet<Key>,
    changed_nodes: HashSet<String>,
    /// Tenants whose status stopped naming a node: woken whatever the nodes say.
    stopped_naming: HashSet<Key>,
    /// Tenants whose status named no node when a node showed an entry of theirs, with that node.
    unnamed: HashMap<Key, String>,
}

impl Index {
    fn unlink(&mut self, tenant: &dyn Named, node: &str) {
        if let Some(tenants) = self.by_node.get_mut(node) {
            tenants.remove(tenant);
            if tenants.is_empty() {
                self.by_node.remove(node);
            }
        }
    }
}

/// Every tenant's claim, indexed by node, and what changed since the last check.
#[derive(Debug, Default)]
pub struct Claims(Mutex<Index>);

impl Claims {
    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The watch delivered this tenant, cached under `key`, replacing a version that claimed
    /// `before`. Returns true when its claim changed (a check is due).
    pub fn observe(&self, key: &Key, before: Option<&Claim>, tenant: &Tenant) -> bool {
        let Some(claim) = Claim::of(tenant) else {
            return false;
        };
        if before == Some(&claim) {
            return false;
        }
        let mut index = self.lock();
        // Each claim names at most two nodes: compared in place, nothing allocated per write.
        let previous = || before.into_iter().flat_map(Claim::nodes);
        if previous().next().is_some() && claim.node.is_empty() {
            index.stopped_naming.insert(key.clone());
        }
        for gone in previous().filter(|n| !claim.nodes().any(|now| now == *n)) {
            index.unlink(key, gone);
        }
        for node in claim.nodes().filter(|n| !previous().any(|p| p == *n)) {
            let on_node = match index.by_node.get_key_value(node) {
                Some((name, _)) => name.clone(),
                None => node.clone(),
            };
            index
                .by_node
                .entry(on_node)
                .or_default()
                .insert(key.clone());
        }
        index.changed_tenants.insert(key.clone());
        true
    }

    /// The tenant is gone; it claimed `before`.
    pub fn forget(&self, tenant: &dyn Named, before: Option<&Claim>) {
        let mut index = self.lock();
        for node in before.map(Claim::nodes).into_iter().flatten() {
            index.unlink(tenant, node);
        }
        index.changed_tenants.remove(tenant);
        index.stopped_naming.remove(tenant);
        index.unnamed.remove(tenant);
    }

    /// `node` holds an entry of this tenant while its status names no node: a placement whose
    /// status is not written yet, or an entry nobody told the tenant of. Checked at the next
    /// pass, when our own status write has landed.
    pub fn unnamed_entry(&self, tenant: Key, node: &str) {
        self.lock().unnamed.insert(tenant, node.to_owned());
    }

    /// After a relist: forgets the tenants deleted while the watch was down.
    pub fn retain_present(&self, tenants: &super::TenantCache) {
        let mut index = self.lock();
        let Index {
            by_node,
            changed_tenants,
            stopped_naming,
            unnamed,
            ..
        } = &mut *index;
        by_node.retain(|_, on_node| {
            on_node.retain(|t| tenants.contains(t));
            !on_node.is_empty()
        });
        changed_tenants.retain(|t| tenants.contains(t));
        stopped_naming.retain(|t| tenants.contains(t));
        unnamed.retain(|t, _| tenants.contains(t));
    }

    /// A node changed or went: the claims on it are checked at the next pass.
    pub fn node_changed(&self, node: &str) {
        let mut index = self.lock();
        if index.by_node.contains_key(node) {
            index.changed_nodes.insert(node.to_owned());
        }
    }

    /// Takes what changed and returns the tenants to wake: those whose claims (as `tenants`
    /// holds them) the nodes they name (looked up by name as the engine sees them now) do not
    /// back, those whose status stopped naming a node, and those whose status still names none
    /// while a node holds an entry of theirs.
    pub fn unbacked(
        &self,
        tenants: &super::TenantCache,
        node: impl Fn(&str) -> Option<Arc<Node>>,
    ) -> Vec<ObjectRef<Tenant>> {
        let (mut wake, to_check, unnamed) = {
            let mut index = self.lock();
            let mut keys = std::mem::take(&mut index.changed_tenants);
            for changed in std::mem::take(&mut index.changed_nodes) {
                keys.extend(
                    index
                        .by_node
                        .get(changed.as_str())
                        .into_iter()
                        .flatten()
                        .cloned(),
                );
            }
            let to_check: Vec<Key> = keys.into_iter().collect();
            let wake: Vec<ObjectRef<Tenant>> = std::mem::take(&mut index.stopped_naming)
                .into_iter()
                .map(|key| key.to_ref())
                .collect();
            (wake, to_check, std::mem::take(&mut index.unnamed))
        };
        for (key, held_on) in unnamed {
            let Some(claim) = tenants.claim(&key) else {
                continue;
            };
            let held = node(&held_on).is_some_and(|n| n.entry_of(&claim.uid).is_some());
            let tenant = key.to_ref();
            if held && claim.node.is_empty() && !wake.contains(&tenant) {
                wake.push(tenant);
            }
        }
        for (key, claim) in to_check
            .into_iter()
            .filter_map(|key| tenants.claim(&key).map(|claim| (key, claim)))
        {
            let tenant = key.to_ref();
            if !claim.backed_by(&node) && !wake.contains(&tenant) {
                wake.push(tenant);
            }
        }
        wake
    }

    /// How many tenants are indexed by the node their status names (for tests).
    pub fn len(&self) -> usize {
        self.lock().by_node.values().map(HashSet::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::api::TenantPhase;
    use crate::controller::state::TenantCache;
    use crate::testing::{node, tenant};
    use kube::runtime::watcher::Event;

    /// The watch delivered `tenant`: the cache takes it, then the claims see it, as the
    /// controller's tenant watch does.
    fn observe(cache: &TenantCache, claims: &Claims, tenant: &Tenant) -> bool {
        let applied = cache.apply_keyed(&Event::Apply(tenant.clone()));
        claims.observe(&applied.key.unwrap(), applied.before.as_ref(), tenant)
    }

    /// `name` as its status says: `phase` on `node`, holding `threads` threads (and 1 GB, 1 GB).
    fn claiming(name: &str, phase: TenantPhase, node: &str, threads: i64) -> Tenant {
        tenant(name)
            .resources(threads, 1, 1)
            .phase(phase)
            .on(node)
            .reserved(threads, 1, 1)
            .build()
    }

    /// acme (2 threads), its status recording a move from n1 to n2.
    fn moving_acme() -> Tenant {
        tenant("acme")
            .resources(2, 1, 1)
            .reserved(2, 1, 1)
            .migrating("n1", "n2")
            .build()
    }

    #[test]
    fn a_claim_is_backed_only_by_an_entry_of_its_uid_with_its_amounts() {
        let active = Claim::of(&claiming("acme", TenantPhase::Active, "n1", 2)).unwrap();
        let cases = [
            (Some(node("n1").holding("acme", (2, 1, 1))), true),
            // The entry holds 4 threads, the status says 2: the records disagree.
            (Some(node("n1").holding("acme", (4, 1, 1))), false),
            (Some(node("n1").holding("other", (2, 1, 1))), false),
            (Some(node("n1")), false),
            // The node is gone.
            (None, false),
        ];
        for (node, backed) in cases {
            let node = node.map(|n| n.build());
            assert_eq!(active.backed_by(|_| node.as_ref()), backed, "{node:?}");
        }
        // A status that names no node claims nothing, unless its phase says it holds something.
        let nowhere = |_: &str| None::<&Node>;
        let waiting = Claim::of(&claiming("w", TenantPhase::PendingCapacity, "", 0)).unwrap();
        assert!(waiting.backed_by(nowhere));
        for phase in [
            TenantPhase::Active,
            TenantPhase::Resizing,
            TenantPhase::Migrating,
        ] {
            let blank = Claim::of(&claiming("b", phase, "", 2)).unwrap();
            assert!(!blank.backed_by(nowhere), "{phase}");
        }
    }

    #[test]
    fn a_recorded_move_is_backed_only_while_its_target_holds_an_entry_too() {
        let moving = moving_acme();
        let claim = Claim::of(&moving).unwrap();
        let source = node("n1").holding("acme", (2, 1, 1)).build();
        let target = node("n2").holding("acme", (2, 1, 1)).build();
        let empty = node("n2").build();
        let cases: [(Option<&Node>, Option<&Node>, bool); 4] = [
            (Some(&source), Some(&target), true),
            // Rolled back (or the status written by someone else): the target holds nothing.
            (Some(&source), Some(&empty), false),
            (Some(&source), None, false),
            // Finished without its status written: the source holds nothing.
            (Some(&node("n1").build()), Some(&target), false),
        ];
        for (n1, n2, backed) in cases {
            let lookup = |name: &str| if name == "n1" { n1 } else { n2 };
            assert_eq!(claim.backed_by(lookup), backed, "{n1:?} {n2:?}");
        }
        assert_eq!(
            claim.nodes().map(|n| &**n).collect::<Vec<_>>(),
            ["n1", "n2"]
        );
    }

    /// db, spread over n1, n2 and n3, one 2-thread replica on each (6 in all).
    fn spread_db() -> Tenant {
        let mut db = tenant("db")
            .resources(2, 1, 1)
            .spread(crate::api::TenantSpread::Nodes, 3)
            .phase(TenantPhase::Active)
            .on("n1")
            .reserved(6, 3, 3)
            .build();
        if let Some(status) = db.status.as_mut() {
            status.placements = ["n1", "n2", "n3"]
                .map(|node| crate::api::SpreadPlacement {
                    node: node.to_owned(),
                    zone: String::new(),
                    replicas: 1,
                })
                .to_vec();
        }
        db
    }

    #[test]
    fn a_spread_claim_is_backed_only_when_every_node_it_lists_holds_its_share() {
        let claim = Claim::of(&spread_db()).unwrap();
        assert_eq!(
            claim.nodes().map(|n| &**n).collect::<Vec<_>>(),
            ["n1", "n2", "n3"]
        );
        let replica = |name: &str| node(name).holding("db", (2, 1, 1)).build();
        let cases: [([Option<Node>; 3], bool); 4] = [
            (
                [
                    Some(replica("n1")),
                    Some(replica("n2")),
                    Some(replica("n3")),
                ],
                true,
            ),
            // One node lost its entry, or is gone: not backed.
            (
                [
                    Some(replica("n1")),
                    Some(node("n2").build()),
                    Some(replica("n3")),
                ],
                false,
            ),
            ([Some(replica("n1")), Some(replica("n2")), None], false),
            // Together they hold more than the status shows.
            (
                [
                    Some(replica("n1")),
                    Some(replica("n2")),
                    Some(node("n3").holding("db", (4, 1, 1)).build()),
                ],
                false,
            ),
        ];
        for (nodes, backed) in cases {
            let lookup = |name: &str| match name {
                "n1" => nodes[0].as_ref(),
                "n2" => nodes[1].as_ref(),
                _ => nodes[2].as_ref(),
            };
            assert_eq!(claim.backed_by(lookup), backed, "{nodes:?}");
        }
        // Cached, the claim is the same, and a change of any of its nodes checks it.
        let (cache, claims) = (TenantCache::default(), Claims::default());
        assert!(observe(&cache, &claims, &spread_db()));
        assert_eq!(cache.claim(&spread_db()), Some(claim));
        assert!(
            claims
                .unbacked(&cache, |n| Some(Arc::new(replica(n))))
                .is_empty()
        );
        claims.node_changed("n3");
        let woken = claims.unbacked(&cache, |n| {
            Some(Arc::new(if n == "n3" {
                node(n).build()
            } else {
                replica(n)
            }))
        });
        assert_eq!(woken.len(), 1);
    }

    #[test]
    fn a_change_of_the_node_a_move_goes_to_checks_the_tenant_moving_there() {
        let (cache, claims) = (TenantCache::default(), Claims::default());
        let moving = moving_acme();
        assert!(observe(&cache, &claims, &moving));
        assert_eq!(claims.len(), 2, "indexed under its node and its target");
        let n1 = Arc::new(node("n1").holding("acme", (2, 1, 1)).build());
        let n2 = Arc::new(node("n2").holding("acme", (2, 1, 1)).build());
        let both = |name: &str| Some(if name == "n1" { n1.clone() } else { n2.clone() });
        assert!(claims.unbacked(&cache, both).is_empty());
        // The target's entry goes (someone else's write): the tenant moving there is woken.
        claims.node_changed("n2");
        let wiped = Arc::new(node("n2").build());
        let target_wiped = |name: &str| {
            Some(if name == "n1" {
                n1.clone()
            } else {
                wiped.clone()
            })
        };
        assert_eq!(
            claims.unbacked(&cache, target_wiped),
            [ObjectRef::from_obj(&moving)]
        );
        // The move's record goes from the status: no longer indexed under n2.
        let settled = claiming("acme", TenantPhase::Active, "n1", 2);
        assert!(observe(&cache, &claims, &settled));
        assert_eq!(claims.len(), 1);
        assert!(claims.unbacked(&cache, |_| Some(n1.clone())).is_empty());
    }

    #[test]
    fn a_node_change_checks_every_claim_on_it_and_a_status_change_checks_that_tenant() {
        let (cache, claims) = (TenantCache::default(), Claims::default());
        let (acme, beta) = (
            claiming("acme", TenantPhase::Active, "n1", 2),
            claiming("beta", TenantPhase::Active, "n1", 3),
        );
        assert!(observe(&cache, &claims, &acme) && observe(&cache, &claims, &beta));
        assert!(
            !observe(&cache, &claims, &acme),
            "an unchanged claim is no news"
        );
        let n1 = Arc::new(
            node("n1")
                .holding("acme", (2, 1, 1))
                .holding("beta", (3, 1, 1))
                .build(),
        );
        assert!(claims.unbacked(&cache, |_| Some(n1.clone())).is_empty());
        // n1 is wiped: both are woken at the next check, and only then.
        claims.node_changed("n1");
        let wiped = Arc::new(node("n1").build());
        let mut woken = claims.unbacked(&cache, |_| Some(wiped.clone()));
        woken.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(
            woken,
            [ObjectRef::from_obj(&acme), ObjectRef::from_obj(&beta)]
        );
        assert!(claims.unbacked(&cache, |_| Some(wiped.clone())).is_empty());
        // A node nobody names is not checked.
        claims.node_changed("n2");
        assert!(claims.unbacked(&cache, |_| None).is_empty());
        // beta's status is edited to name n2, where it holds nothing.
        assert!(observe(
            &cache,
            &claims,
            &claiming("beta", TenantPhase::Active, "n2", 3)
        ));
        assert_eq!(
            claims.unbacked(&cache, |_| None),
            [ObjectRef::from_obj(&beta)]
        );
    }

    #[test]
    fn a_status_that_stops_naming_its_node_wakes_the_tenant_and_a_forgotten_one_is_not_checked() {
        let (cache, claims) = (TenantCache::default(), Claims::default());
        let acme = claiming("acme", TenantPhase::Active, "n1", 2);
        observe(&cache, &claims, &acme);
        let n1 = Arc::new(node("n1").holding("acme", (2, 1, 1)).build());
        assert!(claims.unbacked(&cache, |_| Some(n1.clone())).is_empty());
        // Someone blanks the status while n1 still holds the entry.
        observe(
            &cache,
            &claims,
            &claiming("acme", TenantPhase::Pending, "", 0),
        );
        assert_eq!(
            claims.unbacked(&cache, |_| Some(n1.clone())),
            [ObjectRef::from_obj(&acme)]
        );
        let gone = cache.apply_keyed(&Event::Delete(acme.clone()));
        claims.forget(&ObjectRef::from_obj(&acme), gone.before.as_ref());
        claims.node_changed("n1");
        assert!(claims.is_empty());
        assert!(claims.unbacked(&cache, |_| None).is_empty());
    }

    #[test]
    fn a_tenant_that_never_named_a_node_is_not_woken_and_the_index_counts_who_names_one() {
        let (cache, claims) = (TenantCache::default(), Claims::default());
        let waiting = claiming("w", TenantPhase::PendingCapacity, "", 0);
        assert!(observe(&cache, &claims, &waiting));
        assert!(
            claims.is_empty(),
            "a status that names no node is not indexed"
        );
        assert!(claims.unbacked(&cache, |_| None).is_empty());
        observe(
            &cache,
            &claims,
            &claiming("acme", TenantPhase::Active, "n1", 2),
        );
        observe(
            &cache,
            &claims,
            &claiming("beta", TenantPhase::Active, "n2", 3),
        );
        assert_eq!(claims.len(), 2);
        assert!(!claims.is_empty());
    }

    #[test]
    fn an_entry_of_a_tenant_naming_no_node_wakes_it_only_if_still_so_at_the_check() {
        let (cache, claims) = (TenantCache::default(), Claims::default());
        let waiting = claiming("w", TenantPhase::PendingCapacity, "", 0);
        observe(&cache, &claims, &waiting);
        claims.unbacked(&cache, |_| None);
        let key = || cache.key(&ObjectRef::from_obj(&waiting)).unwrap();
        let n1 = Arc::new(node("n1").holding("w", (2, 1, 1)).build());
        // Still naming no node at the check, the node still holding it: woken, once.
        claims.unnamed_entry(key(), "n1");
        assert_eq!(
            claims.unbacked(&cache, |_| Some(n1.clone())),
            [ObjectRef::from_obj(&waiting)]
        );
        assert!(claims.unbacked(&cache, |_| Some(n1.clone())).is_empty());
        // The entry went before the check: nothing to settle.
        claims.unnamed_entry(key(), "n1");
        assert!(
            claims
                .unbacked(&cache, |_| Some(Arc::new(node("n1").build())))
                .is_empty()
        );
        // Its status was written (our own placement) before the check: not woken.
        claims.unnamed_entry(key(), "n1");
        observe(
            &cache,
            &claims,
            &claiming("w", TenantPhase::Active, "n1", 2),
        );
        assert!(claims.unbacked(&cache, |_| Some(n1.clone())).is_empty());
    }

    #[test]
    fn a_forgotten_tenant_and_one_gone_in_a_relist_leave_the_index() {
        let (cache, claims) = (TenantCache::default(), Claims::default());
        let (acme, beta) = (
            claiming("acme", TenantPhase::Active, "n1", 2),
            claiming("beta", TenantPhase::Active, "n1", 3),
        );
        observe(&cache, &claims, &acme);
        observe(&cache, &claims, &beta);
        // acme is deleted while its status still names n1; its claim was due for a check.
        let gone = cache.apply_keyed(&Event::Delete(acme.clone()));
        claims.forget(&ObjectRef::from_obj(&acme), gone.before.as_ref());
        assert_eq!(claims.len(), 1);
        // n1 is wiped: only beta, still there, is woken.
        claims.node_changed("n1");
        assert_eq!(
            claims.unbacked(&cache, |_| None),
            [ObjectRef::from_obj(&beta)]
        );
        // beta is deleted while the watch is down: the relist shows only kept, on n2.
        let kept = claiming("kept", TenantPhase::Active, "n2", 1);
        observe(&cache, &claims, &kept);
        claims.unbacked(&cache, |_| None);
        cache.apply(&Event::Init);
        cache.apply(&Event::InitApply(kept.clone()));
        cache.apply(&Event::InitDone);
        claims.retain_present(&cache);
        assert_eq!(claims.len(), 1);
        claims.node_changed("n1");
        claims.node_changed("n2");
        assert_eq!(
            claims.unbacked(&cache, |_| None),
            [ObjectRef::from_obj(&kept)]
        );
    }
}
