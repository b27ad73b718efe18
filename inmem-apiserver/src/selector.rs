//! Label and field selectors of list and watch requests.
//!
//! Labels: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`.
//! Fields: `metadata.name`, `metadata.namespace` (namespaced kinds only, as
//! the field label conversions of cluster-scoped kinds refuse it) and the
//! field labels of the kind (e.g. `involvedObject.name` for events,
//! `spec.unschedulable` for nodes) with `=`, `==`, `!=`; a field the object
//! lacks has the value the apiserver's field set gives it: `""`, or the
//! printed zero value of a typed field (`false`).

use serde_json::Value;

use crate::status::Status;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

impl Requirement {
    /// Whether a requirement holds for a lookup of keys to values.
    fn holds(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        match self {
            Self::Equals(k, v) => get(k).as_deref() == Some(v),
            Self::NotEquals(k, v) => get(k).as_deref() != Some(v),
            Self::In(k, vs) => get(k).is_some_and(|x| vs.contains(&x)),
            Self::NotIn(k, vs) => get(k).is_none_or(|x| !vs.contains(&x)),
            Self::Exists(k) => get(k).is_some(),
            Self::NotExists(k) => get(k).is_none(),
        }
    }
}

/// A field that a kind's field selectors may name besides `metadata.name` (and
/// `metadata.namespace`): the JSON pointer it reads in the stored object, and
/// its value when the object lacks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FieldLabel {
    pub label: &'static str,
    pub pointer: &'static str,
    /// The value of a missing field: `""`, or a typed field's printed zero
    /// value (`fmt.Sprint(node.Spec.Unschedulable)` is `false`).
    pub absent: &'static str,
}

impl FieldLabel {
    pub const fn new(label: &'static str, pointer: &'static str) -> Self {
        Self {
            label,
            pointer,
            absent: "",
        }
    }

    /// The same label, whose missing field reads `absent`.
    pub const fn or(self, absent: &'static str) -> Self {
        Self { absent, ..self }
    }
}

const NAME: FieldLabel = FieldLabel::new("metadata.name", "/metadata/name");
const NAMESPACE: FieldLabel = FieldLabel::new("metadata.namespace", "/metadata/namespace");

/// A parsed `labelSelector` and `fieldSelector`; the empty one matches all.
/// Field requirements are kept keyed by the JSON pointer their label reads,
/// with the value of a missing field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Selector {
    labels: Vec<Requirement>,
    fields: Vec<(Requirement, &'static str)>,
}

impl Selector {
    /// A selector on a namespaced kind without field labels of its own.
    #[cfg(test)]
    pub fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Self, Status> {
        Self::parse_for(labels, fields, &[], true)
    }

    /// A selector on a kind whose field selectors may also use `field_labels`,
    /// and `metadata.namespace` when it is `namespaced`.
    pub fn parse_for(
        labels: Option<&str>,
        fields: Option<&str>,
        field_labels: &[FieldLabel],
        namespaced: bool,
    ) -> Result<Self, Status> {
        let labels = split_top_level(labels.unwrap_or_default())
            .map(parse_label)
            .collect::<Result<_, _>>()?;
        let meta: &[FieldLabel] = if namespaced {
            &[NAME, NAMESPACE]
        } else {
            &[NAME]
        };
        let known: Vec<FieldLabel> = meta.iter().chain(field_labels).copied().collect();
        let fields = split_top_level(fields.unwrap_or_default())
            .map(|req| parse_field(req, &known))
            .collect::<Result<_, _>>()?;
        Ok(Self { labels, fields })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let meta = &obj["metadata"];
        let label = |k: &str| meta["labels"][k].as_str().map(str::to_owned);
        let field = |pointer: &str, absent: &str| match obj.pointer(pointer) {
            None | Some(Value::Null) => absent.to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        self.labels.iter().all(|r| r.holds(label))
            && self
                .fields
                .iter()
                .all(|(r, absent)| r.holds(|pointer| Some(field(pointer, absent))))
    }
}

/// Splits on the commas that are not inside `( )`, dropping empty parts.
fn split_top_level(s: &str) -> impl Iterator<Item = &str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth = depth.saturating_add(1),
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i.saturating_add(1);
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts.into_iter().map(str::trim).filter(|p| !p.is_empty())
}

fn unparsable(req: &str) -> Status {
    Status::bad_request(format!("unable to parse requirement: {req:?}"))
}

