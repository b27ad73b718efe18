//! Label selectors as `kubectl -l` and the API server's `labelSelector` take them, parsed once so
//! the controller can match what it reads directly against the selector its watches use.
//!
//! Rules enforced here:
//! - the grammar is the API server's: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`,
//!   `!k`, joined by commas, all of which must hold; the empty selector matches everything;
//! - a selector is refused when the API server would refuse it (an empty key, a key or value
//!   with characters a label cannot have, a set that is not in parentheses), so a typo fails at
//!   start and never as a watch that lists nothing;
//! - the text is kept as given: the watches send it to the API server unchanged, and the same
//!   requirements are matched here ([`LabelSelector::matches`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use kube::core::{Expression, Selector, SelectorExt};

/// A parsed label selector and the text it was parsed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelSelector {
    text: String,
    selector: Selector,
}

/// Why a selector cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {why}")]
pub struct SelectorError {
    pub selector: String,
    pub why: String,
}

impl LabelSelector {
    /// The selector as given (what the watches send as `labelSelector`).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.matches(labels)
    }

    /// Whether it matches everything (no requirement at all).
    pub fn is_everything(&self) -> bool {
        self.selector.selects_all()
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |why: String| SelectorError {
            selector: text.to_owned(),
            why,
        };
        let mut expressions = Vec::new();
        for requirement in split_top_level(text) {
            expressions.push(parse_requirement(requirement).map_err(fail)?);
        }
        Ok(LabelSelector {
            text: text.trim().to_owned(),
            selector: expressions.into_iter().collect(),
        })
    }
}

/// Splits on the commas outside `( )`, dropping empty parts.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth = depth.saturating_add(1),
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(text.get(start..i).unwrap_or_default());
                start = i.saturating_add(1);
            }
            _ => {}
        }
    }
    parts.push(text.get(start..).unwrap_or_default());
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn parse_requirement(requirement: &str) -> Result<Expression, String> {
    if let Some(key) = requirement.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(key_of(key)?));
    }
    if let Some((key, value)) = requirement.split_once("!=") {
        return Ok(Expression::NotEqual(key_of(key)?, value_of(value)?));
    }
    if let Some((key, value)) = requirement
        .split_once("==")
        .or_else(|| requirement.split_once('='))
    {
        return Ok(Expression::Equal(key_of(key)?, value_of(value)?));
    }
    if let Some((key, rest)) = requirement.split_once(char::is_whitespace) {
        let rest = rest.trim_start();
        let (not, set) = if let Some(set) = rest.strip_prefix("notin") {
            (true, set)
        } else if let Some(set) = rest.strip_prefix("in") {
            (false, set)
        } else {
            return Err(format!("cannot understand {requirement:?}"));
        };
        let values = set
            .trim()
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(|| format!("the set of {requirement:?} is not in parentheses"))?
            .split(',')
            .map(value_of)
            .collect::<Result<BTreeSet<String>, String>>()?;
        let key = key_of(key)?;
        return Ok(if not {
            Expression::NotIn(key, values)
        } else {
            Expression::In(key, values)
        });
    }
    Ok(Expression::Exists(key_of(requirement)?))
}

/// A label key: an optional DNS prefix and `/`, then a name of at most 63 characters.
fn key_of(key: &str) -> Result<String, String> {
    let key = key.trim();
    let name = key.rsplit_once('/').map_or(key, |(_, name)| name);
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/');
    if name.is_empty() || name.len() > 63 || !key.chars().all(allowed) {
        return Err(format!("{key:?} is not a label key"));
    }
    Ok(key.to_owned())
}

/// A label key as the API server accepts one (`IsQualifiedName`): an optional prefix, a DNS
/// subdomain of at most 253 characters (lowercase letters, digits, `-` and `.`, each part starting
/// and ending with a letter or digit) and `/`, then a name of 1 to 63 characters (letters,
/// digits, `-`, `_` and `.`, starting and ending with a letter or digit).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LabelKey(String);

impl LabelKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LabelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for LabelKey {
    type Err = String;

