//! Wiring: two controllers (Tenants, Nodes) sharing one context and one Node writer.
//!
//! ```text
//!   watch Tenants ──▶ tenant::reconcile ──────────────┐   (enters the WaitingRoom before deciding)
//!        ▲ reconcile_on                               │
//!   WaitingRoom ◀── node::reconcile ◀── watch Nodes    ├──▶ writer::NodeWriter (the only
//!                   (could this node take a waiter?)  ┘     Node-status writer)
//! ```
//!
//! Rules enforced here:
//! - failed reconciles are re-queued with per-object exponential backoff;
//! - tenants waiting for room are re-checked when a node could take them (WaitingRoom) and
//!   otherwise at a fallback interval that backs off while nothing changes;
//! - the Node writer decides only from a synced node cache;
//! - an entry is released as an orphan only after a direct read confirms its tenant is gone.

pub mod node;
pub mod tenant;
pub mod waiting;
pub mod writer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};

use crate::api::{Node, Tenant};
use crate::error::Error;
use crate::leader::{self, AbortOnDrop, LeaseConfig};
pub use waiting::WaitingRoom;
pub use writer::{NodeWriter, RetryPolicy};

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
    /// Reconcile only while holding this Lease; `None` runs unconditionally (one replica).
    pub leader_election: Option<LeaseConfig>,
    /// This replica's name in Events (its pod name in a cluster).
    pub instance: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            concurrency: 8,
            resync: Duration::from_secs(3600),
            pending_recheck: Duration::from_secs(60),
            pending_recheck_max: Duration::from_secs(900),
            error_backoff: Duration::from_millis(500),
            error_backoff_max: Duration::from_secs(300),
            retry: RetryPolicy::default(),
            leader_election: None,
            instance: None,
        }
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

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub writer: NodeWriter,
    /// The tenant watch cache, to find orphaned entries without a read per entry.
    pub tenants: Store<Tenant>,
    /// Tenants waiting for room, re-queued by node changes.
    pub waiting: WaitingRoom,
    /// Publishes Kubernetes Events; `None` publishes nothing (scripted-mock tests).
    pub events: Option<Recorder>,
    pub settings: Settings,
    pub pending_backoff: Backoff,
    pub error_backoff: Backoff,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Context {
    pub fn new(
        client: Client,
        writer: NodeWriter,
        tenants: Store<Tenant>,
        waiting: WaitingRoom,
        settings: Settings,
    ) -> Self {
        Context {
            client,
            writer,
            tenants,
            waiting,
            events: None,
            pending_backoff: Backoff::new(settings.pending_recheck, settings.pending_recheck_max),
            error_backoff: Backoff::new(settings.error_backoff, settings.error_backoff_max),
            settings,
        }
    }
}

impl Context {
    /// Publishes Events through this recorder.
    pub fn with_events(self, recorder: Recorder) -> Self {
        Context {
            events: Some(recorder),
            ..self
        }
    }
}

/// Logs the error and re-queues the object with backoff.
pub fn error_policy<K: Resource>(object: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = object.uid().unwrap_or_else(|| object.name_any());
    let delay = ctx.error_backoff.next(&key);
    tracing::warn!(object = %object.name_any(), error = %error, label = error.label(), ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Whether this replica is ready: caches synced and, with leader election, leading.
#[derive(Debug, Default)]
pub struct Health {
    caches_synced: AtomicBool,
    leading: AtomicBool,
}

impl Health {
    pub fn ready(&self) -> bool {
        self.caches_synced.load(Ordering::SeqCst) && self.leading.load(Ordering::SeqCst)
    }

    pub fn leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }
}

/// Runs the controllers until a shutdown signal: at once, or while leading with leader election.
pub async fn run(client: Client, settings: Settings) {
    run_with_health(client, settings, Arc::default()).await;
}

/// [`run`], reporting readiness into `health`.
pub async fn run_with_health(client: Client, settings: Settings, health: Arc<Health>) {
    let Some(lease) = settings.leader_election.clone() else {
        health.leading.store(true, Ordering::SeqCst);
        return run_controllers(client, settings, health).await;
    };
    let (mut leading, _election) = leader::spawn(client.clone(), lease);
    loop {
        // Follow until we lead.
        while !*leading.borrow_and_update() {
            if leading.changed().await.is_err() {
                return;
            }
        }
        health.leading.store(true, Ordering::SeqCst);
        let mut controllers = AbortOnDrop(tokio::spawn(run_controllers(
            client.clone(),
            settings.clone(),
            health.clone(),
        )));
        let finished = loop {
            tokio::select! {
                changed = leading.changed() => {
                    if changed.is_err() || !*leading.borrow_and_update() {
                        break false;
                    }
                }
                _ = &mut controllers.0 => break true,
            }
        };
        // NB: aborting drops every in-flight request with the task: no new write leaves after this.
        drop(controllers);
        health.leading.store(false, Ordering::SeqCst);
        health.caches_synced.store(false, Ordering::SeqCst);
        if finished {
            return;
        }
        tracing::warn!("lost the lease: stopped reconciling");
    }
}

/// Both controllers, sharing one context and one Node writer.
async fn run_controllers(client: Client, settings: Settings, health: Arc<Health>) {
    let nodes: Api<Node> = Api::all(client.clone());
    let tenants: Api<Tenant> = Api::all(client.clone());
    let watch = || watcher::Config::default().any_semantic();

    let node_controller = Controller::new(nodes.clone(), watch());
    let writer = NodeWriter::new(nodes.clone(), node_controller.store(), settings.retry);
    let tenant_controller = Controller::new(tenants, watch());
    let (waiting, wake_ups) = WaitingRoom::new();
    let concurrency = settings.concurrency;
    let reporter = Reporter {
        controller: "tenant-placer".into(),
        instance: settings.instance.clone(),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let ctx = Arc::new(
        Context::new(client, writer, tenant_controller.store(), waiting, settings)
            .with_events(recorder),
    );
    let (node_cache, tenant_cache) = (node_controller.store(), tenant_controller.store());
    let _readiness = AbortOnDrop(tokio::spawn(async move {
        if node_cache.wait_until_ready().await.is_ok()
            && tenant_cache.wait_until_ready().await.is_ok()
        {
            health.caches_synced.store(true, Ordering::SeqCst);
        }
    }));

    let tenant_loop = tenant_controller
        .reconcile_on(wake_ups)
        .with_config(controller::Config::default().concurrency(concurrency))
        .shutdown_on_signal()
        .run(tenant::reconcile, error_policy, ctx.clone())
        .for_each(|result| async move { log_result("tenant", result) });
    let node_loop = node_controller
        .shutdown_on_signal()
        .run(node::reconcile, error_policy, ctx)
        .for_each(|result| async move { log_result("node", result) });
    futures::join!(tenant_loop, node_loop);
}

fn log_result<K: Resource, E: std::fmt::Display>(
    kind: &str,
    result: Result<(kube::runtime::reflector::ObjectRef<K>, Action), E>,
) {
    match result {
        Ok((object, action)) => tracing::debug!(kind, object = %object.name, ?action, "reconciled"),
        Err(error) => tracing::debug!(kind, %error, "reconcile did not complete"),
    }
}
