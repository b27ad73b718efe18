//! Reading and writing `metadata` of JSON objects, and the ObjectMeta rules
//! that hold for every kind.

use serde_json::{Map, Value};

use crate::status::FieldError;

/// The ObjectMeta fields; any other key in `metadata` is dropped on decode.
/// `managedFields` is deliberately not among them: it is not tracked.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
];

pub(crate) fn str_field<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or_default()
}

pub(crate) fn name(obj: &Value) -> &str {
    str_field(obj, "name")
}

pub(crate) fn namespace(obj: &Value) -> &str {
    str_field(obj, "namespace")
}

pub(crate) fn resource_version(obj: &Value) -> &str {
    str_field(obj, "resourceVersion")
}

pub(crate) fn uid(obj: &Value) -> &str {
    str_field(obj, "uid")
}

pub(crate) fn is_terminating(obj: &Value) -> bool {
    obj["metadata"].get("deletionTimestamp").is_some()
}

pub(crate) fn finalizers(obj: &Value) -> Vec<&str> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

pub(crate) fn generation(obj: &Value) -> i64 {
    obj["metadata"]["generation"].as_i64().unwrap_or(0)
}

/// Runs `f` on the `metadata` map, creating it if missing; a no-op on a
/// non-object (which the handlers never store).
pub(crate) fn with_meta<R: Default>(
    obj: &mut Value,
    f: impl FnOnce(&mut Map<String, Value>) -> R,
) -> R {
    let Some(root) = obj.as_object_mut() else {
        return R::default();
    };
    let md = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !md.is_object() {
        *md = Value::Object(Map::new());
    }
    md.as_object_mut().map(f).unwrap_or_default()
}

pub(crate) fn set(obj: &mut Value, field: &str, value: impl Into<Value>) {
    with_meta(obj, |m| {
        m.insert(field.into(), value.into());
    });
}

pub(crate) fn remove(obj: &mut Value, field: &str) {
    with_meta(obj, |m| {
        m.remove(field);
    });
}

/// Copies `field` of `from`'s metadata onto `to` (removing it when absent).
pub(crate) fn copy(from: &Value, to: &mut Value, field: &str) {
    match from["metadata"].get(field) {
        Some(v) => set(to, field, v.clone()),
        None => remove(to, field),
    }
}

/// Drops what ObjectMeta decoding would not keep: unknown keys, and the
/// null, empty-string, empty-list and empty-map values Go omits.
pub(crate) fn sanitize(obj: &mut Value) {
    with_meta(obj, |m| {
        m.retain(|key, value| {
            let empty = match value {
                Value::Null => true,
                Value::String(s) => s.is_empty(),
                Value::Array(a) => a.is_empty(),
                Value::Object(o) => o.is_empty(),
                _ => false,
            };
            !empty && OBJECT_META_FIELDS.contains(&key.as_str())
        });
    });
}

/// The keys of `metadata` that ObjectMeta does not have (`managedFields`,
/// which is not tracked here, is known).
pub(crate) fn unknown_keys(obj: &Value) -> Vec<String> {
    obj["metadata"]
        .as_object()
        .map(|m| {
            m.keys()
                .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()) && *k != "managedFields")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Everything but `metadata`: what moves `metadata.generation`.
pub(crate) fn same_but_metadata(a: &Value, b: &Value) -> bool {
    fn fields(obj: &Value) -> impl Iterator<Item = (&String, &Value)> {
        obj.as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| *k != "metadata")
    }
    // Maps iterate in key order, so equal sequences are equal maps.
    fields(a).eq(fields(b))
}

const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MESSAGE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// The name rules of ObjectMeta validation: a DNS-1123 label for namespaces,
/// a DNS-1123 subdomain for everything else.
pub(crate) fn validate_name(name: &str, dns_label: bool) -> Option<FieldError> {
    let (ok, message) = if dns_label {
        (is_label(name), LABEL_MESSAGE)
    } else {
        (
            name.len() <= 253 && name.split('.').all(is_label),
            SUBDOMAIN_MESSAGE,
        )
    };
    (!ok).then(|| FieldError::invalid("metadata.name", name.into(), message))
}

/// A random UUID (version 4), for `metadata.uid`.
pub(crate) fn new_uid() -> String {
    let hex: String = (0..32)
        .map(|i| match i {
            12 => '4',
            16 => ['8', '9', 'a', 'b'][fastrand::usize(..4)],
            _ => char::from_digit(fastrand::u32(..16), 16).unwrap_or('0'),
        })
        .collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Now, in RFC 3339 with seconds, as Kubernetes timestamps are.
pub(crate) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `names.SimpleNameGenerator`: the prefix (cut to 58 bytes) and 5 random
/// characters from an alphabet without vowels.
pub(crate) fn generate_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut cut = prefix.len().min(58);
    while !prefix.is_char_boundary(cut) {
        cut = cut.saturating_sub(1);
    }
    let suffix: String = (0..5)
        .map(|_| char::from(ALPHABET[fastrand::usize(..ALPHABET.len())]))
        .collect();
    format!("{}{suffix}", &prefix[..cut])
}
