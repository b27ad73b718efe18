//! What the capacity tick remembers between ticks, in one small type: requests created and
//! not yet shown by the watch, what the watch showed between two ticks, Failed requests
//! reported, classes resting, since when a purchase has been idle, the last plan's input.
//!
//! Rules enforced here:
//! - a created request counts until the watch shows it (then the cache knows it, or it is
//!   gone), at most [`CREATED_KEPT`]: nothing is requested twice;
//! - a class rests after a failure, doubling per failure in a row, at most [`LONGEST_REST`].

use crate::api::{NodeRequest, NodeRequestPhase, NodeRequestSpec};
use kube::ResourceExt;
use kube::runtime::watcher;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What the capacity tick remembers between looks.
#[derive(Debug, Default)]
pub struct Memory(Mutex<Remembered>);

#[derive(Debug, Default)]
pub(super) struct Remembered {
    /// Requests created by this process that the watch has not shown yet.
    pub(super) created: HashMap<String, (NodeRequestSpec, Instant)>,
    /// Names of requests the watch showed (in any phase, or deleted) since the last look: a
    /// created request the watch has shown is known by the cache from then on, or is gone.
    pub(super) shown: HashSet<String>,
    /// Failed requests the watch showed since the last look, by name: seen even when they are
    /// gone before the next look.
    pub(super) failed: HashMap<String, NodeRequest>,
    /// By UID: Failed requests reported (Event, rest), so each is reported once.
    pub(super) retired: HashMap<String, Instant>,
    /// By class: resting until, and failures in a row.
    pub(super) resting: HashMap<String, (Instant, u32)>,
    /// By request UID: since when it has been Idle or Orphaned.
    pub(super) idle_since: HashMap<String, Instant>,
    /// Strays (`node request`) and orphans (UID) reported, so each is reported once.
    pub(super) reported: HashSet<String>,
    /// What the last plan read (a hash), when it bought nothing: the same input plans the same.
    pub(super) planned: Option<u64>,
    /// The tenants the last plan could find no machine for, and why (their notes).
    pub(super) unplaceable: HashMap<String, String>,
    /// The demand (a hash of the tenants planned for) when a machine was last handed back:
    /// nothing is bought again for it until it changes.
    pub(super) handed_back_for: Option<u64>,
}

impl Remembered {
    /// The classes resting now (a request of theirs failed); forgets rests over long enough ago.
    pub(super) fn resting_classes(&mut self, now: Instant) -> HashSet<String> {
        self.resting.retain(|_, (until, failures)| {
            *failures > 0 && now.saturating_duration_since(*until) < LONGEST_REST
        });
        self.resting
            .iter()
            .filter(|(_, (until, _))| now < *until)
            .map(|(class, _)| class.clone())
            .collect()
    }
}

/// The first rest of a class whose request failed; it doubles with each failure in a row.
pub(super) const FIRST_REST: Duration = Duration::from_secs(30);
/// The longest rest.
pub(super) const LONGEST_REST: Duration = Duration::from_secs(1800);
/// A created request the watch has not shown after this long is forgotten (it was refused).
pub(super) const CREATED_KEPT: Duration = Duration::from_secs(60);
/// How long a Failed request's UID is remembered as reported.
pub(super) const RETIRED_KEPT: Duration = Duration::from_secs(600);
/// Names tried for one purchase when the stable one is taken by another request.
pub(super) const NAME_ATTEMPTS: u32 = 8;

impl Memory {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Remembered> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Called with every event of the request watch: what a look between two snapshots would
    /// miss (a request created and Failed, or deleted, in between) is kept for the next look.
    pub fn observe(&self, event: &watcher::Event<NodeRequest>) {
        let (watcher::Event::Apply(request)
        | watcher::Event::InitApply(request)
        | watcher::Event::Delete(request)) = event
        else {
            return;
        };
        let mut remembered = self.lock();
        let name = request.name_any();
        if request.phase() == NodeRequestPhase::Failed {
            remembered.failed.insert(name.clone(), request.clone());
        }
        remembered.shown.insert(name);
    }
}

/// A request in flight or Ready, as the plan counts it.
#[derive(Debug)]
pub(super) struct Requested {
    pub(super) name: String,
    pub(super) spec: NodeRequestSpec,
    /// The Node a Ready request made (its `status.nodeName`, else its own name); `None` while
    /// in flight.
    pub(super) node: Option<String>,
}

impl Memory {
    /// Every request in flight or Ready: those the watch shows, and those this process created
    /// that it has not shown yet (once shown, the cache knows them, or they are gone).
    pub(super) fn requested(&self, live: &[Arc<NodeRequest>]) -> Vec<Requested> {
        let mut remembered = self.lock();
        let shown = std::mem::take(&mut remembered.shown);
        remembered
            .created
            .retain(|name, (_, at)| !shown.contains(name) && at.elapsed() < CREATED_KEPT);
        live.iter()
            .map(|r| Requested {
                name: r.name_any(),
                spec: r.spec.clone(),
                node: (r.phase() == NodeRequestPhase::Ready).then(|| r.made_node().to_owned()),
            })
            .chain(
                remembered
                    .created
                    .iter()
                    .filter(|(name, _)| !live.iter().any(|r| r.name_any() == **name))
                    .map(|(name, (spec, _))| Requested {
                        name: name.clone(),
                        spec: spec.clone(),
                        node: None,
                    }),
            )
            .collect()
    }
}

/// How long a class rests after `failures` failed requests in a row: the first rest, doubling
/// with each failure, at most the longest. Pure.
pub(super) fn rest_after(failures: u32) -> Duration {
    FIRST_REST
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(LONGEST_REST)
}
