//! `x-kubernetes-validations`: the CEL rules of a custom resource's schema,
//! evaluated with cel-rust as apiextensions-apiserver's `cel.Validator` does
//! (`pkg/apiserver/schema/cel/validation.go`).
//!
//! - `self` is the value at the schema node carrying the rule, typed by the
//!   schema: objects with properties are maps of their properties (a field
//!   that is absent or null is absent, so `has(self.x)` works), maps
//!   (`additionalProperties`) maps, `integer` an int, `number` a double (an
//!   integer literal too), `date-time` and `date` strings timestamps, other
//!   strings strings, arrays lists. At the root (and in embedded resources)
//!   `apiVersion`, `kind` and `metadata.name`/`generateName` are visible, and
//!   no other `metadata`.
//! - A rule that mentions `oldSelf` is a transition rule: evaluated only on an
//!   update, and only where an old value correlates (same property of an
//!   object, same key of a map, same keys of a `x-kubernetes-list-type: map`
//!   item); with `optionalOldSelf: true` it is evaluated on create too, with
//!   `oldSelf` an optional (`oldSelf.hasValue()`, `oldSelf.orValue(x)`).
//! - A rule that is false fails with `message`, or what `messageExpression`
//!   evaluates to, or `failed rule: {rule}`; on the node's path (and
//!   `fieldPath` appended); as `reason` says (`Invalid value: "{type}"` by
//!   default, where the value shown is the type of the node in the schema).
//! - On an update, a failing rule that does not use `oldSelf` on a value that
//!   did not change is a warning, not an error (CRD validation ratcheting).
//! - A rule that does not compile, or fails to evaluate, is reported on the
//!   node with the apiserver's wording (`rule compile error: ...`,
//!   `no such key: x evaluating rule: ...`).
//!
//! Not as the apiserver: there is no type checking (cel-go rejects a rule
//! whose types do not check when the CRD is written; here such a rule fails,
//! or not, when evaluated), no cost budget, and the libraries are cel-rust's
//! standard library with its `strings` and `lists` extensions: the Kubernetes
//! ones (`quantity`, `url`, `ip`, `cidr`, `semver`, `sets`, `isSorted`, ...)
//! are missing, and a rule calling one fails as an undeclared reference. A
//! float in an `integer` field (`3.0`, which the schema accepts) is a double
//! to a rule here, where the apiserver's rule fails on it. A rule that is not
//! a boolean expression is refused when it is evaluated, not when the CRD is
//! written.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use cel::objects::{Key, Map as CelMap, OptionalValue};
use cel::{Context, Env, ExecutionError, Program, Value as Cel};
use serde_json::Value;

use crate::status::{BadValue, FieldError, FieldErrorKind, go_json};

/// The errors of a validation, and the failures that ratcheting turned
/// into warnings (as `field: message`).
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub errors: Vec<FieldError>,
    pub warnings: Vec<String>,
}

/// The longest `messageExpression` result used
/// (`MaxEvaluatedMessageExpressionSizeBytes`).
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // Both only declare functions that are not declared yet.
        let _ = env.add_extension(cel::extensions::strings);
        let _ = env.add_extension(cel::extensions::lists);
        Arc::new(env)
    })
}

/// A compiled rule, and whether it is a transition rule (mentions `oldSelf`).
struct Rule {
    program: Program,
    transition: bool,
}

type Compiled = Result<Arc<Rule>, String>;

/// Compiles `source`, once: programs are cached by their source. The error
/// is cel-go's wording (`compilation failed: ERROR: <input>:1:8: Syntax
/// error: ...`), which the ANTLR grammar both share makes the same.
fn compile(source: &str) -> Compiled {
    static CACHE: OnceLock<Mutex<HashMap<String, Compiled>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let mut cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(compiled) = cache.get(source) {
        return compiled.clone();
    }
    let compiled = env()
        .compile(source)
        .map(|program| {
            Arc::new(Rule {
                transition: program.references().has_variable("oldSelf"),
                program,
            })
        })
        // cel-go indents the source lines under an error by one space more.
        .map_err(|e| {
            format!(
                "compilation failed: {}",
                e.to_string().replace("\n| ", "\n | ")
            )
        });
    // Rules come from CRDs: few. Bound the cache anyway.
    if cache.len() >= 4096 {
        cache.clear();
    }
    cache.insert(source.to_owned(), compiled.clone());
    compiled
}

