//! The tenant runner: reconciles cached tenants when they are due, a bounded number at once.
//!
//! ```text
//!   cache changes, wake-ups, resync sweep ──▶ schedule(key, at) ──▶ Queue ──▶ up to N reconciles
//!                                                    ▲                          │
//!                                                    └── requeue (the Action) ──┘
//! ```
//!
//! It does what kube's `Controller` did for Tenants, keyed by the cache's shared keys, so that a
//! tenant waiting its turn costs a pointer and a timer entry rather than copies of its names in
//! several maps. Rules enforced here:
//! - at most `concurrency` reconciles run at once, and never two of one tenant: a tenant due
//!   while its reconcile runs is run again once it ends;
//! - a tenant scheduled twice keeps the earlier time;
//! - a reconcile reads the tenant from the cache when its turn comes; a tenant no longer cached
//!   (deleted) is dropped;
//! - nothing runs before the cache has synced;
//! - on shutdown nothing new starts, and the reconciles in flight finish.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::state::Synced;
use super::state::tenant_cache::{TenantCache, TenantKey};
use crate::api::Tenant;

/// What a reconcile asks for next: to be looked at again after a while, or only on a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Look again after `duration`, whatever happens meanwhile.
    pub const fn requeue(duration: Duration) -> Self {
        Action {
            requeue_after: Some(duration),
        }
    }

    /// Look again when the tenant changes (or the sweep or a wake-up names it).
    pub const fn await_change() -> Self {
        Action {
            requeue_after: None,
        }
    }

    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

#[derive(Debug, Default)]
struct Queue {
    /// Due tenants by time (a sequence number keeps times unique, first come first served).
    due: BTreeMap<Slot, TenantKey>,
    /// When each scheduled tenant is due.
    at: HashMap<TenantKey, Slot>,
    /// What [`Slot`] times count from: the earlier of the first time scheduled and its moment.
    base: Option<Instant>,
    running: HashSet<TenantKey>,
    /// Due again while running: the earliest time asked for.
    again: HashMap<TenantKey, Instant>,
    next: u64,
}

/// A due time, as nanoseconds from the queue's base (8 bytes where an `Instant` takes 16: at
/// 100,000 tenants the map of slots is a quarter smaller), and its sequence number.
type Slot = (u64, u64);

