//! The "Nodes & Capacity" page's data: `/api/fleet` and `/api/fleet/events`, from the real
//! controller running against the in-memory API with the examples applied: the fleet at rest,
//! drains (a drained node, a tenant that cannot leave one) and a move caught in flight.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use inmem_apiserver::Fault;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use tenant_placer::api::{GROUP, Tenant};
use tenant_placer::controller::{self, Settings};
use tenant_placer::leader::AbortOnDrop;
use tenant_placer::manifests;
use tenant_placer::serve::{self, State};
use tenant_placer::sim::Fleet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long any one wait may take.
const WAIT: Duration = Duration::from_secs(20);

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// The examples applied (Nodes first) to an in-memory API with the controller running and
/// reporting into `state`'s handles; returns when the controller is quiet.
async fn fleet_with_examples(state: &State) -> (Fleet, AbortOnDrop) {
    let objects = manifests::read_paths(&[examples()]).unwrap();
    fleet_with(state, Settings::default(), objects).await
}

/// `objects` applied (Nodes first) to an in-memory API with the controller running under
/// `settings` and reporting into `state`'s handles; returns when the controller is quiet.
async fn fleet_with(
    state: &State,
    settings: Settings,
    objects: Vec<Value>,
) -> (Fleet, AbortOnDrop) {
    let fleet = Fleet::new().unwrap();
    let running = AbortOnDrop(tokio::spawn(controller::run_with(
        fleet.client.clone(),
        settings,
        state.handles(),
    )));
    let (nodes, others): (Vec<_>, Vec<_>) = objects.into_iter().partition(|o| o["kind"] == "Node");
    fleet.apply(&nodes).await.unwrap();
    fleet
        .settle(Duration::from_millis(100), WAIT)
        .await
        .unwrap();
    fleet.apply(&others).await.unwrap();
    fleet
        .settle(Duration::from_millis(100), WAIT)
        .await
        .unwrap();
    (fleet, running)
}

async fn get_json(path: &str, state: &State) -> Value {
    let response = serve::respond_with(path, state);
    assert_eq!(response.status(), 200, "GET {path}");
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "GET {path}"
    );
    assert_eq!(response.headers()["cache-control"], "no-store");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

fn node<'a>(fleet: &'a Value, name: &str) -> &'a Value {
    fleet["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no node {name} in {fleet:#}"))
}