/// A `field.Path`: `None` is the nil path of the object's root, printed
/// `<nil>`.
#[derive(Debug, Clone)]
struct Path(Option<String>);

impl Path {
    fn child(&self, name: &str) -> Self {
        Self(Some(match &self.0 {
            None => name.to_owned(),
            Some(p) => format!("{p}.{name}"),
        }))
    }

    fn index(&self, subscript: &str) -> Self {
        Self(Some(format!(
            "{}[{subscript}]",
            self.0.as_deref().unwrap_or_default()
        )))
    }

    fn render(&self) -> String {
        self.0
            .clone()
            .unwrap_or_else(|| crate::schema::NIL_PATH.to_owned())
    }
}

/// What ratcheting knows of a node: the (new, old) pair where the node
/// correlates with an old value, else that of its nearest ancestor that does.
#[derive(Debug, Clone, Copy, Default)]
struct Ratchet<'a> {
    current: Option<(&'a Value, &'a Value)>,
    parent: Option<(&'a Value, &'a Value)>,
}

impl<'a> Ratchet<'a> {
    /// Whether an error here is only a warning: the node (or, if it does not
    /// correlate, its nearest correlated ancestor) is unchanged.
    fn unchanged(&self) -> bool {
        self.current
            .or(self.parent)
            .is_some_and(|(new, old)| new == old)
    }

    fn descend(self, next: Option<(&'a Value, &'a Value)>) -> Self {
        match self.current {
            None => self,
            Some(current) => Self {
                current: next,
                parent: Some(current),
            },
        }
    }
}

/// The old value of property or map key `key`.
fn old_child<'a>(schema: &Value, old: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    let known = schema.get("properties").and_then(|p| p.get(key)).is_some()
        || schema
            .get("additionalProperties")
            .is_some_and(Value::is_object);
    old.filter(|_| known).and_then(|o| o.get(key))
}

/// Whether `schema` has rules (`hasXValidations`): without, the apiserver has
/// no CEL validator for the kind at all.
pub(crate) fn has_rules(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty())
        || schema.get("items").is_some_and(has_rules)
        || schema
            .get("additionalProperties")
            .is_some_and(|a| a.is_object() && has_rules(a))
        || schema
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| p.values().any(has_rules))
}

/// The parts of a schema that lead to rules: its `x-kubernetes-validations`, and the
/// `properties`, `items`, `additionalProperties` and `allOf` that have rules below them. A
/// validation walks this, so a write does not visit the values no rule looks at.
#[derive(Debug, Clone)]
pub(crate) struct RuleTree(Value);

impl RuleTree {
    /// None when `schema` has no rules anywhere.
    pub(crate) fn of(schema: &Value) -> Option<Self> {
        rules_below(schema).map(Self)
    }

    /// Evaluates the rules of `schema` (the schema this tree was made of) on `obj`, the whole
    /// object (`old` on an update).
    pub(crate) fn validate(&self, schema: &Value, obj: &Value, old: Option<&Value>) -> Outcome {
        let mut out = Outcome::default();
        let ratchet = Ratchet {
            current: old.map(|o| (obj, o)),
            parent: None,
        };
        walk(
            &Node {
                rules: &self.0,
                schema,
                root: true,
            },
            obj,
            old,
            &Path(None),
            ratchet,
            &mut out,
        );
        out
    }
}

fn rules_below(schema: &Value) -> Option<Value> {
    let mut tree = serde_json::Map::new();
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .filter(|r| r.as_array().is_some_and(|r| !r.is_empty()))
    {
        tree.insert("x-kubernetes-validations".into(), rules.clone());
    }
    for child in ["items", "additionalProperties"] {
        if let Some(below) = schema
            .get(child)
            .filter(|c| c.is_object())
            .and_then(rules_below)
        {
            tree.insert(child.into(), below);
        }
    }
    let properties: serde_json::Map<String, Value> = schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(name, property)| Some((name.clone(), rules_below(property)?)))
        .collect();
    if !properties.is_empty() {
        tree.insert("properties".into(), properties.into());
    }
    let all_of: Vec<Value> = schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(rules_below)
        .collect();
    if !all_of.is_empty() {
        tree.insert("allOf".into(), all_of.into());
    }
    (!tree.is_empty()).then_some(Value::Object(tree))
}

