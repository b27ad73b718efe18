//! Two replicas with leader election: only the leader writes; kill it and the other takes over.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use inmem_apiserver::ApiServer;
use kube::Client;
use tenant_placer::controller::{self, Role};
use tenant_placer::leader::LeaseConfig;
use tenant_placer::serve::{self, State};

use crate::*;

/// The in-memory API, counting the writes one replica sends (lease writes aside).
#[derive(Clone)]
struct Counted {
    api: ApiServer,
    writes: Arc<AtomicU64>,
}

impl<B> tower_service::Service<http::Request<B>> for Counted
where
    ApiServer: tower_service::Service<http::Request<B>>,
{
    type Response = <ApiServer as tower_service::Service<http::Request<B>>>::Response;
    type Error = <ApiServer as tower_service::Service<http::Request<B>>>::Error;
    type Future = <ApiServer as tower_service::Service<http::Request<B>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.api.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let lease = request.uri().path().contains("/leases");
        if request.method() != http::Method::GET && !lease {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        self.api.call(request)
    }
}

fn replica(fleet: &Fleet, identity: &str) -> (tokio::task::JoinHandle<()>, Arc<AtomicU64>, State) {
    let writes = Arc::new(AtomicU64::new(0));
    let client = Client::new(
        Counted {
            api: fleet.api.clone(),
            writes: writes.clone(),
        },
        "default",
    );
    let lease = LeaseConfig {
        lease_duration: Duration::from_millis(1200),
        renew_deadline: Duration::from_millis(700),
        retry_period: Duration::from_millis(100),
        ..LeaseConfig::new("tenant-placer", "default", identity)
    };
    let settings = Settings {
        leader_election: Some(lease),
        ..settings()
    };
    let state = State::default();
    (
        tokio::spawn(controller::run_with(client, settings, state.handles())),
        writes,
        state,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_when_it_dies_the_other_replica_takes_over_and_converges() {
    let fleet = Fleet::new().unwrap();
    for object in seed_nodes().into_iter().chain([
        tenant("acme").resources(2, 4, 20).manifest(),
        tenant("big").resources(256, 1024, 100_000).manifest(),
    ]) {
        fleet.api.apply(object).unwrap();
    }
    let (a, writes_a, state_a) = replica(&fleet, "replica-a");
    let (b, writes_b, state_b) = replica(&fleet, "replica-b");
    fleet
        .settle(Duration::from_millis(300), Duration::from_secs(20))
        .await
        .unwrap();
    let (a_wrote, b_wrote) = (
        writes_a.load(Ordering::SeqCst),
        writes_b.load(Ordering::SeqCst),
    );
    assert!(
        (a_wrote > 0) ^ (b_wrote > 0),
        "exactly one replica writes: a {a_wrote}, b {b_wrote}"
    );
    // Both are Ready (a standby must not block rollouts); only one says it leads.
    let roles: Vec<_> = [&state_a, &state_b]
        .iter()
        .map(|s| s.health().role())
        .collect();
    assert!(
        roles.contains(&Role::Leading) && roles.contains(&Role::Standby),
        "{roles:?}"
    );
    for state in [&state_a, &state_b] {
        assert_eq!(serve::respond_with("/readyz", state).status(), 200);
    }
    let (leader, follower_writes) = if a_wrote > 0 {
        (a, writes_b.clone())
    } else {
        (b, writes_a.clone())
    };
    let lease = fleet
        .api
        .get(
            "coordination.k8s.io",
            "leases",
            Some("default"),
            "tenant-placer",
        )
        .unwrap();
    assert!(lease["spec"]["holderIdentity"].is_string());

    // Kill the leader; change things; the follower must take over once the lease expires.
    leader.abort();
    fleet
        .api
        .apply(tenant("late").resources(1, 1, 1).manifest())
        .unwrap();
    fleet
        .api
        .apply(tenant_spec("acme", serde_json::json!({"mode": "Cluster"})))
        .unwrap();
    fleet
        .settle(Duration::from_millis(300), Duration::from_secs(20))
        .await
        .unwrap();
    assert!(
        follower_writes.load(Ordering::SeqCst) > 0,
        "the follower took over"
    );
    let tenants = fleet.tenants();
    let late = tenants
        .iter()
        .find(|t| t.metadata.name.as_deref() == Some("late"))
        .unwrap();
    assert_eq!(late.status.as_ref().unwrap().node_name, "node-eu-1");
    let eu1 = fleet
        .nodes()
        .into_iter()
        .find(|n| n.metadata.name.as_deref() == Some("node-eu-1"))
        .unwrap();
    assert_eq!(
        eu1.status.unwrap().allocated.threads,
        5,
        "acme 2 x 2 + late 1"
    );
    invariants::check(
        &fleet.nodes(),
        &fleet.tenants(),
        &HashSet::new(),
        Quiescence::Settled,
    )
    .unwrap();
}
