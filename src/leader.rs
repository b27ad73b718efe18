//! Leader election on a `coordination.k8s.io/v1` Lease, guarded by resourceVersion like every
//! other write of ours (the LeaseLock protocol of client-go).
//!
//! ```text
//!   every retry period:  GET lease ─decide─▶ Create | Renew | TakeOver ─PUT (rv)─▶ leading
//!                                        └─▶ Follow (held by another, not expired)
//!   leading = (now < last successful renewal + renew deadline)
//! ```
//!
//! Rules enforced here:
//! - a lease held by another replica is taken over only once it has expired (renewTime +
//!   leaseDurationSeconds in the past), by a PUT carrying the resourceVersion read: of two
//!   replicas trying at once, the second gets 409 Conflict and follows;
//! - a replica leads only until its last successful renewal + the renew deadline, which is shorter
//!   than the lease duration: it stops leading before anyone else may take over, a round left
//!   unanswered included (it is given up at the deadline);
//! - the decision is pure ([`decide`]); the loop only reads, writes and publishes `leading`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;

/// Where the lease lives, who we are, and the timings.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    /// How long a lease stays valid after its last renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a successful renewal; shorter than the lease.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry.
    pub fn new(
        name: impl Into<String>,
        namespace: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        LeaseConfig {
            name: name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What to do with the lease as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// There is no lease: create it, held by us.
    Create,
    /// We hold it: renew it.
    Renew,
    /// It is free or expired: take it over.
    TakeOver,
    /// Another replica holds it and it has not expired.
    Follow,
}

/// The pure decision. `now` and the lease's times are compared in whole microseconds.
pub fn decide(lease: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> Choice {
    let Some(spec) = lease else {
        return Choice::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder == identity {
        return Choice::Renew;
    }
    if holder.is_empty() {
        return Choice::TakeOver;
    }
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0);
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
    match renewed.and_then(|at| at.checked_add(duration).ok()) {
        Some(expires) if expires > now => Choice::Follow,
        _ => Choice::TakeOver,
    }
}

/// The lease after we acquire or renew it.
fn held_by_us(
    config: &LeaseConfig,
    current: Option<&LeaseSpec>,
    decision: Choice,
    now: Timestamp,
) -> LeaseSpec {
    let transitions = current.and_then(|s| s.lease_transitions).unwrap_or(0);
    let seconds = i32::try_from(config.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let (acquire_time, lease_transitions) = match decision {
        Choice::Renew => (current.and_then(|s| s.acquire_time.clone()), transitions),
        Choice::TakeOver => (Some(MicroTime(now)), transitions.saturating_add(1)),
        Choice::Create | Choice::Follow => (Some(MicroTime(now)), 0),
    };
    LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        lease_duration_seconds: Some(seconds),
        acquire_time,
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(lease_transitions),
        ..LeaseSpec::default()
    }
}

/// One round: read, decide, write. `Ok(true)` when we hold the lease after it.
async fn try_acquire_or_renew(api: &Api<Lease>, config: &LeaseConfig) -> Result<bool, kube::Error> {
    let current = api.get_opt(&config.name).await?;
    let now = Timestamp::now();
    let decision = decide(
        current.as_ref().and_then(|l| l.spec.as_ref()),
        &config.identity,
        now,
    );
    let spec = held_by_us(
        config,
        current.as_ref().and_then(|l| l.spec.as_ref()),
        decision,
        now,
    );
    let written = match (decision, current) {
        (Choice::Follow, _) => return Ok(false),
        (Choice::Create, _) | (_, None) => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(config.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
            };
            api.create(&PostParams::default(), &lease).await
        }
        (Choice::Renew | Choice::TakeOver, Some(mut lease)) => {
            // The resourceVersion read travels with the PUT: a concurrent writer makes it 409.
            lease.spec = Some(spec);
            api.replace(&config.name, &PostParams::default(), &lease)
                .await
        }
    };
    match written {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.is_conflict() || status.is_already_exists() => {
            Ok(false)
        }
        Err(error) => Err(error),
    }
}

/// Runs the election, publishing whether we lead, until the receiver or the returned guard is
/// dropped (dropping the guard aborts the election task).
pub fn spawn(client: Client, config: LeaseConfig) -> (watch::Receiver<bool>, AbortOnDrop) {
    let (leading, receiver) = watch::channel(false);
    let task = tokio::spawn(async move {
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        let mut last_renewal: Option<tokio::time::Instant> = None;
        loop {
            // A round unanswered within the renew deadline has failed: kube sets no read
            // timeout and the round's requests queue behind the controller's own
            // (`crate::client`), so waiting on it would keep us leading past the deadline,
            // while another replica may take the lease once it expires.
            let round = try_acquire_or_renew(&api, &config);
            match tokio::time::timeout(config.renew_deadline, round).await {
                Ok(Ok(true)) => last_renewal = Some(tokio::time::Instant::now()),
                Ok(Ok(false)) => last_renewal = None,
                Ok(Err(error)) => {
                    tracing::warn!(%error, lease = %config.name, "lease round failed");
                }
                Err(_) => tracing::warn!(
                    lease = %config.name,
                    "lease round unanswered within the renew deadline"
                ),
            }
            let lead = last_renewal.is_some_and(|at| at.elapsed() < config.renew_deadline);
            if *leading.borrow() != lead {
                tracing::info!(identity = %config.identity, leading = lead, "leadership changed");
            }
            if leading.send(lead).is_err() {
                return;
            }
            tokio::time::sleep(config.retry_period).await;
        }
    });
    (receiver, AbortOnDrop(task))
}

/// A spawned task that ends when this guard is dropped: a task aborted from outside takes its
/// helpers down with it, as a dying process would.
#[derive(Debug)]
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
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

    fn lease(holder: &str, renewed_secs_ago: i64, duration: i32) -> LeaseSpec {
        let renewed = Timestamp::from_second(1_000_000 - renewed_secs_ago).unwrap();
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: Some(duration),
            ..LeaseSpec::default()
        }
    }

    /// On a server that answers only the first round, the replica leads and then, the next round
    /// unanswered, stops leading by its renew deadline.
    #[tokio::test]
    async fn a_round_left_unanswered_ends_the_lead_at_the_renew_deadline() {
        use http::{Method, StatusCode};
        let (service, mut server) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let config = LeaseConfig {
            lease_duration: Duration::from_millis(600),
            renew_deadline: Duration::from_millis(300),
            retry_period: Duration::from_millis(20),
            ..LeaseConfig::new("tenant-placer", "default", "me")
        };
        let (mut leading, _election) = spawn(Client::new(service, "default"), config);
        let answer = |status: StatusCode, body: serde_json::Value| {
            http::Response::builder()
                .status(status)
                .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap()
        };
        let (read, send) = server.next_request().await.unwrap();
        assert_eq!(read.method(), Method::GET);
        send.send_response(answer(
            StatusCode::NOT_FOUND,
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": "NotFound", "code": 404, "message": "not found"}),
        ));
        let (create, send) = server.next_request().await.unwrap();
        assert_eq!(create.method(), Method::POST);
        let body = http_body_util::BodyExt::collect(create.into_body())
            .await
            .unwrap();
        let mut lease: serde_json::Value = serde_json::from_slice(&body.to_bytes()).unwrap();
        lease["metadata"]["resourceVersion"] = "1".into();
        send.send_response(answer(StatusCode::CREATED, lease));
        leading.wait_for(|lead| *lead).await.unwrap();
        let led = tokio::time::Instant::now();
        // The next round's read is never answered (held, not dropped).
        let (_unanswered, _held) = server.next_request().await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), leading.wait_for(|lead| !*lead))
            .await
            .expect("still leading 5 s after the renew deadline")
            .unwrap();
        assert!(
            led.elapsed() < Duration::from_secs(1),
            "{:?}",
            led.elapsed()
        );
    }

    #[test]
    fn the_lease_decision_table() {
        let now = Timestamp::from_second(1_000_000).unwrap();
        // renewed 5 s ago with 15 s duration: valid for 10 s more.
        assert_eq!(decide(Some(&lease("b", 5, 15)), "a", now), Choice::Follow);
        // renewed 20 s ago with 15 s duration: expired 5 s ago.
        assert_eq!(
            decide(Some(&lease("b", 20, 15)), "a", now),
            Choice::TakeOver
        );
        assert_eq!(decide(Some(&lease("a", 5, 15)), "a", now), Choice::Renew);
        assert_eq!(decide(Some(&lease("", 0, 15)), "a", now), Choice::TakeOver);
        assert_eq!(decide(None, "a", now), Choice::Create);
        // No renew time at all: nothing proves it is held.
        assert_eq!(
            decide(
                Some(&LeaseSpec {
                    holder_identity: Some("b".into()),
                    ..LeaseSpec::default()
                }),
                "a",
                now
            ),
            Choice::TakeOver
        );
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_keeps_the_acquire_time() {
        let config = LeaseConfig::new("l", "ns", "a");
        let now = Timestamp::from_second(1_000_000).unwrap();
        let mut old = lease("b", 20, 15);
        old.lease_transitions = Some(3);
        let taken = held_by_us(&config, Some(&old), Choice::TakeOver, now);
        assert_eq!(
            (taken.holder_identity.as_deref(), taken.lease_transitions),
            (Some("a"), Some(4))
        );
        let renewed = held_by_us(&config, Some(&taken), Choice::Renew, now);
        assert_eq!(renewed.acquire_time, taken.acquire_time);
        assert_eq!(renewed.lease_transitions, Some(4));
    }
}
