//! From HTTP to the store: routing, discovery documents, fault injection,
//! request accounting, and the JSON (or streaming) responses.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, HeaderValue, RETRY_AFTER, WARNING};
use http::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use crate::body::{ResponseBody, WatchStream};
use crate::discovery;
use crate::faults::{self, ByteCounts, FaultAction, RequestKey, Verb};
use crate::openapi;
use crate::patch::{self, PatchType};
use crate::scale;
use crate::status::{FieldError, Status, go_quote};
use crate::store::{Query, State, Target, UpdateMode, WatchStart, event_line};
use crate::table::{self, Render};
use crate::{ApiServer, DroppedConnection};

/// What a path names: a document (version, discovery, OpenAPI) with its
/// content type, or resources.
enum Route {
    Document(Value, &'static str),
    Resource {
        target: Target,
        verb: Verb,
        name: Option<String>,
    },
}

fn not_found() -> Status {
    Status::generic(404)
}

const JSON: &str = "application/json";

fn route(
    state: &State,
    method: &Method,
    path: &str,
    q: &Query,
    accept: Option<&str>,
) -> Result<Route, Status> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let document = |doc: Option<Value>| doc.map(|d| Route::Document(d, JSON)).ok_or_else(not_found);
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return document(Some(version_info())),
        ["api" | "apis"] if method != Method::GET => return Err(Status::generic(405)),
        [root @ ("api" | "apis")] => {
            let core = *root == "api";
            return Ok(match discovery::aggregated_version(accept) {
                Some(v) => Route::Document(
                    discovery::aggregated(state, core, v),
                    discovery::aggregated_content_type(v),
                ),
                None if core => Route::Document(discovery::api_versions(), JSON),
                None => Route::Document(discovery::group_list(state), JSON),
            });
        }
        ["openapi", "v3"] => return document(Some(openapi::index(state))),
        ["openapi", "v3", "api", version] => {
            return document(openapi::document(state, "", version));
        }
        ["openapi", "v3", "apis", group, version] => {
            return document(openapi::document(state, group, version));
        }
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(not_found()),
    };
    if rest.is_empty() {
        return document(discovery::resource_list(state, group, version));
    }
    // `/namespaces/{ns}/status` is the namespace's subresource, not a resource.
    let (namespace, resource, tail) = match rest {
        ["namespaces", ns, resource, tail @ ..]
            if !(group.is_empty()
                && tail.is_empty()
                && matches!(*resource, "status" | "finalize")) =>
        {
            (Some((*ns).to_owned()), *resource, tail)
        }
        [resource, tail @ ..] => (None, *resource, tail),
        [] => return Err(not_found()),
    };
    let kind = state
        .kinds
        .get(&(group.to_owned(), resource.to_owned()))
        .filter(|k| k.version(version).is_some())
        .ok_or_else(not_found)?;
    let (name, subresource) = match tail {
        [] => (None, None),
        [name] => (Some((*name).to_owned()), None),
        [name, sub] => (Some((*name).to_owned()), Some((*sub).to_owned())),
        _ => return Err(not_found()),
    };
    let target = Target {
        kind: kind.clone(),
        version: version.to_owned(),
        namespace,
        subresource,
    };
    let misplaced =
        kind.namespaced != target.namespace.is_some() && (name.is_some() || !kind.namespaced);
    if misplaced {
        return Err(not_found());
    }
    if let Some(sub) = &target.subresource {
        let served = match sub.as_str() {
            "status" => target.status_enabled(),
            "scale" => target.scale().is_some(),
            _ => false,
        };
        // The CRD handler answers a subresource it does not serve with the object's NotFound,
        // and verbs other than get, update and patch of one it serves with MethodNotSupported.
        if !served && kind.custom {
            let name = name.as_deref().unwrap_or_default();
            return Err(Status::not_found(kind.gr(), name));
        }
        if !served {
            return Err(not_found());
        }
        // (A built-in kind's routes have no such method: the generic 405.)
        let unserved = match method.as_str() {
            "POST" => Some("create"),
            "DELETE" => Some("delete"),
            _ => None,
        };
        if let Some(verb) = unserved {
            return Err(if kind.custom {
                Status::method_not_supported(kind.gr(), verb)
            } else {
                Status::generic(405)
            });
        }
    }
    let verb = match (method.as_str(), &name) {
        ("GET", Some(_)) => Verb::Get,
        ("GET", None) if q.is_true("watch") => Verb::Watch,
        ("GET", None) => Verb::List,
        ("POST", None) => Verb::Create,
        ("PUT", Some(_)) => Verb::Update,
        ("PATCH", Some(_)) => Verb::Patch,
        ("DELETE", Some(_)) => Verb::Delete,
        ("DELETE", None) => Verb::DeleteCollection,
        _ => return Err(Status::generic(405)),
    };
    Ok(Route::Resource { target, verb, name })
}

