//! The controller's tunables, and the per-key backoff its loops retry with.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use kube::{Resource, ResourceExt};

use super::engine::RetryPolicy;
use crate::api::LabelSelector;
use crate::error::Error;
use crate::leader::LeaseConfig;

/// Tunables of the controller.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Tenant reconciles running at once.
    pub concurrency: u16,
    /// How often a settled object is looked at again with nothing changed.
    pub resync: Duration,
    /// The first fallback re-check of a waiting tenant; doubles up to `pending_recheck_max`.
    pub pending_recheck: Duration,
    pub pending_recheck_max: Duration,
    /// The first retry after an error; doubles up to `error_backoff_max`.
    pub error_backoff: Duration,
    pub error_backoff_max: Duration,
    pub retry: RetryPolicy,
    /// How new tenants are placed.
    pub policy: placement::Policy,
    /// Reconcile only while holding this Lease; `None` runs unconditionally (one replica).
    pub leader_election: Option<LeaseConfig>,
    /// This replica's name in Events (its pod name in a cluster).
    pub instance: Option<String>,
    /// Put the reservation finalizer on every Tenant (the default). Without it a delete is
    /// released from the watch's delete event, and what that misses (a delete while no
    /// controller ran) by the orphan sweep: one write less per tenant, a late release instead
    /// of a blocked delete.
    pub finalizer: bool,
    /// Which Events to publish on Tenants.
    pub events: EventLevel,
    /// How waiting tenants are ordered (BestEffortFIFO unless set).
    pub queue: placement::QueueMode,
    /// Node changes are judged for waiting tenants at most once per this window.
    pub requeue_window: Duration,
    /// How often every node is looked at again for orphaned entries and stale totals.
    pub orphan_sweep: Duration,
    /// Moves off draining nodes in flight at once, at most.
    pub max_migrations: u16,
    /// The Node label naming its zone, for spread tenants (`--zone-label`; `None`:
    /// `topology.kubernetes.io/zone`).
    pub zone_label: Option<std::sync::Arc<str>>,
    /// A tenant waiting for capacity this long gets a NodeRequest (when a NodeClass can hold
    /// it); `None` requests nothing.
    pub request_after: Option<Duration>,
    /// A Node made for a request that has held nothing this long is handed back.
    pub empty_node_after: Duration,
    /// How often the requests are looked at.
    pub request_check: Duration,
    /// The pool's Nodes (`--node-selector`): only these are watched, placed on and written;
    /// `None` takes every Node.
    pub pool_nodes: Option<LabelSelector>,
    /// The pool's Tenants (`--tenant-selector`): only these are watched, placed and written;
    /// `None` takes every Tenant.
    pub pool_tenants: Option<LabelSelector>,
    /// Register nodes from the cluster (`--register-nodes`): one placement Node per core
    /// `v1/Node` matching this selector, kept from it; `None` registers nothing.
    pub register_nodes: Option<LabelSelector>,
    /// How often the registration looks again with nothing changed (a write that failed is
    /// tried again sooner, after the error backoff).
    pub register_resync: Duration,
    /// Play the provisioner contract through Cluster API (`--provisioner cluster-api`) for the
    /// classes that name a MachineDeployment.
    pub cluster_api: bool,
    /// A machine not delivered this long after its request fails it (`--provisioning-timeout-seconds`).
    pub provisioning_timeout: Duration,
    /// What is done with nodes the controller could do without (`--consolidation`).
    pub consolidation: super::disruption::ConsolidationPolicy,
    /// How long a node stays freeable before it is drained (`--consolidate-after-seconds`).
    pub consolidate_after: Duration,
    /// Consolidate registered nodes too (`--consolidate-registered`).
    pub consolidate_registered: bool,
    /// Nodes of the pool emptied at once by consolidation, at most (`--disruption-budget`).
    pub disruption_budget: super::disruption::Budget,
    /// When consolidation may drain (`--disruption-schedule`); none: always.
    pub disruption_schedule: Vec<super::disruption::Window>,
    /// Smaller tenants moved at most to make room for one waiting tenant before a machine is
    /// bought for it (`--make-room-moves`; 0: never).
    pub make_room_moves: u16,
}