/// A schema node: the schema whose rules apply (`rules`, which differs from
/// `schema` in an `allOf`) and the structural one that types the values.
struct Node<'s> {
    rules: &'s Value,
    schema: &'s Value,
    /// The root of a resource: the object's root or an embedded resource.
    root: bool,
}

fn walk(
    node: &Node<'_>,
    value: &Value,
    old: Option<&Value>,
    path: &Path,
    ratchet: Ratchet<'_>,
    out: &mut Outcome,
) {
    if value.is_null() {
        // Rules validate values, not their absence: a rule on the parent does.
        return;
    }
    evaluate(node, value, old, path, ratchet, out);
    for all_of in node
        .rules
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let within = Node {
            rules: all_of,
            schema: node.schema,
            root: node.root,
        };
        // Not ratcheted: errors in allOf only follow the nearest ancestor.
        let ratchet = Ratchet {
            current: None,
            parent: ratchet.parent,
        };
        walk(&within, value, old, path, ratchet, out);
    }
    match value {
        Value::Array(items) => {
            let (Some(rules), Some(schema)) = (node.rules.get("items"), node.schema.get("items"))
            else {
                return;
            };
            let child = Node {
                rules,
                schema,
                root: flag(schema, "x-kubernetes-embedded-resource"),
            };
            for (i, item) in items.iter().enumerate() {
                let old = crate::schema::old_item(node.schema, old, item);
                let next = ratchet.descend(old.map(|o| (item, o)));
                walk(&child, item, old, &path.index(&i.to_string()), next, out);
            }
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let additional = (
                node.rules
                    .get("additionalProperties")
                    .filter(|a| a.is_object()),
                node.schema
                    .get("additionalProperties")
                    .filter(|a| a.is_object()),
            );
            if let (Some(rules), Some(schema)) = additional {
                let child = Node {
                    rules,
                    schema,
                    root: flag(schema, "x-kubernetes-embedded-resource"),
                };
                for key in &keys {
                    let item = &map[key.as_str()];
                    let old = old_child(node.schema, old, key);
                    let next = ratchet.descend(old.map(|o| (item, o)));
                    walk(&child, item, old, &path.index(key), next, out);
                }
            }
            let (Some(rules), Some(schemas)) = (
                node.rules.get("properties").and_then(Value::as_object),
                node.schema.get("properties").and_then(Value::as_object),
            ) else {
                return;
            };
            for key in keys {
                let (Some(rules), Some(schema)) = (rules.get(key), schemas.get(key)) else {
                    continue;
                };
                let child = Node {
                    rules,
                    schema,
                    root: flag(schema, "x-kubernetes-embedded-resource"),
                };
                let item = &map[key.as_str()];
                let old = old_child(node.schema, old, key);
                // apiVersion and kind are the same in both once converted.
                let next = if node.root
                    && ratchet.parent.is_none()
                    && matches!(key.as_str(), "apiVersion" | "kind")
                {
                    Ratchet::default()
                } else {
                    ratchet.descend(old.map(|o| (item, o)))
                };
                walk(&child, item, old, &path.child(key), next, out);
            }
        }
        _ => {}
    }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