    fn from_str(key: &str) -> Result<Self, Self::Err> {
        let (prefix, name) = match key.split_once('/') {
            Some((prefix, name)) => (Some(prefix), name),
            None => (None, key),
        };
        let why = if name.is_empty() {
            Some("its name part is empty".to_owned())
        } else if name.len() > 63 {
            Some(format!(
                "its name part is {} characters, at most 63 are allowed",
                name.len()
            ))
        } else if !is_label_name(name) {
            Some(
                "its name part must consist of letters, digits, '-', '_' or '.', and start and \
                 end with a letter or digit"
                    .to_owned(),
            )
        } else {
            match prefix {
                Some(prefix) if prefix.len() > 253 => Some(format!(
                    "its prefix is {} characters, at most 253 are allowed",
                    prefix.len()
                )),
                Some(prefix) if !is_dns_subdomain(prefix) => Some(
                    "its prefix must be a DNS subdomain: lowercase letters, digits, '-' and '.', \
                     each part starting and ending with a letter or digit"
                        .to_owned(),
                ),
                _ => None,
            }
        };
        match why {
            Some(why) => Err(format!("{key:?} is not a label key: {why}")),
            None => Ok(LabelKey(key.to_owned())),
        }
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_label_name(name: &str) -> bool {
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(inner)
}

/// An RFC 1123 subdomain: dot-separated parts of lowercase letters, digits and `-`, each
/// starting and ending with a letter or digit (the length is checked apart).
fn is_dns_subdomain(prefix: &str) -> bool {
    let edge = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    prefix.split('.').all(|part| {
        part.starts_with(edge) && part.ends_with(edge) && part.chars().all(|c| edge(c) || c == '-')
    })
}

/// A label value: at most 63 characters of letters, digits, `-`, `_` and `.`; may be empty.
fn value_of(value: &str) -> Result<String, String> {
    let value = value.trim();
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if value.len() > 63 || !value.chars().all(allowed) {
        return Err(format!("{value:?} is not a label value"));
    }
    Ok(value.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn matches(selector: &str, pairs: &[(&str, &str)]) -> bool {
        selector
            .parse::<LabelSelector>()
            .unwrap()
            .matches(&labels(pairs))
    }

    #[test]
    fn every_requirement_of_a_selector_must_hold() {
        let eu_silver = [("pool", "eu"), ("tier", "silver")];
        // (selector, labels, matches)
        type Labels<'a> = &'a [(&'a str, &'a str)];
        let cases: &[(&str, Labels, bool)] = &[
            ("pool=eu", &eu_silver, true),
            ("pool==eu", &eu_silver, true),
            ("pool=eu,tier!=gold", &eu_silver, true),
            ("pool=eu,tier!=silver", &eu_silver, false),
            ("pool in (eu, us)", &eu_silver, true),
            ("pool notin (eu)", &eu_silver, false),
            ("pool notin (eu)", &[], true),
            ("tier", &eu_silver, true),
            ("!tier", &eu_silver, false),
            ("example.com/pool=eu", &[("example.com/pool", "eu")], true),
            // A != on a missing label holds, as in the API server.
            ("tier!=gold", &[], true),
            ("", &[], true),
        ];
        for (selector, pairs, expected) in cases {
            assert_eq!(
                matches(selector, pairs),
                *expected,
                "{selector} on {pairs:?}"
            );
        }
    }

    #[test]
    fn selectors_the_api_server_would_refuse_are_refused_at_parse() {
        for bad in [
            "=eu",
            "pool=e u",
            "pool in eu",
            "pool maybe (eu)",
            "po ol",
            "pool=eu,!",
        ] {
            assert!(bad.parse::<LabelSelector>().is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn label_keys_are_checked_as_the_api_server_checks_them() {
        let long_name = "a".repeat(63);
        let long_prefix = format!("{}.io/zone", "a".repeat(250));
        // (key, accepted)
        let cases: &[(&str, bool)] = &[
            ("topology.kubernetes.io/zone", true),
            ("zone", true),
            ("example.com/rack_1.A", true),
            (&long_name, true),
            // 64 characters in the name part.
            (&format!("{long_name}b"), false),
            // 250 + 3 = 253 characters of prefix: at the limit.
            (&long_prefix, true),
            (&format!("a{long_prefix}"), false),
            ("", false),
            ("example.com/", false),
            ("/zone", false),
            ("Example.com/zone", false),
            ("example..com/zone", false),
            ("-example.com/zone", false),
            ("a/b/zone", false),
            ("zone-", false),
            ("_zone", false),
            ("my zone", false),
            ("zone=fsn1", false),
        ];
        for (key, accepted) in cases {
            assert_eq!(key.parse::<LabelKey>().is_ok(), *accepted, "{key:?}");
        }
        let why = "topology.kubernetes.io/".parse::<LabelKey>().unwrap_err();
        assert_eq!(
            why,
            "\"topology.kubernetes.io/\" is not a label key: its name part is empty"
        );
    }

    #[test]
    fn the_text_is_kept_as_given_for_the_watches() {
        let selector: LabelSelector = " pool=eu,tier!=gold ".parse().unwrap();
        assert_eq!(selector.as_str(), "pool=eu,tier!=gold");
        assert!(!selector.is_everything());
        assert!("".parse::<LabelSelector>().unwrap().is_everything());
    }
}
