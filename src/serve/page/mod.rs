//! "Nodes & Capacity": a read-only, live page of the fleet, served beside `/metrics` by
//! [`crate::serve`].
//!
//! ```text
//!   watch caches (Caches) ──observe──▶ generation (FleetFeed) ──view──▶ FleetView (JSON)
//!        Node, Tenant stores               bumps when any cached        │
//!                                          object or the role changes   ├─ GET /api/fleet
//!                                                                        └─ GET /api/fleet/events (SSE)
//!   GET /  index.html + fleet.css + fleet.js (embedded; no build step, nothing from the network)
//! ```
//!
//! Rules enforced here:
//! - everything is read from the controller's watch caches: viewing the page costs the API
//!   server nothing, and the page has no way to change anything (GET and HEAD only, else 405);
//! - numbers are live only while this replica leads with synced caches; otherwise the answer
//!   says why and carries no numbers (a standby's caches are a past term's, never shown);
//! - every answer carries its generation and time; the event stream pushes a new snapshot when
//!   the generation changes, at most once a second, and a heartbeat when it has written nothing
//!   for two seconds, so the page can tell a quiet fleet from a lost connection;
//! - at most [`MAX_LIVE_VIEWS`] event streams at once (503 beyond), each ended with its
//!   connection;
//! - the HTML, CSS and JavaScript are embedded, served with a Content-Security-Policy that
//!   allows only this origin; the script writes data with `textContent`, never as HTML;
//! - the page reads what the controller reports into ([`Health`], [`Caches`]) and knows nothing
//!   of the server that routes to it: the server hands it a request's method and path.

pub mod capacity;
mod events;
mod routes;
pub mod view;

use std::convert::Infallible;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use k8s_openapi::jiff;
use kube::Resource;
use tokio::sync::Semaphore;

use crate::api::{Node, NodeClass, NodeRequest, Tenant};
use crate::controller::state::tick::TickView;
use crate::controller::{Caches, Health, Role};
pub use view::FleetView;

/// The page.
pub const INDEX_PATH: &str = "/";
/// The fleet as JSON ([`FleetView`]).
pub const API_PATH: &str = "/api/fleet";
/// The fleet as Server-Sent Events: `fleet` events carrying a [`FleetView`], `heartbeat`s.
pub const EVENTS_PATH: &str = "/api/fleet/events";
const CSS_PATH: &str = "/fleet.css";
const JS_PATH: &str = "/fleet.js";

/// Event streams served at once; more are refused with 503 (the page retries).
pub const MAX_LIVE_VIEWS: usize = 32;

/// Same origin only; no inline script or style; no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The body of every answer on the metrics address (the event stream is not a `Full` one).
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// The page: what it reads (the controller's [`Health`] and [`Caches`]), the policy it states,
/// and its change feed. One per server; clones share the feed and the live views' budget.
#[derive(Clone, Debug)]
pub struct Page {
    health: Arc<Health>,
    caches: Caches,
    /// The placement policy in force: the page states its name and rule.
    policy: placement::Policy,
    /// What moves a placed tenant besides a drain: the rule says so.
    moves: view::Moves,
    /// The Node label naming zones (the controller's, in force): each node's zone is its value.
    zone_label: Arc<str>,
    feed: Arc<FleetFeed>,
}

impl Page {
    /// The page of a controller reporting into `health` and `caches`, placing by `policy`,
    /// moving placed tenants as `moves` says, reading zones from the Node label `zone_label`.
    pub fn new(
        health: Arc<Health>,
        caches: Caches,
        policy: placement::Policy,
        moves: view::Moves,
        zone_label: Arc<str>,
    ) -> Page {
        Page {
            health,
            caches,
            policy,
            moves,
            zone_label,
            feed: Arc::default(),
        }
    }

    /// The fleet as `/api/fleet` answers it now.
    pub fn snapshot(&self) -> FleetView {
        view_of(self, &observe(self))
    }
}

/// The generation counter the page reads its "has anything changed" from, and the live views'
/// budget. One per [`Page`].
#[derive(Debug)]
struct FleetFeed {
    state: Mutex<FeedState>,
    streams: Arc<Semaphore>,
}