fn parse_label(req: &str) -> Result<Requirement, Status> {
    if let Some(key) = req.strip_prefix('!') {
        return Ok(Requirement::NotExists(key.trim().to_owned()));
    }
    if let Some((key, rest)) = req.split_once(char::is_whitespace) {
        let rest = rest.trim_start();
        let (set_op, set): (fn(String, Vec<String>) -> Requirement, _) =
            if let Some(s) = rest.strip_prefix("notin") {
                (Requirement::NotIn, s)
            } else if let Some(s) = rest.strip_prefix("in") {
                (Requirement::In, s)
            } else {
                return parse_comparison(req).ok_or_else(|| unparsable(req));
            };
        let values = set
            .trim()
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(|| unparsable(req))?
            .split(',')
            .map(|v| v.trim().to_owned())
            .collect();
        return Ok(set_op(key.to_owned(), values));
    }
    Ok(parse_comparison(req).unwrap_or_else(|| Requirement::Exists(req.to_owned())))
}

/// `k!=v`, `k==v` or `k=v`.
fn parse_comparison(req: &str) -> Option<Requirement> {
    let pair = |(k, v): (&str, &str)| (k.trim().to_owned(), v.trim().to_owned());
    if let Some((k, v)) = req.split_once("!=").map(pair) {
        return Some(Requirement::NotEquals(k, v));
    }
    req.split_once("==")
        .or_else(|| req.split_once('='))
        .map(pair)
        .map(|(k, v)| Requirement::Equals(k, v))
}

fn parse_field(
    req: &str,
    field_labels: &[FieldLabel],
) -> Result<(Requirement, &'static str), Status> {
    let parsed = parse_comparison(req).ok_or_else(|| {
        Status::bad_request(format!(
            "invalid selector: '{req}'; can't understand '{req}'"
        ))
    })?;
    let label_of = |key: &str| {
        field_labels
            .iter()
            .find(|l| l.label == key)
            .ok_or_else(|| Status::bad_request(format!("field label not supported: {key}")))
    };
    match parsed {
        Requirement::Equals(key, value) => {
            let l = label_of(&key)?;
            Ok((Requirement::Equals(l.pointer.into(), value), l.absent))
        }
        Requirement::NotEquals(key, value) => {
            let l = label_of(&key)?;
            Ok((Requirement::NotEquals(l.pointer.into(), value), l.absent))
        }
        _ => Err(unparsable(req)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;

    use super::*;

    fn obj() -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": {"app": "web", "tier": "front"}}})
    }

    fn matches(labels: &str, fields: &str) -> bool {
        Selector::parse(Some(labels), Some(fields))
            .unwrap()
            .matches(&obj())
    }

    #[test]
    fn label_requirements_combine_with_and() {
        assert!(matches("app=web,tier", ""));
        assert!(matches("app==web,!missing,tier in (front, back)", ""));
        assert!(!matches("app!=web", ""));
        assert!(!matches("tier notin (front)", ""));
        assert!(matches("missing notin (x)", ""));
    }

    #[test]
    fn field_selectors_know_the_field_labels_of_the_kind() {
        let event = json!({"metadata": {"name": "e"}, "involvedObject": {"name": "acme", "kind": "Tenant"}});
        let labels = [
            FieldLabel::new("involvedObject.name", "/involvedObject/name"),
            FieldLabel::new("involvedObject.kind", "/involvedObject/kind"),
            FieldLabel::new("involvedObject.uid", "/involvedObject/uid"),
        ];
        let select = |fields: &str| Selector::parse_for(None, Some(fields), &labels, true).unwrap();
        assert!(select("involvedObject.name=acme,involvedObject.kind=Tenant").matches(&event));
        assert!(!select("involvedObject.name=other").matches(&event));
        // A field the object lacks is the empty string.
        assert!(select("involvedObject.uid=").matches(&event));
        assert!(!select("involvedObject.uid=x").matches(&event));
    }

    #[test]
    fn field_selectors_know_name_and_namespace_only() {
        assert!(matches("", "metadata.name=a,metadata.namespace==ns"));
        assert!(!matches("", "metadata.name!=a"));
        let err = Selector::parse(None, Some("spec.x=1")).unwrap_err();
        assert_eq!(err.message, "field label not supported: spec.x");
    }

    #[test]
    fn a_cluster_scoped_kind_has_no_namespace_field_and_typed_fields_read_their_zero_value() {
        let unschedulable =
            [FieldLabel::new("spec.unschedulable", "/spec/unschedulable").or("false")];
        let select = |fields: &str| Selector::parse_for(None, Some(fields), &unschedulable, false);
        let err = select("metadata.namespace=ns").unwrap_err();
        assert_eq!(err.message, "field label not supported: metadata.namespace");
        let node = json!({"metadata": {"name": "n1"}, "spec": {}});
        let cordoned = json!({"metadata": {"name": "n2"}, "spec": {"unschedulable": true}});
        let schedulable = select("spec.unschedulable=false").unwrap();
        assert!(schedulable.matches(&node), "a missing bool is false");
        assert!(!schedulable.matches(&cordoned));
        assert!(
            select("spec.unschedulable!=false")
                .unwrap()
                .matches(&cordoned)
        );
    }
}