/// `validateExpressions`: the rules of one node.
fn evaluate(
    node: &Node<'_>,
    value: &Value,
    old: Option<&Value>,
    path: &Path,
    ratchet: Ratchet<'_>,
    out: &mut Outcome,
) {
    let Some(rules) = node
        .rules
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .filter(|r| !r.is_empty())
    else {
        return;
    };
    // The value shown in the errors: the type of the node (`sts.Type`).
    let type_name = node
        .schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or(if node.root { "object" } else { "" });
    let invalid =
        |path: &Path, detail: String| FieldError::invalid(path.render(), type_name.into(), detail);
    let this = to_cel(value, node.schema, node.root);
    // Converted and bound once per node, when a rule needs them.
    let mut before: Option<Option<Cel>> = None;
    let mut before = || {
        before
            .get_or_insert_with(|| old.map(|o| to_cel(o, node.schema, node.root)))
            .clone()
    };
    let (mut plain, mut transition_context, mut optional_context) = (None, None, None);
    for rule in rules {
        let text = |key: &str| rule.get(key).and_then(Value::as_str).unwrap_or_default();
        let source = text("rule");
        if source.trim().is_empty() {
            continue;
        }
        let compiled = match compile(source) {
            Ok(p) => p,
            Err(e) => {
                out.errors
                    .push(invalid(path, format!("rule compile error: {e}")));
                continue;
            }
        };
        let optional = rule.get("optionalOldSelf") == Some(&Value::Bool(true));
        let transition = compiled.transition;
        if transition && old.is_none() && !optional {
            // Transition rules need an old value.
            continue;
        }
        let context: &Context<'_, '_> = match (transition, optional) {
            (false, _) => plain.get_or_insert_with(|| rule_context(&this, None)),
            (true, false) => {
                transition_context.get_or_insert_with(|| rule_context(&this, before()))
            }
            (true, true) => optional_context.get_or_insert_with(|| {
                let old_self = before().map_or_else(OptionalValue::none, OptionalValue::of);
                rule_context(&this, Some(Cel::Opaque(Arc::new(old_self))))
            }),
        };
        match compiled.program.execute(context) {
            Ok(Cel::Bool(true)) => continue,
            Ok(Cel::Bool(false)) => {}
            Ok(_) => {
                out.errors.push(invalid(
                    path,
                    "rule compile error: cel expression must evaluate to a bool".into(),
                ));
                continue;
            }
            Err(e) => {
                out.errors
                    .push(invalid(path, runtime_error(&e, &rule_error_string(rule))));
                continue;
            }
        }
        let shown = rule_error_string(rule);
        let at = match normalized_field_path(text("fieldPath"), node.schema) {
            Some(p) if !p.is_empty() => path.child(&p),
            _ => path.clone(),
        };
        let detail = Some(text("messageExpression"))
            .filter(|m| !m.is_empty())
            // Evaluated with oldSelf as is, optional or not.
            .and_then(|m| message_expression(m, &rule_context(&this, before())))
            .unwrap_or_else(|| {
                let message = text("message").trim();
                if message.is_empty() {
                    format!("failed rule: {shown}")
                } else {
                    message.to_owned()
                }
            });
        let field = at.render();
        let error = match text("reason") {
            "FieldValueForbidden" => FieldError::forbidden(field, detail),
            "FieldValueRequired" => FieldError::required(field, detail),
            "FieldValueDuplicate" => FieldError::new(
                FieldErrorKind::Duplicate,
                field,
                BadValue::Json(type_name.into()),
                "",
            ),
            _ => invalid(&at, detail),
        };
        if !transition && ratchet.unchanged() {
            out.warnings.push(error.to_string());
        } else {
            out.errors.push(error);
        }
    }
}

/// A context binding `self` (and `oldSelf`, when given).
fn rule_context(this: &Cel, old_self: Option<Cel>) -> Context<'static, 'static> {
    let mut context = Context::with_env(Arc::clone(env()));
    context.add_variable_from_value("self", this.clone());
    if let Some(old_self) = old_self {
        context.add_variable_from_value("oldSelf", old_self);
    }
    context
}

/// `ruleErrorString`: the message, or else the rule.
fn rule_error_string(rule: &Value) -> String {
    let text = |key: &str| {
        rule.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .trim()
    };
    if text("message").is_empty() {
        text("rule").to_owned()
    } else {
        text("message").to_owned()
    }
}

/// What `messageExpression` evaluates to, if it evaluates to a usable
/// string (else the apiserver logs why and uses the message).
fn message_expression(source: &str, context: &Context<'_, '_>) -> Option<String> {
    let program = compile(source).ok()?;
    let Ok(Cel::String(s)) = program.program.execute(context) else {
        return None;
    };
    let s = s.trim();
    (!s.is_empty() && s.len() <= MAX_MESSAGE_BYTES && !s.contains('\n')).then(|| s.to_owned())
}