#[derive(Debug, Default)]
struct FeedState {
    fingerprint: u64,
    generation: u64,
}

impl Default for FleetFeed {
    fn default() -> Self {
        FleetFeed {
            state: Mutex::default(),
            streams: Arc::new(Semaphore::new(MAX_LIVE_VIEWS)),
        }
    }
}

impl FleetFeed {
    /// The generation of data with this fingerprint: the last one if unchanged, else the next.
    fn generation_of(&self, fingerprint: u64) -> u64 {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.generation == 0 || state.fingerprint != fingerprint {
            state.generation = state.generation.saturating_add(1);
            state.fingerprint = fingerprint;
        }
        state.generation
    }
}

/// What the caches held at one moment, with its generation.
struct Observed {
    generation: u64,
    role: Role,
    live: bool,
    nodes: Vec<Arc<Node>>,
    tenants: Vec<Arc<Tenant>>,
    requests: Vec<Arc<NodeRequest>>,
    classes: Vec<Arc<NodeClass>>,
    /// The last capacity tick's view (node requests on).
    tick: Option<Arc<TickView>>,
}

/// Reads the caches (cheap: shared pointers) and finds the generation of what they hold.
fn observe(page: &Page) -> Observed {
    let role = page.health.role();
    let caches = page.caches.get();
    let live = role == Role::Leading && caches.is_some();
    let (nodes, tenants) = match caches {
        Some((nodes, tenants)) if live => (nodes.state(), tenants.state()),
        _ => (Vec::new(), Vec::new()),
    };
    let (classes, requests) = match page.caches.purchases() {
        Some((classes, requests)) if live => (classes.state(), requests.state()),
        _ => (Vec::new(), Vec::new()),
    };
    let tick = page.caches.tick().filter(|_| live);
    let mut hasher = std::hash::DefaultHasher::new();
    (role_name(role), live, &page.policy).hash(&mut hasher);
    // Order-independent: the stores hand objects out in no particular order.
    let mut objects = 0u64;
    for meta in nodes
        .iter()
        .map(|n| n.meta())
        .chain(tenants.iter().map(|t| t.meta()))
        .chain(requests.iter().map(|r| r.meta()))
    {
        let mut one = std::hash::DefaultHasher::new();
        (
            &meta.name,
            &meta.namespace,
            &meta.uid,
            &meta.resource_version,
        )
            .hash(&mut one);
        objects = objects.wrapping_add(one.finish());
    }
    (objects, nodes.len(), tenants.len(), requests.len()).hash(&mut hasher);
    for class in &classes {
        (&class.metadata.name, &class.metadata.resource_version).hash(&mut hasher);
    }
    // No tick yet shows what an empty one does: the first tick is no change.
    match tick.as_deref() {
        Some(view) => view.hash(&mut hasher),
        None => TickView::default().hash(&mut hasher),
    }
    Observed {
        generation: page.feed.generation_of(hasher.finish()),
        role,
        live,
        nodes,
        tenants,
        requests,
        classes,
        tick,
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Leading => "leading",
        Role::Standby => "standby",
        Role::Starting => "starting",
    }
}

/// Now, to the millisecond, as RFC 3339 UTC.
fn now() -> String {
    let now = jiff::Timestamp::now();
    now.round(jiff::Unit::Millisecond)
        .unwrap_or(now)
        .to_string()
}

fn view_of(page: &Page, observed: &Observed) -> FleetView {
    let policy = view::PolicyView {
        name: page.policy.to_string(),
        rule: view::policy_rule(page.policy, page.moves),
    };
    let message = match observed.role {
        _ if observed.live => String::new(),
        Role::Standby => "This replica is a standby: another replica leads and places tenants, \
                          and only the leader's watch caches are live. Open the page of the \
                          leading replica (its /readyz says \"leading\")."
            .to_owned(),
        Role::Starting | Role::Leading => {
            "The controller is starting: its watch caches are not synced yet.".to_owned()
        }
    };
    let (totals, rows) = if observed.live {
        let (totals, rows) = view::fleet_rows(&observed.nodes, &observed.tenants, &page.zone_label);
        (Some(totals), rows)
    } else {
        (None, view::FleetRows::default())
    };
    FleetView {
        generation: observed.generation,
        generated_at: now(),
        live: observed.live,
        role: role_name(observed.role),
        message,
        policy,
        totals,
        nodes: rows.nodes,
        waiting: rows.waiting,
        moves: rows.moves,
        requests: view::requests(&observed.requests),
        blocked: rows.blocked,
        spread: rows.spread,
        capacity: if observed.live {
            capacity::of(&observed.nodes, &observed.classes, observed.tick.as_deref())
        } else {
            capacity::CapacityView::default()
        },
    }
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    full(
        status,
        "text/plain; charset=utf-8",
        Bytes::from(text.to_owned()),
        "no-store",
    )
}