/// Polls `/api/fleet` until `done` holds for its answer (at most [`WAIT`]); returns that answer.
async fn wait_for_view(state: &State, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let view = get_json("/api/fleet", state).await;
        if done(&view) {
            return view;
        }
        assert!(
            started.elapsed() < WAIT,
            "timed out after {WAIT:?} waiting for {what}; /api/fleet says {view:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Settings that look for machines to buy (and room to make) every 20 ms, at once.
fn buying() -> Settings {
    Settings {
        request_after: Some(Duration::ZERO),
        request_check: Duration::from_millis(20),
        ..Settings::default()
    }
}

/// A Node's `spec.state`, set (merged into its spec) as `kubectl patch` would.
fn set_state(fleet: &Fleet, node: &str, state: &str) {
    fleet
        .api
        .apply(
            json!({"apiVersion": format!("{GROUP}/v1alpha1"), "kind": "Node",
                      "metadata": {"name": node}, "spec": {"state": state}}),
        )
        .unwrap();
}

async fn patch_acme_to_cluster(fleet: &Fleet) {
    let tenants: Api<Tenant> = Api::namespaced(fleet.client.clone(), "default");
    tenants
        .patch(
            "acme",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mode": "Cluster"}})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_fleet_shows_node_eu_1_at_2_of_64_threads_big_waiting_with_its_shortfall_and_first_fit()
{
    let state = State::default();
    let (fleet, _running) = fleet_with_examples(&state).await;
    // big may have been decided before acme took its 2 threads: it is woken by that node write
    // and says the final shortfall soon after (a busy machine can see the settle end first).
    let view = wait_for_view(&state, "big's message with acme placed", |v| {
        v["waiting"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("short by 194"))
    })
    .await;

    assert_eq!(view["live"], true, "{view:#}");
    assert_eq!(view["role"], "leading");
    assert!(view["generation"].as_u64().unwrap() >= 1);
    assert!(
        view["generatedAt"].as_str().unwrap().ends_with('Z'),
        "{}",
        view["generatedAt"]
    );
    assert_eq!(view["policy"]["name"], "FirstFit");
    let rule = view["policy"]["rule"].as_str().unwrap();
    // The default settings: room is made by moving (4 at most), consolidation only hands back.
    assert!(
        rule.starts_with("Each tenant goes to the first Online node, by name")
            && rule.ends_with(
                "a placed tenant moves only off a draining node or to make room for a waiting \
                 tenant that fits nowhere (at most 4 moved for it), make-before-break."
            ),
        "{rule}"
    );

    // Nodes in name order; node-eu-1 holds acme: 2 of 64 threads, 4 of 256 GB, 20 of 8000 GB.
    let names: Vec<_> = view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["node-eu-1", "node-eu-2"]);
    let eu1 = node(&view, "node-eu-1");
    assert_eq!(eu1["state"], "Online");
    assert_eq!(
        eu1["capacity"],
        json!({"threads": 64, "memoryGb": 256, "storageGb": 8000})
    );
    assert_eq!(
        eu1["allocated"],
        json!({"threads": 2, "memoryGb": 4, "storageGb": 20})
    );
    // 64 - 2 = 62, 256 - 4 = 252, 8000 - 20 = 7980.
    assert_eq!(
        eu1["free"],
        json!({"threads": 62, "memoryGb": 252, "storageGb": 7980})
    );
    assert_eq!(eu1["overCapacity"], false);
    assert_eq!(eu1["draining"], false);
    assert!(eu1["drained"].is_null());
    assert_eq!(eu1["tenants"][0]["tenant"], "default/acme");
    assert_eq!(eu1["tenants"][0]["phase"], "Active");
    assert_eq!(node(&view, "node-eu-2")["tenants"], json!([]));

    // Totals: 64 + 32 = 96 threads; 62 + 32 = 94 free, all placeable.
    let totals = &view["totals"];
    assert_eq!(totals["nodes"], 2);
    assert_eq!(totals["nodesByState"]["Online"], 2);
    assert_eq!(
        totals["capacity"],
        json!({"threads": 96, "memoryGb": 384, "storageGb": 12000})
    );
    assert_eq!(
        totals["allocated"],
        json!({"threads": 2, "memoryGb": 4, "storageGb": 20})
    );
    assert_eq!(
        totals["free"],
        json!({"threads": 94, "memoryGb": 380, "storageGb": 11980})
    );
    assert_eq!(totals["placeable"], totals["free"]);
    assert_eq!(totals["tenantsByPhase"]["PendingCapacity"], 1);
    assert_eq!(totals["waiting"], 1);
    assert_eq!(totals["drainingNodes"], 0);
    assert_eq!(totals["movesInFlight"], 0);
    assert_eq!(view["moves"], json!([]));
    assert_eq!(view["blocked"], json!([]));

    // big waits; against the most free on an eligible node (node-eu-1: 62 threads, 252 GB,
    // 7980 GB) it is short by 256 - 62 = 194 threads, 1024 - 252 = 772 GB, 100000 - 7980 = 92020 GB.
    let waiting = view["waiting"].as_array().unwrap();
    assert_eq!(waiting.len(), 1, "{view:#}");
    let big = &waiting[0];
    assert_eq!(big["tenant"], "default/big");
    assert_eq!(big["phase"], "PendingCapacity");
    assert_eq!(
        big["requested"],
        json!({"threads": 256, "memoryGb": 1024, "storageGb": 100000})
    );
    assert!(big["createdAt"].is_string());
    let shortfall = &big["shortfall"];
    assert_eq!(shortfall["against"], "eligibleNodes");
    assert_eq!(shortfall["eligibleNodes"], 2);
    assert_eq!(
        shortfall["available"],
        json!({"threads": 62, "memoryGb": 252, "storageGb": 7980})
    );
    assert_eq!(
        shortfall["shortBy"],
        json!({"threads": 194, "memoryGb": 772, "storageGb": 92020})
    );
    // The status message, written by the controller, names the same shortfall.
    let message = big["message"].as_str().unwrap();
    assert!(message.contains("short by 194"), "{message}");
    assert!(
        shortfall["summary"]
            .as_str()
            .unwrap()
            .contains("threads: needs 256, at most 62 free (short by 194)"),
        "{shortfall}"
    );

    // The same data again is the same generation; a change makes a new one.
    let generation = view["generation"].as_u64().unwrap();
    assert_eq!(
        get_json("/api/fleet", &state).await["generation"],
        generation
    );
    patch_acme_to_cluster(&fleet).await;
    fleet
        .settle(Duration::from_millis(100), WAIT)
        .await
        .unwrap();
    let after = get_json("/api/fleet", &state).await;
    assert!(after["generation"].as_u64().unwrap() > generation);
    assert_eq!(node(&after, "node-eu-1")["allocated"]["threads"], 4);
}

#[tokio::test]
async fn the_page_is_html_with_its_own_assets_and_answers_only_get() {
    let state = State::default();
    let page = serve::respond_with("/", &state);
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"));
    let html = page.into_body().collect().await.unwrap().to_bytes();
    let html = String::from_utf8(html.to_vec()).unwrap();
    for part in [
        "<h1>Nodes &amp; Capacity</h1>",
        "<main",
        "<table class=\"nodes\">",
    ] {
        assert!(html.contains(part), "the page lacks {part}");
    }
    for (path, content_type) in [
        ("/fleet.css", "text/css; charset=utf-8"),
        ("/fleet.js", "text/javascript; charset=utf-8"),
    ] {
        let response = serve::respond_with(path, &state);
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.headers()["content-type"], content_type);
    }
    let post = serve::respond_to(&http::Method::POST, "/api/fleet", &state);
    assert_eq!(post.status(), 405);
    assert_eq!(post.headers()["allow"], "GET, HEAD");
}

#[tokio::test]
async fn with_the_page_off_its_paths_are_404_and_metrics_stay() {
    let state = State::new(
        controller::Handles::default(),
        serve::Settings {
            page: false,
            ..serve::Settings::default()
        },
    );
    for path in [
        "/",
        "/api/fleet",
        "/api/fleet/events",
        "/fleet.js",
        "/fleet.css",
    ] {
        assert_eq!(serve::respond_with(path, &state).status(), 404, "{path}");
    }
    assert_eq!(serve::respond_with("/metrics", &state).status(), 200);
    assert_eq!(serve::respond_with("/healthz", &state).status(), 200);
}

#[tokio::test]
async fn a_replica_that_does_not_lead_says_so_and_shows_no_numbers() {
    let state = State::default();
    let view = get_json("/api/fleet", &state).await;
    assert_eq!(view["live"], false);
    assert_eq!(view["role"], "starting");
    assert!(view["totals"].is_null());
    assert_eq!(view["nodes"], json!([]));
    assert!(!view["message"].as_str().unwrap().is_empty());
}

/// A minimal reader of one HTTP/1.1 response with a chunked body: the head, then the chunks.
struct EventStream {
    stream: tokio::net::TcpStream,
    buffer: Vec<u8>,
    head: String,
}

impl EventStream {
    async fn open(addr: std::net::SocketAddr, path: &str) -> EventStream {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut events = EventStream {
            stream,
            buffer: Vec::new(),
            head: String::new(),
        };
        let end = events.fill_until(b"\r\n\r\n").await;
        events.head = String::from_utf8(events.buffer.drain(..end + 4).collect()).unwrap();
        events
    }

    /// Reads until `needle` is in the buffer; returns where it starts.
    async fn fill_until(&mut self, needle: &[u8]) -> usize {
        loop {
            if let Some(at) = self.buffer.windows(needle.len()).position(|w| w == needle) {
                return at;
            }
            let mut chunk = [0u8; 8192];
            let n = tokio::time::timeout(WAIT, self.stream.read(&mut chunk))
                .await
                .expect("the event stream went silent")
                .unwrap();
            assert!(n > 0, "the event stream ended");
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }

    /// The next chunk of the body: one event (the server writes one event per chunk).
    async fn next_event(&mut self) -> String {
        let line_end = self.fill_until(b"\r\n").await;
        let size_line = String::from_utf8(self.buffer[..line_end].to_vec()).unwrap();
        let size = usize::from_str_radix(size_line.trim(), 16).unwrap();
        self.buffer.drain(..line_end + 2);
        while self.buffer.len() < size + 2 {
            let mut chunk = [0u8; 8192];
            let n = tokio::time::timeout(WAIT, self.stream.read(&mut chunk))
                .await
                .expect("the event stream went silent")
                .unwrap();
            assert!(n > 0, "the event stream ended");
            self.buffer.extend_from_slice(&chunk[..n]);
        }
        let event = String::from_utf8(self.buffer[..size].to_vec()).unwrap();
        self.buffer.drain(..size + 2);
        event
    }
}

/// The event's name and its data, parsed.
fn parse_event(text: &str) -> (String, Value) {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::to_owned)
    };
    let name = field("event: ").unwrap_or_else(|| panic!("no event name in {text:?}"));
    let data = field("data: ").unwrap_or_else(|| panic!("no data in {text:?}"));
    (name, serde_json::from_str(&data).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_pushes_a_change_within_seconds_and_heartbeats_while_quiet() {
    let state = State::default();
    let (fleet, _running) = fleet_with_examples(&state).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _server = AbortOnDrop(tokio::spawn(async move {
        serve::serve_on(listener, state).await.unwrap();
    }));

    let mut events = EventStream::open(addr, "/api/fleet/events").await;
    assert!(events.head.starts_with("HTTP/1.1 200"), "{}", events.head);
    assert!(
        events
            .head
            .to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{}",
        events.head
    );
    let first = events.next_event().await;
    assert!(first.starts_with("retry: 2000\n\n"), "{first:?}");
    let (name, view) = parse_event(first.trim_start_matches("retry: 2000\n\n"));
    assert_eq!(name, "fleet");
    assert_eq!(node(&view, "node-eu-1")["allocated"]["threads"], 2);
    let generation = view["generation"].as_u64().unwrap();

    // Quiet: a heartbeat comes within two seconds (and a bit), carrying the same generation.
    let started = std::time::Instant::now();
    let (name, beat) = parse_event(&events.next_event().await);
    assert_eq!(name, "heartbeat");
    assert_eq!(beat["generation"], generation);
    assert!(started.elapsed() < Duration::from_secs(4));

    // A change: the next fleet event shows acme's second replica, without asking again.
    patch_acme_to_cluster(&fleet).await;
    let started = std::time::Instant::now();
    loop {
        let (name, data) = parse_event(&events.next_event().await);
        if name == "fleet" && node(&data, "node-eu-1")["allocated"]["threads"] == 4 {
            assert!(data["generation"].as_u64().unwrap() > generation);
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "no fleet event with 4 threads on node-eu-1"
        );
    }
    // Pushed within the 1 s pacing plus the controller's work, not at some slow poll.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_fleet_shows_a_drained_node_and_then_a_tenant_that_cannot_leave_a_draining_one() {
    let state = State::default();
    let (fleet, _running) = fleet_with_examples(&state).await;

    // node-eu-1 drains: acme (2 threads) moves to node-eu-2, and node-eu-1 says it is drained.
    set_state(&fleet, "node-eu-1", "Draining");
    fleet
        .settle(Duration::from_millis(100), WAIT)
        .await
        .unwrap();
    let view = wait_for_view(&state, "node-eu-1 drained", |v| {
        node(v, "node-eu-1")["drained"]["status"] == "True"
    })
    .await;
    let eu1 = node(&view, "node-eu-1");
    assert_eq!(eu1["state"], "Draining");
    assert_eq!(eu1["draining"], true);
    assert_eq!(eu1["beingDeleted"], false);
    assert_eq!(eu1["takesNewTenants"], false);
    assert_eq!(eu1["drained"]["reason"], "Empty");
    let message = eu1["drained"]["message"].as_str().unwrap();
    assert!(message.contains("holds no reservations"), "{message}");
    assert_eq!(eu1["tenants"], json!([]));
    let eu2 = node(&view, "node-eu-2");
    assert_eq!(eu2["draining"], false);
    assert_eq!(eu2["tenants"][0]["tenant"], "default/acme");
    assert_eq!(eu2["tenants"][0]["phase"], "Active");
    assert!(eu2["tenants"][0]["movingFrom"].is_null());
    // At rest: no move in flight, none blocked.
    assert_eq!(view["moves"], json!([]));
    assert_eq!(view["blocked"], json!([]));
    let totals = &view["totals"];
    assert_eq!(totals["drainingNodes"], 1);
    assert_eq!(totals["nodesByState"]["Draining"], 1);
    assert_eq!(totals["movesInFlight"], 0);
    // Only node-eu-2's room is placeable now: 32 - 2 = 30 threads.
    assert_eq!(totals["placeable"]["threads"], 30);

    // node-eu-2 drains too: acme has nowhere to go, stays and says why.
    set_state(&fleet, "node-eu-2", "Draining");
    let view = wait_for_view(&state, "acme blocked on node-eu-2", |v| {
        v["blocked"].as_array().is_some_and(|b| !b.is_empty())
    })
    .await;
    let blocked = &view["blocked"][0];
    assert_eq!(blocked["tenant"], "default/acme");
    assert_eq!(blocked["node"], "node-eu-2");
    assert_eq!(blocked["phase"], "Active");
    assert_eq!(
        blocked["reserved"],
        json!({"threads": 2, "memoryGb": 4, "storageGb": 20})
    );
    let message = blocked["message"].as_str().unwrap();
    assert!(message.contains("no other node can take it"), "{message}");
    assert_eq!(blocked["shortfall"]["eligibleNodes"], 0);
    let eu2 = node(&view, "node-eu-2");
    assert_eq!(eu2["draining"], true);
    assert_eq!(eu2["tenants"][0]["moveBlocked"], true);
    assert_eq!(view["totals"]["blockedMoves"], 1);
    assert_eq!(view["totals"]["drainingNodes"], 2);
    assert_eq!(view["moves"], json!([]));
    let drained = wait_for_view(&state, "node-eu-2's Drained condition", |v| {
        node(v, "node-eu-2")["drained"]["status"] == "False"
    })
    .await;
    let drained = &node(&drained, "node-eu-2")["drained"];
    assert_eq!(drained["reason"], "TenantsRemain");
    assert!(
        drained["message"]
            .as_str()
            .unwrap()
            .contains("default/acme"),
        "{drained}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_fleet_shows_a_move_in_flight_on_both_nodes_until_it_completes() {
    let state = State::default();
    let (fleet, mut running) = fleet_with_examples(&state).await;
    let acme = fleet
        .tenants()
        .into_iter()
        .find(|t| t.metadata.name.as_deref() == Some("acme"))
        .and_then(|t| t.metadata.uid)
        .unwrap();

    // A move caught in flight, built with the controller stopped: node-eu-1 drains, both nodes
    // hold acme and its status records the move (as after the target entry is written).
    running.0.abort();
    assert!((&mut running.0).await.unwrap_err().is_cancelled());
    set_state(&fleet, "node-eu-1", "Draining");
    let version = format!("{GROUP}/v1alpha1");
    for object in [
        json!({"apiVersion": version, "kind": "Node", "metadata": {"name": "node-eu-2"},
               "status": {"allocations": [{"tenant": "default/acme", "uid": acme,
                   "resources": {"threads": 2, "memoryGb": 4, "storageGb": 20}}]}}),
        json!({"apiVersion": version, "kind": "Tenant",
               "metadata": {"name": "acme", "namespace": "default"},
               "status": {"phase": "Migrating", "nodeName": "node-eu-1",
                          "reserved": {"threads": 2, "memoryGb": 4, "storageGb": 20},
                          "migration": {"from": "node-eu-1", "to": "node-eu-2"}}}),
    ] {
        fleet.api.apply(object).unwrap();
    }
    // The controller starts again but cannot write a Node status, so the move stays in flight
    // (its status keeps the record while the step fails) and the page shows it, live.
    fleet.api.inject(
        Fault::writes()
            .resource("nodes")
            .subresource("status")
            .always(),
    );
    let settings = Settings {
        error_backoff: Duration::from_millis(50),
        error_backoff_max: Duration::from_millis(200),
        ..Settings::default()
    };
    let _running = AbortOnDrop(tokio::spawn(controller::run_with(
        fleet.client.clone(),
        settings,
        state.handles(),
    )));
    let view = wait_for_view(&state, "the move in flight", |v| {
        v["live"] == true && v["moves"].as_array().is_some_and(|m| !m.is_empty())
    })
    .await;
    assert_eq!(
        view["moves"],
        json!([{"tenant": "default/acme", "from": "node-eu-1", "to": "node-eu-2",
                "resources": {"threads": 2, "memoryGb": 4, "storageGb": 20}}])
    );
    let eu1 = node(&view, "node-eu-1");
    assert_eq!(eu1["draining"], true);
    assert_eq!(eu1["tenants"][0]["phase"], "Migrating");
    assert_eq!(eu1["tenants"][0]["movingTo"], "node-eu-2");
    let eu2 = node(&view, "node-eu-2");
    assert_eq!(eu2["tenants"][0]["tenant"], "default/acme");
    assert_eq!(eu2["tenants"][0]["movingFrom"], "node-eu-1");
    // Reserved on both while it moves: 2 threads on each.
    assert_eq!(eu1["allocated"]["threads"], 2);
    assert_eq!(eu2["allocated"]["threads"], 2);
    assert_eq!(view["totals"]["movesInFlight"], 1);
    assert_eq!(view["totals"]["tenantsByPhase"]["Migrating"], 1);

    // Node writes succeed again: the move completes, and at rest there is none in flight.
    fleet.api.clear_faults();
    let view = wait_for_view(&state, "the move to complete", |v| {
        v["moves"] == json!([]) && node(v, "node-eu-1")["drained"]["status"] == "True"
    })
    .await;
    assert_eq!(node(&view, "node-eu-1")["tenants"], json!([]));
    let eu2 = node(&view, "node-eu-2");
    assert_eq!(eu2["tenants"][0]["phase"], "Active");
    assert!(eu2["tenants"][0]["movingFrom"].is_null());
    assert_eq!(view["totals"]["movesInFlight"], 0);
    assert_eq!(view["totals"]["drainingNodes"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_fleet_lists_the_machine_asked_for_a_waiting_tenant_and_where_it_is() {
    let state = State::default();
    let fleet = Fleet::new().unwrap();
    let _running = AbortOnDrop(tokio::spawn(controller::run_with(
        fleet.client.clone(),
        buying(),
        state.handles(),
    )));
    let purchase = examples().join("purchase");
    let objects = manifests::read_paths(&[examples(), purchase]).unwrap();
    let (nodes, others): (Vec<_>, Vec<_>) = objects.into_iter().partition(|o| o["kind"] == "Node");
    fleet.apply(&nodes).await.unwrap();
    fleet.apply(&others).await.unwrap();
    // No provisioner runs: the request for big stays Pending, and the page says so.
    let view = wait_for_view(&state, "a request for big", |v| {
        v["requests"].as_array().is_some_and(|r| !r.is_empty())
    })
    .await;
    let request = &view["requests"][0];
    assert_eq!(request["class"], "hetzner-ax162");
    assert_eq!(request["phase"], "Pending");
    assert_eq!(request["tenants"], json!(["default/big"]));
    assert_eq!(request["node"], "");
    assert_eq!(request["capacity"]["threads"], 384);
    // The tick's published view counts it as awaited under its class, and every class has a line.
    let view = wait_for_view(&state, "the machines of each class by use", |v| {
        v["disruption"]["machines"]
            .as_array()
            .is_some_and(|m| m.iter().any(|c| c["awaited"] == 1))
    })
    .await;
    let machines = view["disruption"]["machines"].as_array().unwrap();
    let line = machines
        .iter()
        .find(|c| c["class"] == "hetzner-ax162")
        .unwrap();
    assert_eq!(
        (
            &line["awaited"],
            &line["inUse"],
            &line["idle"],
            &line["orphaned"]
        ),
        (&json!(1), &json!(0), &json!(0), &json!(0))
    );
    assert_eq!(view["disruption"]["strays"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_fleet_shows_the_room_being_made_for_a_waiting_tenant_and_who_moves_for_it() {
    use tenant_placer::testing::{node as node_manifest, tenant};
    let state = State::default();
    let fleet = Fleet::new().unwrap();
    let _running = AbortOnDrop(tokio::spawn(controller::run_with(
        fleet.client.clone(),
        buying(),
        state.handles(),
    )));
    let settle = || fleet.settle(Duration::from_millis(100), WAIT);
    // a (8 threads) holds t1 and t2 (3 each), b (6) holds t3 (3): the 7-thread w fits
    // nowhere; t1 and t2 moving to b and c make room on a (no NodeClass: nothing to buy).
    fleet
        .apply(&[node_manifest("a").capacity(8, 64, 1000).manifest()])
        .await
        .unwrap();
    settle().await.unwrap();
    for t in ["t1", "t2"] {
        fleet
            .apply(&[tenant(t).resources(3, 1, 1).manifest()])
            .await
            .unwrap();
        settle().await.unwrap();
    }
    fleet
        .apply(&[
            node_manifest("b").capacity(3, 64, 1000).manifest(),
            node_manifest("c").capacity(3, 64, 1000).manifest(),
        ])
        .await
        .unwrap();
    settle().await.unwrap();
    // Node statuses cannot be written: the moves cannot start, and the room stays in the making.
    fleet.api.inject(
        Fault::writes()
            .resource("nodes")
            .subresource("status")
            .always(),
    );
    fleet
        .apply(&[tenant("w").resources(7, 1, 1).manifest()])
        .await
        .unwrap();
    let view = wait_for_view(&state, "room being made for w", |v| {
        v["disruption"]["rooms"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
    })
    .await;
    assert_eq!(
        view["disruption"]["rooms"],
        json!([{"waiter": "default/w", "node": "a", "moves": [
            {"tenant": "default/t1", "to": "b"}, {"tenant": "default/t2", "to": "c"}]}])
    );
    // The faults go: the moves are made, w is placed on a, and no room is in the making.
    fleet.api.clear_faults();
    let view = wait_for_view(&state, "w placed", |v| {
        v["disruption"]["rooms"] == json!([])
            && node(v, "a")["tenants"]
                .as_array()
                .is_some_and(|t| t.len() == 1 && t[0]["tenant"] == "default/w")
    })
    .await;
    assert_eq!(node(&view, "b")["allocated"]["threads"], 3);
    assert_eq!(node(&view, "c")["allocated"]["threads"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_fleet_gives_each_node_the_zone_its_zone_label_names_and_each_spread_tenants_replicas()
{
    // examples/spread with the zones under another key, which the controller is told to read.
    let settings = Settings {
        zone_label: Some("example.com/zone".into()),
        ..Settings::default()
    };
    let state = State::new(
        controller::Handles::default(),
        serve::Settings::of(&settings),
    );
    let mut objects = manifests::read_paths(&[examples().join("spread")]).unwrap();
    for object in &mut objects {
        if let Some(labels) = object["metadata"]["labels"].as_object_mut()
            && let Some(zone) = labels.remove("topology.kubernetes.io/zone")
        {
            labels.insert("example.com/zone".into(), zone);
        }
    }
    let (_fleet, _running) = fleet_with(&state, settings, objects).await;
    let view = wait_for_view(&state, "orders-db and cache spread", |v| {
        v["spread"].as_array().is_some_and(|s| {
            s.len() == 2
                && s.iter()
                    .all(|t| t["placements"].as_array().is_some_and(|p| !p.is_empty()))
        })
    })
    .await;
    let zones: Vec<(&str, &str)> = view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["name"].as_str().unwrap(), n["zone"].as_str().unwrap()))
        .collect();
    assert_eq!(
        zones,
        [
            ("node-fsn1-1", "fsn1"),
            ("node-fsn1-2", "fsn1"),
            ("node-hel1-1", "hel1"),
            ("node-hel1-2", "hel1"),
            ("node-nbg1-1", "nbg1"),
            ("node-nbg1-2", "nbg1"),
        ]
    );
    // By namespace/name: cache, then orders-db, one replica in each zone.
    assert_eq!(view["spread"][0]["tenant"], "default/cache");
    assert_eq!(
        view["spread"][1],
        json!({
            "tenant": "default/orders-db",
            "spread": "Zones",
            "phase": "Active",
            "replicas": 3,
            "placements": [
                {"node": "node-fsn1-1", "zone": "fsn1", "replicas": 1},
                {"node": "node-hel1-1", "zone": "hel1", "replicas": 1},
                {"node": "node-nbg1-1", "zone": "nbg1", "replicas": 1},
            ],
        }),
        "{view:#}"
    );
    // Each node's entry says how many replicas it holds; web's (not spread) says nothing.
    let held = |node_name: &str, tenant: &str| {
        node(&view, node_name)["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tenant"] == tenant)
            .unwrap_or_else(|| panic!("{tenant} not on {node_name}: {view:#}"))["replicas"]
            .clone()
    };
    assert_eq!(held("node-hel1-1", "default/orders-db"), json!(1));
    assert_eq!(held("node-fsn1-1", "default/web"), Value::Null);
}