/// The detail of a rule that failed to evaluate, in the apiserver's words
/// with cel-go's error texts.
fn runtime_error(e: &ExecutionError, rule: &str) -> String {
    let cause = match e {
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".into(),
        ExecutionError::Overflow(_, Cel::UInt(_), _) => "unsigned integer overflow".into(),
        ExecutionError::Overflow(..) => "integer overflow".into(),
        ExecutionError::IndexOutOfBounds(Cel::Int(i)) => format!("index out of bounds: {i}"),
        ExecutionError::NoSuchOverload(_)
        | ExecutionError::UnsupportedBinaryOperator(..)
        | ExecutionError::ValuesNotComparable(..)
        | ExecutionError::UnexpectedType { .. }
        | ExecutionError::UnsupportedTargetType { .. }
        | ExecutionError::NotSupportedAsMethod { .. } => {
            return format!(
                "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {rule}"
            );
        }
        ExecutionError::UndeclaredReference(name) => {
            // cel-go would have refused it when the CRD was written, unless it
            // is one of the Kubernetes libraries cel-rust does not have.
            return format!(
                "rule compile error: undeclared reference to '{name}' (in container ''): not a function or variable of the in-memory apiserver's CEL"
            );
        }
        other => other.to_string(),
    };
    format!("{cause} evaluating rule: {rule}")
}

/// `ValidFieldPath`: a rule's `fieldPath` (`.a.b`, `.a['b.c']`, `['k']` into
/// a map), as the path it adds (`a.b`, `a[k]`); None if it names no field
/// of `schema`.
pub(crate) fn normalized_field_path(field_path: &str, schema: &Value) -> Option<String> {
    if field_path.is_empty() {
        return None;
    }
    let tokens = field_path_tokens(field_path);
    let mut tokens = tokens.iter().map(String::as_str);
    let mut schema = schema;
    let mut path = Path(None);
    let step = |name: &str, schema: &mut &Value, path: &mut Path| -> Option<()> {
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            *schema = properties.get(name)?;
            *path = path.child(name);
        } else {
            *schema = schema
                .get("additionalProperties")
                .filter(|a| a.is_object())?;
            *path = path.index(name);
        }
        Some(())
    };
    while let Some(token) = tokens.next() {
        match token {
            "[" => {
                let quoted = tokens.next()?;
                let inner = quoted.strip_prefix('\'')?.strip_suffix('\'')?;
                step(&unescape_single_quoted(inner)?, &mut schema, &mut path)?;
                if tokens.next()? != "]" {
                    return None;
                }
            }
            "." => step(tokens.next()?, &mut schema, &mut path)?,
            _ => return None,
        }
    }
    path.0
}

/// The tokens of a field path: `.`, `[` and `]` alone, quoted strings
/// whole, and the text between.
fn field_path_tokens(path: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut previous = '\0';
    for c in path.chars() {
        if quoted {
            current.push(c);
            if c == '\'' && previous != '\\' {
                tokens.push(std::mem::take(&mut current));
                quoted = false;
            }
        } else if c == '\'' && current.is_empty() {
            current.push(c);
            quoted = true;
        } else if matches!(c, '.' | '[' | ']') {
            if !current.is_empty() {
                tokens.push(std::mem::take(&mut current));
            }
            tokens.push(c.to_string());
        } else {
            current.push(c);
        }
        previous = c;
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

fn unescape_single_quoted(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            'a' => '\u{7}',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\u{b}',
            '\'' => '\'',
            '\\' => '\\',
            _ => return None,
        });
    }
    Some(out)
}

fn key(s: &str) -> Key {
    Key::String(Arc::new(s.to_owned()))
}

fn cel_map(entries: impl IntoIterator<Item = (Key, Cel)>) -> Cel {
    Cel::Map(CelMap {
        map: Arc::new(entries.into_iter().collect()),
    })
}