fn version_info() -> Value {
    json!({
        "major": "1", "minor": "35", "gitVersion": "v1.35.0+inmem", "gitCommit": "", "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z", "goVersion": "", "compiler": "rustc", "platform": "linux/amd64"
    })
}

fn json_response(code: StatusCode, value: &Value) -> Response<ResponseBody> {
    json_response_as(code, value, JSON)
}

fn json_response_as(
    code: StatusCode,
    value: &Value,
    content_type: &'static str,
) -> Response<ResponseBody> {
    let mut response = Response::new(ResponseBody::full(
        serde_json::to_vec(value).unwrap_or_default(),
    ));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn status_response(status: &Status) -> Response<ResponseBody> {
    let mut response = json_response(status.http_code(), &status.to_json());
    if let Some(secs) = status
        .details
        .as_ref()
        .map(|d| d.retry_after_seconds)
        .filter(|s| *s > 0)
    {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// A watch that fails after it started: HTTP 200 and one ERROR event.
fn watch_error(status: &Status) -> Response<ResponseBody> {
    let mut response = Response::new(ResponseBody::full(event_line("ERROR", &status.to_json())));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn dropped() -> Response<ResponseBody> {
    let mut response = Response::new(ResponseBody::full(Bytes::new()));
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response.extensions_mut().insert(DroppedConnection);
    response
}

fn parse_json(body: &Bytes) -> Result<Value, Status> {
    serde_json::from_slice(body)
        .map_err(|e| Status::bad_request(format!("error decoding the request body: {e}")))
}

/// The Status an injected `Respond` fault answers.
fn injected(code: u16, retry_after_seconds: u32, target: &Target, name: Option<&str>) -> Status {
    match (code, name) {
        (409, Some(name)) => Status::stale(target.kind.gr(), name),
        (429, _) => Status::too_many_requests(retry_after_seconds),
        (500, _) => Status::internal("injected fault"),
        (code, _) => Status::generic(code),
    }
}

impl ApiServer {
    /// Serves one request. A response carrying the [`DroppedConnection`]
    /// extension stands for a connection broken by an injected fault: the
    /// `Service` turns it into an error, an HTTP server should drop the
    /// connection.
    pub async fn handle(&self, req: Request<Bytes>) -> Response<ResponseBody> {
        let (parts, body) = req.into_parts();
        let query = Query::parse(parts.uri.query());
        let accept = parts.headers.get(ACCEPT).and_then(|v| v.to_str().ok());
        let routed = route(
            &self.shared.lock(),
            &parts.method,
            parts.uri.path(),
            &query,
            accept,
        );
        let (target, verb, name) = match routed {
            Ok(Route::Document(doc, content_type)) => {
                return json_response_as(StatusCode::OK, &doc, content_type);
            }
            Ok(Route::Resource { target, verb, name }) => (target, verb, name),
            Err(status) => return status_response(&status),
        };
        // What a read answers: the object, a Table or metadata only.
        let render = match verb {
            Verb::Get | Verb::List | Verb::Watch => Render::negotiate(
                accept,
                &table::default_columns(&target.kind, &target.version),
                query.get("includeObject"),
            ),
            _ => Ok(Render::Object),
        };
        let render = match render {
            Ok(render) => render,
            Err(status) => return status_response(&status),
        };
        let key = RequestKey {
            verb,
            group: target.kind.group.clone(),
            resource: target.kind.plural.clone(),
            subresource: target.subresource.clone(),
        };
        let request_bytes = u64::try_from(body.len()).unwrap_or(u64::MAX);
        let (fault, rv, expected_bytes) = {
            let mut state = self.shared.lock();
            state.stats.record(key.clone());
            if verb.is_write() {
                let request = ByteCounts {
                    request: request_bytes,
                    ..ByteCounts::default()
                };
                state.stats.record_bytes(&key, &request);
            }
            let fault = faults::take(&mut state.faults, &key, name.as_deref());
            if fault.is_some() {
                state.stats.faults_fired = state.stats.faults_fired.saturating_add(1);
            }
            let charges_bytes = verb.is_write()
                && self
                    .shared
                    .schedule
                    .model()
                    .is_some_and(|m| m.charges_bytes());
            let expected = if charges_bytes {
                expected_bytes(&state, &target, verb, name.as_deref(), request_bytes)
            } else {
                request_bytes
            };
            (fault, state.rv, expected)
        };
        // The cost model: a write waits for its slot and its service time (a 409 costs too).
        let costed = verb.is_write()
            && tokio::runtime::Handle::try_current().is_ok()
            && match self
                .shared
                .schedule
                .admit(std::time::Instant::now(), expected_bytes)
            {
                Some(served) => {
                    tokio::time::sleep_until(served.into()).await;
                    true
                }
                None => false,
            };
        // Once a costed write has run: its slot moves by what it handled beyond the estimate.
        let settle = |actual: u64| {
            if costed {
                self.shared.schedule.settle(expected_bytes, actual);
            }
        };
        match fault {
            // Timers need a Tokio runtime; without one the delay is skipped.
            Some(FaultAction::Delay(by)) if tokio::runtime::Handle::try_current().is_ok() => {
                tokio::time::sleep(by).await;
            }
            Some(FaultAction::Hold(ref gate)) => gate.pass().await,
            Some(FaultAction::Respond {
                code,
                retry_after_seconds,
            }) => {
                settle(request_bytes);
                return status_response(&injected(
                    code,
                    retry_after_seconds,
                    &target,
                    name.as_deref(),
                ));
            }
            Some(FaultAction::Disconnect) => {
                settle(request_bytes);
                return dropped();
            }
            Some(FaultAction::WatchGone) if verb == Verb::Watch => {
                let from = query.get("resourceVersion").unwrap_or("0");
                return watch_error(&Status::expired(format!(
                    "too old resource version: {from} ({rv})"
                )));
            }
            _ => {}
        }
        // Cut while it waited (the cost model, a delay): it never reaches the store.
        if self.is_cut() {
            settle(request_bytes);
            return dropped();
        }
        let content_type = parts
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let (response, served) = self.execute(
            &target,
            verb,
            name.as_deref().unwrap_or_default(),
            &Options {
                content_type,
                render: &render,
                user_agent: parts
                    .headers
                    .get(http::header::USER_AGENT)
                    .and_then(|v| v.to_str().ok()),
            },
            &query,
            &body,
        );
        if verb.is_write() {
            self.shared.lock().stats.record_bytes(&key, &served);
            settle(request_bytes.saturating_add(served.total()));
        }
        match fault {
            Some(FaultAction::CommitThenStall(stall)) => {
                stall.0.notify_one();
                std::future::pending::<()>().await;
                response
            }
            Some(FaultAction::CommitThenFail) => status_response(&Status::internal(
                "injected fault: the request was served but its response was lost",
            )),
            Some(FaultAction::CommitThenDisconnect) => dropped(),
            _ => response,
        }
    }

    /// Serves a routed request; answers the response and, for a write, the bytes its commits
    /// handled (stored objects and watch lines; the request body is counted before).
    fn execute(
        &self,
        t: &Target,
        verb: Verb,
        name: &str,
        options: &Options<'_>,
        q: &Query,
        body: &Bytes,
    ) -> (Response<ResponseBody>, ByteCounts) {
        let Options {
            content_type,
            render,
            user_agent,
        } = *options;
        let validation = match FieldValidation::from_query(q.get("fieldValidation")) {
            Ok(v) => v,
            Err(status) => return (status_response(&status), ByteCounts::default()),
        };
        let mut warnings: Vec<String> = Vec::new();
        // Unknown fields of a written object: refused (Strict), or a warning.
        let mut check = |obj: &Value, in_patch: bool| -> Result<(), Status> {
            let unknown = match validation {
                FieldValidation::Ignore => return Ok(()),
                _ => t.unknown_fields(obj),
            };
            if unknown.is_empty() {
                return Ok(());
            }
            let errors: Vec<String> = unknown
                .iter()
                .map(|f| format!("unknown field {}", go_quote(f)))
                .collect();
            if validation == FieldValidation::Strict {
                let strict = format!("strict decoding error: {}", errors.join(", "));
                let (kind, version) = t.body_kind();
                return Err(Status::bad_request(if in_patch {
                    strict
                } else {
                    format!(
                        "{kind} in version {version} cannot be handled as a {kind}: {strict}",
                        version = go_quote(version),
                    )
                }));
            }
            warnings.extend(errors);
            Ok(())
        };
        let mut state = self.shared.lock();
        // The kind may have gone (its CRD deleted) since the request was routed.
        if !state
            .kinds
            .contains_key(&(t.kind.group.clone(), t.kind.plural.clone()))
        {
            return (status_response(&not_found()), ByteCounts::default());
        }
        let dry_run = q.dry_run();
        state.warnings.clear();
        // Reads return before the match ends; every write reaches its end, which takes this.
        state.served_bytes = verb.is_write().then(ByteCounts::default);
        let writer =
            |apply| crate::managed::Writer::of_request(q.get("fieldManager"), user_agent, apply);
        state.writer = Some(writer(false));
        let created_or_ok = |(obj, created): (Arc<Value>, bool)| {
            (
                if created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                },
                obj,
            )
        };
        let result = match verb {
            Verb::Get => {
                let response = match state.get(t, name) {
                    Ok(obj) => {
                        json_response_as(StatusCode::OK, &render.one(obj), render.content_type())
                    }
                    Err(status) => status_response(&status),
                };
                return (response, ByteCounts::default());
            }
            Verb::List => {
                let response = match state.list(t, q) {
                    Ok(list) => {
                        json_response_as(StatusCode::OK, &render.list(list), render.content_type())
                    }
                    Err(status) => status_response(&status),
                };
                return (response, ByteCounts::default());
            }
            Verb::Watch => {
                let response = match state.watch(t, q, render.clone()) {
                    Ok(WatchStart::Gone(status)) => watch_error(&status),
                    Ok(WatchStart::Stream {
                        id,
                        rx,
                        bookmarks,
                        timeout,
                    }) => {
                        let every = bookmarks.then_some(state.config.bookmark_interval);
                        let stream = WatchStream::new(id, rx, self.shared.clone(), every, timeout);
                        let mut response = Response::new(ResponseBody::watch(stream));
                        response
                            .headers_mut()
                            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                        response
                    }
                    Err(status) => status_response(&status),
                };
                return (response, ByteCounts::default());
            }
            Verb::Create | Verb::Update if !is_json(content_type) => Err(unsupported_body()),
            Verb::Update if t.on_scale() => parse_json(body).and_then(|v| {
                // Decoding (types, then unknown fields), the type, then namespace and name.
                let scale = scale::decode(&v).map_err(|e| scale::put_decode_error(&e))?;
                check(&v, false)?;
                scale::check_type(&v)?;
                scale::check_put(&scale, t.namespace.as_deref(), name)?;
                let uid = scale.uid.clone();
                state
                    .update_scale(t, name, dry_run, &uid, |_| Ok(scale))
                    .map(|o| (StatusCode::OK, Arc::new(o)))
            }),
            Verb::Patch if t.on_scale() => patch_type(t, content_type, q).and_then(|kind| {
                state
                    .update_scale(t, name, dry_run, "", |current| {
                        let patched = patch::apply(kind, Some(&current), body)?;
                        let scale = scale::decode(&patched)
                            .map_err(|e| scale::patch_decode_error(&patched, &e))?;
                        check(&patched, true)?;
                        scale::check_patch(&scale, t.namespace.as_deref(), name)?;
                        Ok(scale)
                    })
                    .map(|o| (StatusCode::OK, Arc::new(o)))
            }),
            Verb::Create => parse_json(body)
                .and_then(|v| check(&v, false).map(|()| v))
                .and_then(|v| state.create(t, v, None, dry_run))
                .map(|o| (StatusCode::CREATED, o)),
            Verb::Update => parse_json(body).and_then(|v| {
                check(&v, false)?;
                let mode = UpdateMode {
                    put: true,
                    create_if_missing: t.kind.create_on_update && t.subresource.is_none(),
                    dry_run,
                };
                state.update(t, name, mode, |_| Ok(v)).map(created_or_ok)
            }),
            Verb::Patch => patch_type(t, content_type, q).and_then(|kind| {
                let apply = kind == PatchType::Apply;
                state.writer = Some(writer(apply));
                let mode = UpdateMode {
                    put: false,
                    create_if_missing: apply && t.subresource.is_none(),
                    dry_run,
                };
                state
                    .update(t, name, mode, |current| {
                        let patched = patch::apply(kind, current, body)?;
                        check(&patched, true)?;
                        Ok(patched)
                    })
                    .map(created_or_ok)
            }),
            Verb::Delete => delete_options(body)
                .and_then(|o| state.delete(t, name, &o, dry_run))
                .map(|o| (StatusCode::OK, Arc::new(o))),
            Verb::DeleteCollection => delete_options(body)
                .and_then(|o| state.delete_collection(t, q, &o))
                .map(|o| (StatusCode::OK, Arc::new(o))),
        };
        warnings.append(&mut state.warnings);
        let served = state.served_bytes.take().unwrap_or_default();
        let mut response = match result {
            Ok((code, obj)) => json_response(code, &obj),
            Err(status) => status_response(&status),
        };
        for warning in warnings {
            // `299 - "text"`, as the apiserver's warning recorder writes it.
            if let Ok(value) = HeaderValue::from_str(&format!("299 - {}", go_quote(&warning))) {
                response.headers_mut().append(WARNING, value);
            }
        }
        (response, served)
    }
}

/// The bytes a write is expected to handle, for its slot of the cost model (settled once it has
/// run): the request body; the stored object before; after it, as large as the body for a create
/// or update, as before for a patch or delete (a patch of a missing object, as the body); and the
/// larger of the two once per open watch of the resource.
fn expected_bytes(state: &State, t: &Target, verb: Verb, name: Option<&str>, request: u64) -> u64 {
    let before = name.map_or(0, |name| state.stored_len(t, name));
    let after = match verb {
        Verb::Create | Verb::Update => request,
        Verb::Patch if before == 0 => request,
        Verb::Patch => before,
        _ => 0,
    };
    let watch = before.max(after).saturating_mul(state.watches_of(t));
    request
        .saturating_add(before)
        .saturating_add(after)
        .saturating_add(watch)
}

/// How a request wants to be answered.
struct Options<'a> {
    /// The request body's content type (the patch type of a PATCH).
    content_type: &'a str,
    /// How reads render objects.
    render: &'a Render,
    /// The User-Agent, the default field manager of a write.
    user_agent: Option<&'a str>,
}

/// `fieldValidation`: what to do about fields the schema does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldValidation {
    Ignore,
    /// A `Warning` header per unknown field (the default).
    Warn,
    Strict,
}

impl FieldValidation {
    fn from_query(value: Option<&str>) -> Result<Self, Status> {
        match value {
            None | Some("Warn") => Ok(Self::Warn),
            Some("Ignore") => Ok(Self::Ignore),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => Err(Status::bad_request(format!(
                "fieldValidation: Unsupported value: {}: supported values: \"Ignore\", \"Strict\", \"Warn\"",
                go_quote(other)
            ))),
        }
    }
}

/// The patch type of a PATCH, with the checks of `PatchOptions` validation.
fn patch_type(t: &Target, content_type: &str, q: &Query) -> Result<PatchType, Status> {
    let kind = PatchType::from_content_type(content_type)
        .filter(|k| !(t.kind.custom && *k == PatchType::Strategic))
        .ok_or_else(|| PatchType::unsupported(t.kind.custom))?;
    let options_error =
        |e: FieldError| Err(Status::invalid("meta.k8s.io", "PatchOptions", "", &[e]));
    if kind == PatchType::Apply && q.get("fieldManager").is_none() {
        return options_error(FieldError::required(
            "fieldManager",
            "is required for apply patch",
        ));
    }
    if kind != PatchType::Apply && q.get("force").is_some() {
        return options_error(FieldError::forbidden(
            "force",
            "may not be specified for non-apply patch",
        ));
    }
    Ok(kind)
}

/// Whether a request body's content type is JSON (or unset).
fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    essence.is_empty() || essence == JSON || essence == "*/*"
}

/// The 415 for a body that is not JSON (protobuf, CBOR, YAML are not decoded).
fn unsupported_body() -> Status {
    Status::unsupported_media_type(
        "the body of the request was in an unknown format - accepted media types include: application/json".into(),
    )
}

fn delete_options(body: &Bytes) -> Result<Value, Status> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(json!({}))
    } else {
        parse_json(body)
    }
}
