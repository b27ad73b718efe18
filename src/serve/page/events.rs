//! `/api/fleet/events`: the fleet as Server-Sent Events.
//!
//! ```text
//!   connect ─▶ retry: 2000, event: fleet (now)
//!   every 250 ms: observe the caches
//!     generation moved and ≥ 1 s since the last fleet event ─▶ event: fleet
//!     nothing written for 2 s                                ─▶ event: heartbeat
//! ```
//!
//! Rules enforced here: at most one `fleet` event a second per stream, a heartbeat at least every
//! two seconds, and the stream (and its slot among [`super::MAX_LIVE_VIEWS`]) ends with its
//! connection.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::Frame;
use tokio::sync::OwnedSemaphorePermit;

use super::{Body, Page, observe, view_of};

/// How often a stream looks at the caches.
const TICK: Duration = Duration::from_millis(250);
/// The least time between two `fleet` events of one stream.
const MIN_PUSH: Duration = Duration::from_secs(1);
/// The longest a stream stays silent; the page calls the data stale after a few of these.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// What EventSource waits before reconnecting, in milliseconds.
const RETRY_MS: u64 = 2000;

pub(super) fn respond(method: &Method, page: &Page) -> Response<Body> {
    let Ok(permit) = page.feed.streams.clone().try_acquire_owned() else {
        return super::plain(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "too many live views of the fleet are open ({}); /api/fleet answers without one\n",
                super::MAX_LIVE_VIEWS
            ),
        );
    };
    let body = if method == Method::HEAD {
        Empty::new().boxed_unsync()
    } else {
        StreamBody::new(stream(page.clone(), permit)).boxed_unsync()
    };
    super::with_headers(body, StatusCode::OK, "text/event-stream", "no-store")
}

struct Stream {
    page: Page,
    _permit: OwnedSemaphorePermit,
    /// The generation of the last `fleet` event, None before the first.
    sent: Option<u64>,
    last_push: Instant,
    last_write: Instant,
}

fn stream(
    page: Page,
    permit: OwnedSemaphorePermit,
) -> impl futures::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + 'static {
    let now = Instant::now();
    let state = Stream {
        page,
        _permit: permit,
        sent: None,
        last_push: now,
        last_write: now,
    };
    futures::stream::unfold(state, |mut s| async move {
        let first = s.sent.is_none();
        loop {
            if !first {
                tokio::time::sleep(TICK).await;
            }
            let observed = observe(&s.page);
            let now = Instant::now();
            let moved = s.sent != Some(observed.generation);
            let text = if first || (moved && now.duration_since(s.last_push) >= MIN_PUSH) {
                let view = view_of(&s.page, &observed);
                let json = serde_json::to_string(&view).unwrap_or_else(|error| {
                    tracing::warn!(%error, "could not render the fleet for a live view");
                    String::from("{}")
                });
                s.sent = Some(observed.generation);
                s.last_push = now;
                let retry = if first {
                    format!("retry: {RETRY_MS}\n\n")
                } else {
                    String::new()
                };
                format!(
                    "{retry}event: fleet\nid: {}\ndata: {json}\n\n",
                    observed.generation
                )
            } else if now.duration_since(s.last_write) >= HEARTBEAT {
                format!(
                    "event: heartbeat\ndata: {{\"generation\":{},\"at\":\"{}\",\"live\":{}}}\n\n",
                    observed.generation,
                    super::now(),
                    observed.live
                )
            } else {
                continue;
            };
            s.last_write = now;
            return Some((Ok(Frame::data(Bytes::from(text))), s));
        }
    })
}