/// A JSON value as CEL sees it at a node of `schema` (`UnstructuredToVal`).
fn to_cel(value: &Value, schema: &Value, resource_root: bool) -> Cel {
    if value.is_null() {
        return Cel::Null;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        return match value {
            Value::Number(n) => n.as_i64().map_or_else(|| untyped(value), Cel::Int),
            _ => untyped(value),
        };
    }
    let type_name = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match (type_name, value) {
        ("object", Value::Object(map)) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            if resource_root || properties.is_some() {
                // Absent and null fields alike are absent.
                let entries = map
                    .iter()
                    .filter(|(_, v)| !v.is_null())
                    .filter_map(|(k, v)| {
                        if resource_root {
                            match k.as_str() {
                                "apiVersion" | "kind" => return Some((key(k), untyped(v))),
                                "metadata" => {
                                    let meta = v
                                        .as_object()
                                        .into_iter()
                                        .flatten()
                                        .filter(|(k, v)| {
                                            matches!(k.as_str(), "name" | "generateName")
                                                && v.is_string()
                                        })
                                        .map(|(k, v)| (key(k), untyped(v)));
                                    return Some((key(k), cel_map(meta)));
                                }
                                _ => {}
                            }
                        }
                        let s = properties?.get(k)?;
                        Some((
                            key(k),
                            to_cel(v, s, flag(s, "x-kubernetes-embedded-resource")),
                        ))
                    });
                cel_map(entries.collect::<Vec<_>>())
            } else if let Some(s) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                let embedded = flag(s, "x-kubernetes-embedded-resource");
                cel_map(
                    map.iter()
                        .map(|(k, v)| (key(k), to_cel(v, s, embedded)))
                        .collect::<Vec<_>>(),
                )
            } else {
                cel_map(Vec::new())
            }
        }
        ("array", Value::Array(items)) => {
            let empty = Value::Null;
            let s = schema.get("items").unwrap_or(&empty);
            let embedded = flag(s, "x-kubernetes-embedded-resource");
            Cel::List(Arc::new(
                items.iter().map(|i| to_cel(i, s, embedded)).collect(),
            ))
        }
        ("string", Value::String(s)) => {
            let format = schema
                .get("format")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match format {
                "date-time" => chrono::DateTime::parse_from_rfc3339(s)
                    .map_or_else(|_| Cel::from(s.as_str()), Cel::Timestamp),
                "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
                    .ok()
                    .and_then(|d| d.and_hms_opt(0, 0, 0))
                    .map_or_else(
                        || Cel::from(s.as_str()),
                        |t| Cel::Timestamp(t.and_utc().fixed_offset()),
                    ),
                _ => Cel::from(s.as_str()),
            }
        }
        ("number", Value::Number(n)) => Cel::Float(n.as_f64().unwrap_or(f64::NAN)),
        ("integer", Value::Number(n)) => n.as_i64().map_or_else(|| untyped(value), Cel::Int),
        _ => untyped(value),
    }
}

/// A JSON value without a schema to type it.
fn untyped(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => n
            .as_i64()
            .map_or_else(|| Cel::Float(n.as_f64().unwrap_or(f64::NAN)), Cel::Int),
        Value::String(s) => Cel::from(s.as_str()),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(untyped).collect())),
        Value::Object(map) => cel_map(
            map.iter()
                .map(|(k, v)| (key(k), untyped(v)))
                .collect::<Vec<_>>(),
        ),
    }
}

/// The errors the apiserver finds in the `x-kubernetes-validations` of a
/// CRD's schema when the CRD is written (`ValidateCustomResourceDefinitionOpenAPISchema`):
/// missing rules and messages, unknown reasons, field paths that name no
/// field, and rules or message expressions that do not compile. `path` is
/// the schema's (`spec.versions[0].schema.openAPIV3Schema`).
pub(crate) fn crd_errors(schema: &Value, path: &str) -> Vec<FieldError> {
    let mut schema_errors = Vec::new();
    let mut cel_errors = Vec::new();
    crd_node(schema, path, &mut schema_errors, &mut cel_errors);
    schema_errors.extend(cel_errors);
    schema_errors
}

