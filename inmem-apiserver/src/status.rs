//! Failures as the apiserver reports them: a `meta/v1` `Status` body whose
//! `code` is also the HTTP status, built by the same constructors (and with the
//! same messages) as `k8s.io/apimachinery/pkg/api/errors`.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A `meta/v1` `Status`: the body of every failed request, and of a delete
/// that removed its object at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
#[error("{message} ({code} {reason})")]
pub struct Status {
    /// `Success` or `Failure`.
    pub status: String,
    /// The human-readable description, e.g. `tenants.example.dev "a" not found`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The machine-readable reason, e.g. `NotFound`, `Conflict`, `Invalid`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// What the status is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Box<StatusDetails>>,
    /// The HTTP status code; 0 (omitted) on the success of a delete.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub code: u16,
}

/// `meta/v1` `StatusDetails`. `kind` holds the resource (plural) for most
/// errors, as the apiserver does, and the kind for `Invalid`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct StatusDetails {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub retry_after_seconds: u32,
}

/// `meta/v1` `StatusCause`: one field error of an `Invalid` status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct StatusCause {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
}

fn is_zero(n: &u16) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// A group and resource, printed as the apiserver does:
/// `leases.coordination.k8s.io`, and just `namespaces` for the core group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupResource<'a> {
    pub group: &'a str,
    pub resource: &'a str,
}