fn full(
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
    cache: &'static str,
) -> Response<Body> {
    with_headers(Full::new(body).boxed_unsync(), status, content_type, cache)
}

fn with_headers(
    body: Body,
    status: StatusCode,
    content_type: &'static str,
    cache: &'static str,
) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CACHE_CONTROL, cache),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CONTENT_SECURITY_POLICY, CSP),
    ] {
        headers.insert(name, http::HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use http::Method;

    use super::routes::{FLEET_CSS, FLEET_JS, INDEX_HTML};
    use super::*;

    #[test]
    fn the_generation_moves_only_when_the_fingerprint_does() {
        let feed = FleetFeed::default();
        assert_eq!(feed.generation_of(7), 1);
        assert_eq!(feed.generation_of(7), 1);
        assert_eq!(feed.generation_of(8), 2);
        assert_eq!(feed.generation_of(7), 3);
    }

    fn page() -> Page {
        Page::new(
            Arc::default(),
            Caches::default(),
            placement::Policy::FirstFit,
            crate::serve::Settings::default().moves,
            crate::api::ZONE_LABEL.into(),
        )
    }

    #[test]
    fn a_replica_that_is_not_leading_shows_no_numbers_and_says_why() {
        let view = page().snapshot();
        assert!(!view.live);
        assert_eq!(view.role, "starting");
        assert!(view.totals.is_none() && view.nodes.is_empty() && view.waiting.is_empty());
        assert!(view.moves.is_empty() && view.blocked.is_empty() && view.spread.is_empty());
        assert!(view.message.contains("not synced"), "{}", view.message);
        assert_eq!(view.policy.name, "FirstFit");
    }

    #[test]
    fn only_get_and_head_are_answered() {
        let page = page();
        let post = page.respond(&Method::POST, API_PATH).unwrap();
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
        let index = page.respond(&Method::GET, INDEX_PATH).unwrap();
        assert_eq!(index.status(), StatusCode::OK);
        assert!(
            index.headers()[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap()
                .contains("script-src 'self'")
        );
        assert!(page.respond(&Method::GET, "/metrics").is_none());
    }

    #[test]
    fn live_views_beyond_the_budget_are_refused_until_one_ends() {
        let page = page();
        let open: Vec<_> = (0..MAX_LIVE_VIEWS)
            .map(|_| page.respond(&Method::GET, EVENTS_PATH).unwrap())
            .collect();
        assert!(open.iter().all(|r| r.status() == StatusCode::OK));
        let refused = page.respond(&Method::GET, EVENTS_PATH).unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(open);
        let again = page.respond(&Method::GET, EVENTS_PATH).unwrap();
        assert_eq!(again.status(), StatusCode::OK);
        assert_eq!(again.headers()[header::CONTENT_TYPE], "text/event-stream");
    }

    #[test]
    fn the_page_loads_its_assets_from_this_origin_only() {
        for reference in ["href=\"fleet.css\"", "src=\"fleet.js\""] {
            assert!(
                INDEX_HTML.contains(reference),
                "index.html lacks {reference}"
            );
        }
        for text in [INDEX_HTML, FLEET_CSS, FLEET_JS] {
            assert!(
                !text.contains("http://") && !text.contains("https://") && !text.contains("//cdn")
            );
        }
        assert!(
            !FLEET_JS.contains("innerHTML"),
            "data is written with textContent only"
        );
    }
}
