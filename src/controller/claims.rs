//! Claims: what each tenant's status says it holds, checked against the node it names.
//!
//! ```text
//!   Tenant status (nodeName, reserved) ──▶ Claims (by node) ◀── node changed / deleted
//!                                              │  one check per requeue window, against the
//!                                              ▼  writer's view (never behind our own writes)
//!                            not backed by the node's entry ──▶ wake the tenant
//! ```
//!
//! Rules enforced here (docs/design.md, allocation protocol, two-sided repair):
//! - a tenant's status and the node's entry for its UID are two records of one reservation; the
//!   node's entry is the truth. A claim is backed when the node it names exists and holds an
//!   entry of the tenant's UID with exactly the amounts the status shows; a status that names no
//!   node is backed unless its phase says it holds something (Active, Resizing);
//! - when a node changes or goes, every tenant whose status names it is checked; when a tenant's
//!   status changes (by us or by another actor), that tenant is checked; a tenant whose status
//!   stops naming a node is woken too (another actor may have wiped it while the node holds the
//!   entry). An unbacked tenant is woken: its reconcile restores the entry where it still fits,
//!   or places it again (see `placement::plan_restore`);
//! - checks run in the waiting room's passes, against the writer's view, so our own write in
//!   flight (node first, tenant status second) is never mistaken for a loss.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::{Node, ResourceAmounts, Tenant, TenantPhase};

/// What one tenant's status says it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub uid: String,
    /// `status.nodeName`; empty when the status names no node.
    pub node: String,
    pub reserved: ResourceAmounts,
    pub phase: TenantPhase,
}

impl Claim {
    /// The claim of a tenant's current status (`None` without a UID).
    pub fn of(tenant: &Tenant) -> Option<Claim> {
        let status = tenant.status.clone().unwrap_or_default();
        Some(Claim {
            uid: tenant.uid()?,
            node: status.node_name,
            reserved: status.reserved,
            phase: status.phase,
        })
    }

    /// Whether `node` (the node this claim names, as the writer sees it; `None` when there is no
    /// such node) backs the claim.
    pub fn backed_by(&self, node: Option<&Node>) -> bool {
        if self.node.is_empty() {
            return !matches!(self.phase, TenantPhase::Active | TenantPhase::Resizing);
        }
        node.and_then(|n| n.status.as_ref()).is_some_and(|status| {
            status
                .allocations
                .iter()
                .any(|a| a.uid == self.uid && a.resources == self.reserved)
        })
    }
}

#[derive(Debug, Default)]
struct Index {
    claims: HashMap<ObjectRef<Tenant>, Claim>,
    /// Tenants by the node their status names.
    by_node: HashMap<String, HashSet<ObjectRef<Tenant>>>,
    /// To check at the next pass: tenants whose claim changed, and nodes that changed.
    changed_tenants: HashSet<ObjectRef<Tenant>>,
    changed_nodes: HashSet<String>,
    /// Tenants whose status stopped naming a node: woken whatever the nodes say.
    stopped_naming: HashSet<ObjectRef<Tenant>>,
}

impl Index {
    fn unlink(&mut self, tenant: &ObjectRef<Tenant>, node: &str) {
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

    /// The watch delivered this tenant. Returns true when its claim changed (a check is due).
    pub fn observe(&self, tenant: &Tenant) -> bool {
        let Some(claim) = Claim::of(tenant) else {
            return false;
        };
        let key = ObjectRef::from_obj(tenant);
        let mut index = self.lock();
        let previous = index.claims.get(&key);
        if previous == Some(&claim) {
            return false;
        }
        let previous_node = previous.map(|p| p.node.clone()).unwrap_or_default();
        if !previous_node.is_empty() && claim.node.is_empty() {
            index.stopped_naming.insert(key.clone());
        }
        if previous_node != claim.node {
            index.unlink(&key, &previous_node);
            if !claim.node.is_empty() {
                index
                    .by_node
                    .entry(claim.node.clone())
                    .or_default()
                    .insert(key.clone());
            }
        }
        index.claims.insert(key.clone(), claim);
        index.changed_tenants.insert(key);
        true
    }

    /// The tenant is gone.
    pub fn forget(&self, tenant: &ObjectRef<Tenant>) {
        let mut index = self.lock();
        if let Some(claim) = index.claims.remove(tenant) {
            index.unlink(tenant, &claim.node);
        }
        index.changed_tenants.remove(tenant);
        index.stopped_naming.remove(tenant);
    }

    /// After a relist: forgets the tenants deleted while the watch was down.
    pub fn retain_present(&self, tenants: &Store<Tenant>) {
        let gone: Vec<ObjectRef<Tenant>> = self
            .lock()
            .claims
            .keys()
            .filter(|t| tenants.get(t).is_none())
            .cloned()
            .collect();
        for tenant in gone {
            self.forget(&tenant);
        }
    }

    /// A node changed or went: the claims on it are checked at the next pass.
    pub fn node_changed(&self, node: &str) {
        let mut index = self.lock();
        if index.by_node.contains_key(node) {
            index.changed_nodes.insert(node.to_owned());
        }
    }

    /// Takes what changed and returns the tenants to wake: those whose claims the nodes they
    /// name (looked up by name as the writer sees them now) do not back, and those whose status
    /// stopped naming a node.
    pub fn unbacked(&self, node: impl Fn(&str) -> Option<Arc<Node>>) -> Vec<ObjectRef<Tenant>> {
        let (mut wake, to_check) = {
            let mut index = self.lock();
            let mut keys = std::mem::take(&mut index.changed_tenants);
            for changed in std::mem::take(&mut index.changed_nodes) {
                keys.extend(index.by_node.get(&changed).into_iter().flatten().cloned());
            }
            let to_check: Vec<(ObjectRef<Tenant>, Claim)> = keys
                .into_iter()
                .filter_map(|key| index.claims.get(&key).cloned().map(|claim| (key, claim)))
                .collect();
            let wake: Vec<ObjectRef<Tenant>> = std::mem::take(&mut index.stopped_naming)
                .into_iter()
                .collect();
            (wake, to_check)
        };
        for (key, claim) in to_check {
            let named = (!claim.node.is_empty())
                .then(|| node(&claim.node))
                .flatten();
            if !claim.backed_by(named.as_deref()) && !wake.contains(&key) {
                wake.push(key);
            }
        }
        wake
    }

    /// How many tenants have a claim indexed (for tests).
    pub fn len(&self) -> usize {
        self.lock().claims.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