impl std::fmt::Display for GroupResource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            f.write_str(self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

impl Status {
    fn failure(code: u16, reason: &str, message: String, details: Option<StatusDetails>) -> Self {
        Self {
            status: "Failure".into(),
            message,
            reason: reason.into(),
            details: details.map(Box::new),
            code,
        }
    }

    fn about(gr: GroupResource<'_>, name: &str) -> Option<StatusDetails> {
        Some(StatusDetails {
            name: name.into(),
            group: gr.group.into(),
            kind: gr.resource.into(),
            ..StatusDetails::default()
        })
    }

    /// The body as sent on the wire, with `kind`, `apiVersion` and `metadata`.
    pub fn to_json(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or_else(|_| json!({}));
        if let Some(map) = v.as_object_mut() {
            map.insert("kind".into(), "Status".into());
            map.insert("apiVersion".into(), "v1".into());
            map.insert("metadata".into(), json!({}));
        }
        v
    }

    /// The HTTP status code to answer with.
    pub fn http_code(&self) -> http::StatusCode {
        http::StatusCode::from_u16(self.code).unwrap_or(http::StatusCode::OK)
    }

    pub(crate) fn not_found(gr: GroupResource<'_>, name: &str) -> Self {
        Self::failure(
            404,
            "NotFound",
            format!("{gr} {name:?} not found"),
            Self::about(gr, name),
        )
    }

    pub(crate) fn already_exists(gr: GroupResource<'_>, name: &str) -> Self {
        Self::failure(
            409,
            "AlreadyExists",
            format!("{gr} {name:?} already exists"),
            Self::about(gr, name),
        )
    }

    pub(crate) fn conflict(gr: GroupResource<'_>, name: &str, why: &str) -> Self {
        Self::failure(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {gr} {name:?}: {why}"),
            Self::about(gr, name),
        )
    }

    /// The optimistic-lock failure of an update with a stale resourceVersion.
    pub(crate) fn stale(gr: GroupResource<'_>, name: &str) -> Self {
        Self::conflict(
            gr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// `NewInvalid`: `{qualified kind} "{name}" is invalid: {errors}`.
    pub(crate) fn invalid(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Self {
        let qualified = GroupResource {
            group,
            resource: kind,
        };
        let mut messages: Vec<String> = Vec::new();
        for e in errors {
            let m = e.to_string();
            if !messages.contains(&m) {
                messages.push(m);
            }
        }
        let message = match messages.as_slice() {
            [] => format!("{qualified} {name:?} is invalid"),
            [one] => format!("{qualified} {name:?} is invalid: {one}"),
            many => format!("{qualified} {name:?} is invalid: [{}]", many.join(", ")),
        };
        let causes = errors
            .iter()
            .map(|e| StatusCause {
                reason: e.kind.reason().into(),
                message: e.body(),
                field: e.field.clone(),
            })
            .collect();
        Self::failure(
            422,
            "Invalid",
            message,
            Some(StatusDetails {
                name: name.into(),
                group: group.into(),
                kind: kind.into(),
                causes,
                ..StatusDetails::default()
            }),
        )
    }

    /// A request this server refuses to answer at all (e.g. a foreign `Host`).
    pub(crate) fn forbidden(message: String) -> Self {
        Self::failure(403, "Forbidden", message, Some(StatusDetails::default()))
    }

    /// `NewMethodNotSupported`: a verb the resource (or subresource) does not serve.
    pub(crate) fn method_not_supported(gr: GroupResource<'_>, verb: &str) -> Self {
        Self::failure(
            405,
            "MethodNotAllowed",
            format!(
                "{verb} is not supported on resources of kind {:?}",
                gr.to_string()
            ),
            Some(StatusDetails {
                group: gr.group.into(),
                kind: gr.resource.into(),
                ..StatusDetails::default()
            }),
        )
    }

    /// What `ErrorToAPIStatus` makes of an error that is not a Status (a registry's plain Go
    /// error): 500, no reason, no details, the error's text as the message.
    pub(crate) fn unknown(message: String) -> Self {
        Self::failure(500, "", message, None)
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::failure(400, "BadRequest", message.into(), None)
    }

    /// `NewResourceExpired`: 410 with reason `Expired`.
    pub(crate) fn expired(message: String) -> Self {
        Self::failure(410, "Expired", message, None)
    }

    /// `NewTimeoutError`, e.g. for a list at a resourceVersion not reached yet.
    pub(crate) fn timeout(message: String) -> Self {
        Self::failure(
            504,
            "Timeout",
            format!("Timeout: {message}"),
            Some(StatusDetails {
                retry_after_seconds: 1,
                ..StatusDetails::default()
            }),
        )
    }

    pub(crate) fn internal(cause: &str) -> Self {
        Self::failure(
            500,
            "InternalError",
            format!("Internal error occurred: {cause}"),
            Some(StatusDetails {
                causes: vec![StatusCause {
                    message: cause.into(),
                    ..StatusCause::default()
                }],
                ..StatusDetails::default()
            }),
        )
    }

    pub(crate) fn too_many_requests(retry_after_seconds: u32) -> Self {
        Self::failure(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later".into(),
            Some(StatusDetails {
                retry_after_seconds,
                ..StatusDetails::default()
            }),
        )
    }

    /// `NewNotAcceptableError`: no media type of `Accept` is served.
    pub(crate) fn not_acceptable() -> Self {
        Self::failure(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io, application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io".into(),
            Some(StatusDetails::default()),
        )
    }

    pub(crate) fn unsupported_media_type(message: String) -> Self {
        Self::failure(
            415,
            "UnsupportedMediaType",
            message,
            Some(StatusDetails::default()),
        )
    }

    /// `NewGenericServerResponse(code, "", GroupResource{}, "", msg, 0, false)`:
    /// the canned message for the code, and empty details. This is, e.g., what a
    /// failed JSON-patch `test` operation gets (422, no mention of the path).
    pub(crate) fn generic(code: u16) -> Self {
        let (reason, message) = match code {
            400 => (
                "BadRequest",
                "the server rejected our request for an unknown reason",
            ),
            404 => (
                "NotFound",
                "the server could not find the requested resource",
            ),
            405 => (
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            ),
            409 => ("Conflict", "the server reported a conflict"),
            422 => (
                "Invalid",
                "the server rejected our request due to an error in our request",
            ),
            429 => (
                "TooManyRequests",
                "the server has received too many requests and has asked us to try again later",
            ),
            503 => (
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
            c if c >= 500 => (
                "InternalError",
                "an error on the server (\"\") has prevented the request from succeeding",
            ),
            _ => (
                "",
                "the server responded with the status code but did not return more information",
            ),
        };
        Self::failure(code, reason, message.into(), Some(StatusDetails::default()))
    }

    /// What a delete answers when the object is gone at once (the store's
    /// `finalizeDelete` without `ReturnDeletedObject`).
    pub(crate) fn deleted(gr: GroupResource<'_>, name: &str, uid: &str) -> Self {
        Self {
            status: "Success".into(),
            message: String::new(),
            reason: String::new(),
            details: Some(Box::new(StatusDetails {
                uid: uid.into(),
                ..Self::about(gr, name).unwrap_or_default()
            })),
            code: 0,
        }
    }
}

/// The type of a field error (`field.ErrorType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldErrorKind {
    Required,
    Invalid,
    TypeInvalid,
    NotSupported,
    Forbidden,
    Duplicate,
    TooLong,
    TooMany,
}

impl FieldErrorKind {
    fn reason(self) -> &'static str {
        match self {
            Self::Required => "FieldValueRequired",
            Self::Invalid => "FieldValueInvalid",
            Self::TypeInvalid => "FieldValueTypeInvalid",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Forbidden => "FieldValueForbidden",
            Self::Duplicate => "FieldValueDuplicate",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Required => "Required value",
            Self::Invalid | Self::TypeInvalid => "Invalid value",
            Self::NotSupported => "Unsupported value",
            Self::Forbidden => "Forbidden",
            Self::Duplicate => "Duplicate value",
            Self::TooLong => "Too long",
            Self::TooMany => "Too many",
        }
    }
}

/// The offending value of a field error, printed as Go's `ErrorBody` does.
#[derive(Debug, Clone)]
pub(crate) enum BadValue {
    /// Not printed.
    Omit,
    /// A JSON value: numbers and booleans bare, strings quoted.
    Json(Value),
    /// Already formatted, e.g. `0x0` (Go's `%#v` of a `uint64` zero).
    Raw(String),
}

/// One `field.Error`.
#[derive(Debug, Clone)]
pub(crate) struct FieldError {
    pub kind: FieldErrorKind,
    pub field: String,
    pub value: BadValue,
    pub detail: String,
}

impl FieldError {
    pub fn new(
        kind: FieldErrorKind,
        field: impl Into<String>,
        value: BadValue,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            field: field.into(),
            value,
            detail: detail.into(),
        }
    }

    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Required, field, BadValue::Omit, detail)
    }

    pub fn invalid(field: impl Into<String>, value: Value, detail: impl Into<String>) -> Self {
        Self::new(
            FieldErrorKind::Invalid,
            field,
            BadValue::Json(value),
            detail,
        )
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Forbidden, field, BadValue::Omit, detail)
    }

    /// `ErrorBody()`: the message without the field path.
    pub fn body(&self) -> String {
        let omit = matches!(
            self.kind,
            FieldErrorKind::Required | FieldErrorKind::Forbidden | FieldErrorKind::TooLong
        );
        let mut s = match (&self.value, omit) {
            (BadValue::Omit, _) | (_, true) => self.kind.label().to_owned(),
            (BadValue::Raw(raw), false) => format!("{}: {raw}", self.kind.label()),
            (BadValue::Json(v), false) => format!("{}: {}", self.kind.label(), go_value(v)),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// A JSON value as Go prints the decoded value in a field error: `%v` for
/// numbers and booleans, `%q` for strings, `null` for nil (and JSON for the
/// rest, where Go would print a `map[string]interface {}` literal).
pub(crate) fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Null => "null".into(),
        // An integer that fits int64 is decoded as one; any other number is
        // a float64.
        Value::Number(n) => n.as_i64().map_or_else(
            || go_float(n.as_f64().unwrap_or(f64::NAN)),
            |i| i.to_string(),
        ),
        other => go_json(other),
    }
}

/// Go's `json.Marshal`: HTML-safe (`<`, `>` and `&` escaped).
pub(crate) fn go_json(v: &Value) -> String {
    v.to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// Go's `%v` of a float64: the shortest representation, with an exponent
/// (`1e+06`, `9.007199254740991e+15`, `1e-05`) below 1e-4 and from 1e6:
/// `strconv.FormatFloat(f, 'g', -1, 64)`.
pub(crate) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or_default();
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        f.to_string()
    }
}

/// Go's `%q` for the strings that occur here (JSON escaping agrees on them).
pub(crate) fn go_quote(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_gos_percent_v() {
        let printed: Vec<String> = [
            1000.0,
            100_000.0,
            1e6,
            1_234_567.0,
            9_007_199_254_740_991.0,
            0.001,
            0.0001,
            0.00001,
            1.5,
            -2.5e-7,
            0.0,
        ]
        .into_iter()
        .map(go_float)
        .collect();
        assert_eq!(
            printed,
            [
                "1000",
                "100000",
                "1e+06",
                "1.234567e+06",
                "9.007199254740991e+15",
                "0.001",
                "0.0001",
                "1e-05",
                "1.5",
                "-2.5e-07",
                "0"
            ]
        );
    }
}