impl Settings {
    /// The retries after an error: `error_backoff`, doubling up to `error_backoff_max`.
    pub fn error_retries(&self) -> Doubling {
        Doubling {
            first: self.error_backoff,
            most: self.error_backoff_max,
        }
    }

    /// The fallback re-checks of a waiting tenant: `pending_recheck`, doubling up to
    /// `pending_recheck_max`.
    pub fn pending_rechecks(&self) -> Doubling {
        Doubling {
            first: self.pending_recheck,
            most: self.pending_recheck_max,
        }
    }

    /// The disruption budget and windows.
    pub fn disruption_limits(&self) -> super::disruption::Limits {
        super::disruption::Limits {
            budget: self.disruption_budget,
            schedule: self.disruption_schedule.clone(),
        }
    }

    /// Tenants moved at most to make room for one waiting tenant: `make_room_moves`, or 0 when
    /// the purchase look, where room is made, is off.
    pub fn make_room_moves_in_force(&self) -> u16 {
        if self.request_after.is_some() {
            self.make_room_moves
        } else {
            0
        }
    }

    /// Whether consolidation drains underused nodes (`WhenUnderutilized`, in the capacity tick).
    pub fn consolidates_underused(&self) -> bool {
        self.request_after.is_some()
            && self.consolidation == super::disruption::ConsolidationPolicy::WhenUnderutilized
    }
}

/// Which Events the controller publishes on Tenants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EventLevel {
    /// Every reservation change (Placed, Resized, Released) and every problem: one write more
    /// per placement.
    All,
    /// Only what needs a person (the default): Pending, ResizeBlocked, ReservationLost,
    /// ReservationRestored, DuplicateReleased and failures. The status and its Placed condition
    /// say where a tenant is.
    #[default]
    Problems,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            concurrency: 96,
            resync: Duration::from_secs(3600),
            pending_recheck: Duration::from_secs(60),
            pending_recheck_max: Duration::from_secs(900),
            error_backoff: Duration::from_millis(500),
            error_backoff_max: Duration::from_secs(300),
            retry: RetryPolicy::default(),
            policy: placement::Policy::FirstFit,
            leader_election: None,
            instance: None,
            finalizer: true,
            events: EventLevel::Problems,
            queue: placement::QueueMode::BestEffortFifo,
            requeue_window: Duration::from_millis(100),
            orphan_sweep: Duration::from_secs(300),
            max_migrations: 16,
            zone_label: None,
            request_after: Some(Duration::from_secs(60)),
            empty_node_after: Duration::from_secs(600),
            request_check: Duration::from_secs(1),
            pool_nodes: None,
            pool_tenants: None,
            register_nodes: None,
            register_resync: Duration::from_secs(60),
            cluster_api: false,
            provisioning_timeout: Duration::from_secs(1800),
            consolidation: super::disruption::ConsolidationPolicy::WhenEmpty,
            consolidate_after: Duration::from_secs(300),
            consolidate_registered: false,
            disruption_budget: super::disruption::Budget::default(),
            disruption_schedule: Vec::new(),
            make_room_moves: 4,
        }
    }
}

/// A backoff's first delay and its longest: each failure doubles the delay, up to `most`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Doubling {
    pub first: Duration,
    pub most: Duration,
}

impl Doubling {
    /// A backoff per key, with no key failed yet.
    pub fn backoff(self) -> Backoff {
        Backoff::new(self.first, self.most)
    }
}

/// Exponential backoff per key: base x 2^n up to max, reset on success.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    attempts: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            attempts: Mutex::default(),
        }
    }

    /// The next delay for this key, and counts the attempt.
    pub fn next(&self, key: &str) -> Duration {
        let mut attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
        let n = attempts.entry(key.to_owned()).or_insert(0);
        let delay = self.base.saturating_mul(1u32 << (*n).min(16)).min(self.max);
        *n = n.saturating_add(1);
        delay
    }

    pub fn reset(&self, key: &str) {
        self.attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}

/// Logs the error; returns when to try the object again (its backoff).
pub fn error_delay<K: Resource>(object: &K, error: &Error, backoff: &Backoff) -> Duration {
    let key = object.uid().unwrap_or_else(|| object.name_any());
    let delay = backoff.next(&key);
    tracing::warn!(object = %object.name_any(), error = %error, label = error.label(), ?delay, "reconcile failed");
    delay
}
