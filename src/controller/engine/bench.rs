//! The engine's decisions without I/O, for benchmarks (feature `testing`): batches decided on a
//! view kept between batches, as the engine task does, timed from the sync that opens a batch
//! to the confirmation of its writes (the server's answer, one version on, is simulated).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use placement::{Policy, QueueMode, Resources, TenantWants};
use tokio::sync::oneshot;

use super::batch::{Job, Queued, Rules, decide_batch};
use super::gone::GoneUids;
use super::view::View;
use crate::api::Node;
use crate::api::Wants;

/// One batch's time, per decision in it.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Syncing the view and deciding (every edit applied to the view, the holds dropped).
    pub deciding: Duration,
    /// Building the node objects to write and confirming them.
    pub writing: Duration,
}

/// Decides `tenants` (uid, footprint) in batches of `batch` on `nodes` under `policy`, each
/// placement applied to the view and, as after a committed write, each written node confirmed
/// and reported by the watch before the next batch. Returns each batch's timing.
pub fn decide(
    nodes: Vec<Arc<Node>>,
    tenants: &[(String, Resources)],
    batch: usize,
    policy: Policy,
) -> Vec<Timing> {
    let mut view = View::build(nodes);
    let released = GoneUids::default();
    let now = Time(Timestamp::now());
    let mut per_decision = Vec::new();
    let mut replies = Vec::new();
    let mut written: Vec<Arc<Node>> = Vec::new();
    for chunk in tenants.chunks(batch.max(1)) {
        let jobs: Vec<Queued> = chunk
            .iter()
            .map(|(uid, footprint)| {
                let wants = TenantWants {
                    uid,
                    tenant: uid,
                    footprint: *footprint,
                    suspend: false,
                    status_node: None,
                    migration: None,
                    asked: None,
                    node_selector: None,
                };
                let (reply, answer) = oneshot::channel();
                replies.push(answer);
                Queued::new(Job::Decide {
                    wants: Wants::of(&wants, None),
                    reply,
                })
            })
            .collect();
        let rules = Rules {
            policy,
            mode: QueueMode::BestEffortFifo,
            waiters: &[],
            bought: &[],
            made: &[],
            released: &released,
            max_writes: 8,
            zone_label: super::ZONE_LABEL,
            max_migrations: 16,
            turn: 0,
            now: &now,
        };
        let started = Instant::now();
        // What the watch reports changed since the last batch: the nodes it wrote, whose
        // copies the view already has (confirmed).
        let reported: Vec<(String, Option<Arc<Node>>)> = written
            .drain(..)
            .map(|node: Arc<Node>| (name_of(&node), Some(node)))
            .collect();
        if !view.sync_changed(reported) {
            // Nodes are never added or removed here; a failed sync would be a bug in the view.
            return Vec::new();
        }
        let (drafts, _) = decide_batch(jobs, &mut view, &rules);
        view.end_batch();
        let decided_at = Instant::now();
        // Each edited node is written (the server answers it one version on) and confirmed.
        let edited: Vec<String> = view.dirty().cloned().collect();
        for name in edited {
            if let Some(mut node) = view.to_write(&name, &now) {
                node.metadata.resource_version = Some(next_version(&node));
                let node = Arc::new(node);
                view.confirm(node.clone());
                written.push(node);
            }
        }
        let decided = u32::try_from(drafts.len().max(1)).unwrap_or(u32::MAX);
        per_decision.push(Timing {
            deciding: decided_at
                .duration_since(started)
                .checked_div(decided)
                .unwrap_or_default(),
            writing: decided_at
                .elapsed()
                .checked_div(decided)
                .unwrap_or_default(),
        });
    }
    per_decision
}

fn name_of(node: &Node) -> String {
    node.metadata.name.clone().unwrap_or_default()
}

fn next_version(node: &Node) -> String {
    let version = node
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    version.saturating_add(1).to_string()
}