impl Queue {
    /// `at` in nanoseconds from the base (a time before it counts as the base: due at once).
    fn nanos(&mut self, at: Instant) -> u64 {
        let base = *self.base.get_or_insert_with(|| at.min(Instant::now()));
        u64::try_from(at.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The time of a slot again.
    fn instant(&self, nanos: u64) -> Option<Instant> {
        self.base?.checked_add(Duration::from_nanos(nanos))
    }

    fn schedule(&mut self, key: TenantKey, at: Instant) {
        if self.running.contains(&key) {
            let earliest = self.again.entry(key).or_insert(at);
            *earliest = (*earliest).min(at);
            return;
        }
        let at = self.nanos(at);
        if let Some(&(scheduled, seq)) = self.at.get(&key) {
            if scheduled <= at {
                return;
            }
            self.due.remove(&(scheduled, seq));
        }
        let slot = (at, self.next);
        self.next = self.next.wrapping_add(1);
        self.at.insert(key.clone(), slot);
        self.due.insert(slot, key);
    }

    /// The first tenant due by `now`, marked running; otherwise when the next one is due.
    fn take(&mut self, now: Instant) -> Result<TenantKey, Option<Instant>> {
        let Some((&slot, _)) = self.due.first_key_value() else {
            return Err(None);
        };
        if slot.0 > self.nanos(now) {
            return Err(self.instant(slot.0));
        }
        let Some(key) = self.due.remove(&slot) else {
            return Err(None);
        };
        self.at.remove(&key);
        super::state::give_back_room(&mut self.at);
        self.running.insert(key.clone());
        Ok(key)
    }

    fn finished(&mut self, key: &TenantKey, next: Option<Instant>) {
        self.running.remove(key);
        let again = self.again.remove(key);
        let at = match (again, next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(at) = at {
            self.schedule(key.clone(), at);
        }
    }
}

/// The tenants due for a reconcile, shared by whoever schedules them and the run loop.
#[derive(Debug, Default)]
pub struct Runner {
    queue: Mutex<Queue>,
    changed: Notify,
}

impl Runner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Due now.
    pub fn trigger(&self, key: TenantKey) {
        self.schedule(key, Instant::now());
    }

    /// Due at `at` (or earlier, if it already is).
    pub fn schedule(&self, key: TenantKey, at: Instant) {
        self.lock().schedule(key, at);
        self.changed.notify_one();
    }

    /// How many tenants are scheduled or running (for tests).
    pub fn len(&self) -> usize {
        let queue = self.lock();
        queue.at.len().saturating_add(queue.running.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs reconciles as tenants fall due, at most `concurrency` at once, until `shutdown`
    /// completes; then waits for the reconciles in flight.
    pub async fn run<Reconcile, Fut>(
        &self,
        cache: &TenantCache,
        synced: &Synced,
        concurrency: usize,
        reconcile: Reconcile,
        shutdown: impl Future<Output = ()>,
    ) where
        Reconcile: Fn(Arc<Tenant>) -> Fut,
        Fut: Future<Output = Action>,
    {
        let mut shutdown = std::pin::pin!(shutdown);
        tokio::select! {
            ready = synced.wait() => if ready.is_err() { return },
            () = &mut shutdown => return,
        }
        let concurrency = concurrency.max(1);
        let mut running = FuturesUnordered::new();
        loop {
            let mut wake_at = None;
            while running.len() < concurrency {
                let taken = self.lock().take(Instant::now());
                match taken {
                    Ok(key) => match cache.get(&key) {
                        Some(tenant) => {
                            let reconciled = reconcile(tenant);
                            running.push(async move { (key, reconciled.await) });
                        }
                        None => self.lock().finished(&key, None),
                    },
                    Err(next) => {
                        wake_at = next;
                        break;
                    }
                }
            }
            let sleep = wake_at.map(tokio::time::sleep_until);
            tokio::select! {
                Some((key, action)) = running.next(), if !running.is_empty() => {
                    let next = action.requeue_after().and_then(|d| Instant::now().checked_add(d));
                    self.lock().finished(&key, next);
                }
                () = self.changed.notified() => {}
                () = async { if let Some(sleep) = sleep { sleep.await } }, if wake_at.is_some() => {}
                () = &mut shutdown => break,
            }
        }
        while running.next().await.is_some() {}
    }
}

/// Completes on SIGTERM or Ctrl-C (what a Pod is stopped with, and a terminal).
pub async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::arithmetic_side_effects
    )]
    use super::*;
    use crate::testing::tenant;
    use kube::runtime::reflector::ObjectRef;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn key(name: &str) -> TenantKey {
        Arc::new(crate::controller::TenantName::new(
            Arc::from("default"),
            name,
        ))
    }

    #[test]
    fn a_tenant_scheduled_twice_keeps_the_earlier_time() {
        let mut queue = Queue::default();
        let now = Instant::now();
        queue.schedule(key("a"), now + Duration::from_secs(10));
        queue.schedule(key("a"), now + Duration::from_secs(1));
        queue.schedule(key("a"), now + Duration::from_secs(5));
        assert_eq!(queue.at.len(), 1);
        assert_eq!(queue.take(now), Err(Some(now + Duration::from_secs(1))));
        assert_eq!(
            queue
                .take(now + Duration::from_secs(1))
                .map(|k| k.name().to_owned()),
            Ok("a".to_owned())
        );
        assert_eq!(queue.take(now + Duration::from_secs(60)), Err(None));
    }

    #[test]
    fn a_tenant_due_while_it_runs_runs_again_after_not_beside() {
        let mut queue = Queue::default();
        let now = Instant::now();
        queue.schedule(key("a"), now);
        let running = queue.take(now).unwrap();
        queue.schedule(key("a"), now);
        // Not taken a second time while it runs.
        assert_eq!(queue.take(now), Err(None));
        // Its own requeue is later than the trigger that came while it ran: the trigger wins.
        queue.finished(&running, Some(now + Duration::from_secs(30)));
        assert_eq!(
            queue.take(now).map(|k| k.name().to_owned()),
            Ok("a".to_owned())
        );
    }

    #[test]
    fn tenants_due_at_once_come_in_the_order_they_were_scheduled() {
        let mut queue = Queue::default();
        let now = Instant::now();
        for name in ["c", "a", "b"] {
            queue.schedule(key(name), now);
        }
        let order: Vec<String> = std::iter::from_fn(|| queue.take(now).ok())
            .map(|k| k.name().to_owned())
            .collect();
        assert_eq!(order, ["c", "a", "b"]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_run_loop_keeps_to_its_concurrency_and_follows_requeues() {
        let cache = TenantCache::default();
        for i in 0..10 {
            cache.insert(tenant(&format!("t{i}")).uid(&format!("u{i}")).build());
        }
        let runner = Arc::new(Runner::default());
        for i in 0..10 {
            let (key, _) = cache
                .entry(&ObjectRef::new(&format!("t{i}")).within("default"))
                .unwrap();
            runner.trigger(key);
        }
        // A deleted tenant's request is dropped.
        runner.trigger(key("gone"));
        let (in_flight, most, runs) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let reconcile = |tenant: Arc<Tenant>| {
            let (in_flight, most, runs) = (in_flight.clone(), most.clone(), runs.clone());
            async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                let run = runs.fetch_add(1, Ordering::SeqCst);
                // t0 asks to be looked at again once, after a minute.
                if tenant.metadata.name.as_deref() == Some("t0") && run < 10 {
                    Action::requeue(Duration::from_secs(60))
                } else {
                    Action::await_change()
                }
            }
        };
        let started = Instant::now();
        runner
            .run(
                &cache,
                &Synced::already(),
                3,
                reconcile,
                tokio::time::sleep(Duration::from_secs(120)),
            )
            .await;
        assert_eq!(most.load(Ordering::SeqCst), 3);
        // Ten first runs and t0's requeue.
        assert_eq!(runs.load(Ordering::SeqCst), 11);
        assert!(runner.is_empty());
        assert!(started.elapsed() >= Duration::from_secs(120));
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_runs_before_the_cache_has_synced() {
        let cache = TenantCache::default();
        cache.insert(tenant("a").uid("u").build());
        let runner = Runner::default();
        runner.trigger(
            cache
                .entry(&ObjectRef::new("a").within("default"))
                .unwrap()
                .0,
        );
        let (raise, synced) = Synced::flag();
        let runs = AtomicUsize::new(0);
        let run = runner.run(
            &cache,
            &synced,
            4,
            |_| {
                runs.fetch_add(1, Ordering::SeqCst);
                async { Action::await_change() }
            },
            tokio::time::sleep(Duration::from_secs(10)),
        );
        let raise_later = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert_eq!(runs.load(Ordering::SeqCst), 0);
            raise.send(true).unwrap();
        };
        futures::join!(run, raise_later);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}