fn crd_node(
    schema: &Value,
    path: &str,
    schema_errors: &mut Vec<FieldError>,
    cel_errors: &mut Vec<FieldError>,
) {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        let mut names: Vec<&String> = properties.keys().collect();
        names.sort();
        for name in names {
            crd_node(
                &properties[name.as_str()],
                &format!("{path}.properties[{name}]"),
                schema_errors,
                cel_errors,
            );
        }
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        crd_node(items, &format!("{path}.items"), schema_errors, cel_errors);
    }
    if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        crd_node(
            additional,
            &format!("{path}.additionalProperties"),
            schema_errors,
            cel_errors,
        );
    }
    let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    else {
        return;
    };
    let mut local = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let at = |field: &str| format!("{path}.x-kubernetes-validations[{i}].{field}");
        let text = |key: &str| rule.get(key).and_then(Value::as_str).unwrap_or_default();
        let (source, message) = (text("rule").trim(), text("message"));
        if source.is_empty() {
            local.push(FieldError::required(at("rule"), "rule is not specified"));
        } else if !message.is_empty() && message.trim().is_empty() {
            local.push(FieldError::invalid(
                at("message"),
                message.into(),
                "must be non-empty if specified",
            ));
        } else if message.trim().contains('\n') {
            local.push(FieldError::invalid(
                at("message"),
                message.into(),
                "must not contain line breaks",
            ));
        } else if source.contains('\n') && message.trim().is_empty() {
            local.push(FieldError::required(
                at("message"),
                "message must be specified if rule contains line breaks",
            ));
        }
        let message_expression = text("messageExpression");
        if !message_expression.is_empty() && message_expression.trim().is_empty() {
            local.push(FieldError::required(
                at("messageExpression"),
                "messageExpression must be non-empty if specified",
            ));
        }
        if let Some(reason) = rule.get("reason").and_then(Value::as_str)
            && !matches!(
                reason,
                "FieldValueDuplicate"
                    | "FieldValueForbidden"
                    | "FieldValueInvalid"
                    | "FieldValueRequired"
            )
        {
            local.push(FieldError::new(
                FieldErrorKind::NotSupported,
                at("reason"),
                BadValue::Json(reason.into()),
                r#"supported values: "FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired""#,
            ));
        }
        let field_path = text("fieldPath");
        if !field_path.is_empty() && field_path.trim().is_empty() {
            local.push(FieldError::invalid(
                at("fieldPath"),
                field_path.into(),
                "must be non-empty if specified",
            ));
        }
        if field_path.contains('\n') {
            local.push(FieldError::invalid(
                at("fieldPath"),
                field_path.into(),
                "must not contain line breaks",
            ));
        }
        if !field_path.is_empty() && normalized_field_path(field_path, schema).is_none() {
            local.push(FieldError::invalid(
                at("fieldPath"),
                field_path.into(),
                "must be a valid path",
            ));
        }
    }
    if !local.is_empty() {
        schema_errors.extend(local);
        return;
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = |field: &str| format!("{path}.x-kubernetes-validations[{i}].{field}");
        let text = |key: &str| rule.get(key).and_then(Value::as_str).unwrap_or_default();
        // The internal ValidationRule, as json.Marshal prints it: its fields
        // in their order, without json tags.
        let shown = BadValue::Raw(format!(
            r#"{{"Rule":{},"Message":{},"MessageExpression":{},"Reason":{},"FieldPath":{},"OptionalOldSelf":{}}}"#,
            go_json(&text("rule").into()),
            go_json(&text("message").into()),
            go_json(&text("messageExpression").into()),
            go_json(rule.get("reason").unwrap_or(&Value::Null)),
            go_json(&text("fieldPath").into()),
            go_json(rule.get("optionalOldSelf").unwrap_or(&Value::Null)),
        ));
        let program = compile(text("rule"));
        if let Err(e) = &program {
            cel_errors.push(FieldError::new(
                FieldErrorKind::Invalid,
                at("rule"),
                shown.clone(),
                e.clone(),
            ));
        }
        let message_expression = text("messageExpression");
        if !message_expression.is_empty()
            && let Err(e) = compile(message_expression)
        {
            cel_errors.push(FieldError::new(
                FieldErrorKind::Invalid,
                at("messageExpression"),
                shown.clone(),
                format!("messageExpression {e}"),
            ));
        }
        if let Ok(program) = &program
            && !program.transition
            && let Some(optional) = rule.get("optionalOldSelf").and_then(Value::as_bool)
        {
            cel_errors.push(FieldError::new(
                FieldErrorKind::Invalid,
                at("optionalOldSelf"),
                BadValue::Json(optional.into()),
                "may not be set if oldSelf is not used in rule",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;

    use super::*;

    #[test]
    fn a_rule_tree_keeps_only_the_parts_that_lead_to_rules_and_evaluates_them_all() {
        let positive = json!([{"rule": "self > 0", "message": "must be positive"}]);
        let schema = json!({"type": "object", "properties": {
            "metadata": {"type": "object"},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
            "spec": {"type": "object", "properties": {
                "count": {"type": "integer", "allOf": [
                    {"description": "no rules"},
                    {"x-kubernetes-validations": positive},
                ]},
                "sizes": {"type": "array", "items": {"type": "integer", "x-kubernetes-validations": positive}},
                "limits": {"type": "object", "additionalProperties": {"type": "integer", "x-kubernetes-validations": positive}},
                "plain": {"type": "string"},
            }},
        }});
        let tree = RuleTree::of(&schema).unwrap();
        assert_eq!(
            tree.0,
            json!({"properties": {"spec": {"properties": {
                "count": {"allOf": [{"x-kubernetes-validations": positive}]},
                "sizes": {"items": {"x-kubernetes-validations": positive}},
                "limits": {"additionalProperties": {"x-kubernetes-validations": positive}},
            }}}})
        );
        assert!(
            RuleTree::of(&json!({"type": "object", "properties": {"a": {"type": "string"}}}))
                .is_none()
        );
        let obj = json!({
            "metadata": {"name": "x"},
            "status": {"phase": "Active"},
            "spec": {"count": 0, "sizes": [1, -1], "limits": {"cpu": -2}, "plain": "p"},
        });
        let mut fields: Vec<String> = tree
            .validate(&schema, &obj, None)
            .errors
            .iter()
            .map(|e| e.field.clone())
            .collect();
        fields.sort();
        assert_eq!(fields, ["spec.count", "spec.limits[cpu]", "spec.sizes[1]"]);
    }

    #[test]
    fn field_paths_normalize_as_the_apiservers_valid_field_path() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "object", "properties": {"b.c": {"type": "string"}}},
            "m": {"type": "object", "additionalProperties": {"type": "object", "properties": {"x": {"type": "string"}}}}
        }});
        let normalized = |p: &str| normalized_field_path(p, &schema);
        assert_eq!(normalized(".a"), Some("a".into()));
        assert_eq!(normalized(".a['b.c']"), Some("a.b.c".into()));
        assert_eq!(normalized(".m.key.x"), Some("m[key].x".into()));
        assert_eq!(normalized(".m['k\\'1']"), Some("m[k'1]".into()));
        // Each escape of the apiserver's unescapeSingleQuote, in a map key.
        assert_eq!(
            normalized(r".m['\a\b\f\n\r\t\v\\x']"),
            Some("m[\u{7}\u{8}\u{c}\n\r\t\u{b}\\x]".into())
        );
        assert_eq!(normalized(".nope"), None);
        assert_eq!(normalized("a"), None);
        assert_eq!(normalized(".a["), None);
    }

    #[test]
    fn runtime_errors_read_as_cel_gos() {
        let program = env().compile("self.x > 1 / self.y").unwrap();
        let mut context = Context::with_env(Arc::clone(env()));
        context.add_variable_from_value(
            "self",
            cel_map([(key("x"), Cel::Int(1)), (key("y"), Cel::Int(0))]),
        );
        let e = program.execute(&context).unwrap_err();
        assert_eq!(
            runtime_error(&e, "r"),
            "division by zero evaluating rule: r"
        );
        let e = env()
            .compile("1 + 'a' == 2")
            .unwrap()
            .execute(&context)
            .unwrap_err();
        assert_eq!(
            runtime_error(&e, "r"),
            "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: r"
        );
    }
}
