//! Which answer each request to the page gets: its paths, GET and HEAD only (else 405), the
//! embedded assets, the JSON snapshot and the event stream.

use bytes::Bytes;
use http::{Method, Response, StatusCode, header};

use super::events;
use super::{API_PATH, Body, CSS_PATH, EVENTS_PATH, INDEX_PATH, JS_PATH, Page, full, plain};

pub(super) const INDEX_HTML: &str = include_str!("assets/index.html");
pub(super) const FLEET_CSS: &str = include_str!("assets/fleet.css");
pub(super) const FLEET_JS: &str = include_str!("assets/fleet.js");

impl Page {
    /// The page's answer to a request, or None when `path` is not one of its paths.
    pub fn respond(&self, method: &Method, path: &str) -> Option<Response<Body>> {
        respond(method, path, self)
    }
}

/// True for the paths the page serves (`/`, `/api/fleet`, `/api/fleet/events` and its assets).
fn is_page_path(path: &str) -> bool {
    matches!(
        path,
        INDEX_PATH | API_PATH | EVENTS_PATH | CSS_PATH | JS_PATH
    )
}

fn respond(method: &Method, path: &str, page: &Page) -> Option<Response<Body>> {
    if !is_page_path(path) {
        return None;
    }
    if method != Method::GET && method != Method::HEAD {
        let mut response = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "the fleet page is read-only: GET or HEAD\n",
        );
        response
            .headers_mut()
            .insert(header::ALLOW, http::HeaderValue::from_static("GET, HEAD"));
        return Some(response);
    }
    Some(match path {
        INDEX_PATH => asset(INDEX_HTML, "text/html; charset=utf-8"),
        CSS_PATH => asset(FLEET_CSS, "text/css; charset=utf-8"),
        JS_PATH => asset(FLEET_JS, "text/javascript; charset=utf-8"),
        API_PATH => match serde_json::to_vec(&page.snapshot()) {
            Ok(json) => full(
                StatusCode::OK,
                "application/json",
                Bytes::from(json),
                "no-store",
            ),
            Err(error) => plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("could not render the fleet: {error}\n"),
            ),
        },
        _ => events::respond(method, page),
    })
}

fn asset(text: &'static str, content_type: &'static str) -> Response<Body> {
    // no-cache: revalidate, so a new binary's page is never mixed with an old script.
    full(
        StatusCode::OK,
        content_type,
        Bytes::from_static(text.as_bytes()),
        "no-cache",
    )
}
