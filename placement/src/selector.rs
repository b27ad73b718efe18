//! Node selectors: which nodes may take a tenant, by their labels.
//!
//! ```text
//!   tenant nodeSelector {region: eu, cc: sev}
//!   node a  labels {region: eu, cc: sev, rack: 7}   matches (every pair present)
//!   node b  labels {region: eu}                     does not (cc missing)
//!   node c  labels {region: us, cc: sev}            does not (region differs)
//! ```
//!
//! Rules enforced here (docs/design.md, "The API"):
//! - a node matches a selector when its labels include every pair of the selector, same key and
//!   same value; no selector, or an empty one, matches every node;
//! - a selector limits where a tenant may go: its first placement, an entry restored on the node
//!   its status names, the target of a move off a draining node, and the room the queue holds
//!   for it. It never takes an entry away: a tenant holding an entry on a node whose labels
//!   changed keeps it there, and resizes in place there;
//! - over a slice of ledgers the candidates are filtered by a scan (O(nodes) per decision); an
//!   `IndexedFleet` (fleet.rs) answers first fit for a selector from an index over the nodes
//!   carrying its labels, kept current as labels change.

use std::collections::BTreeMap;
use std::fmt;

/// A node's labels, or a tenant's node selector: label key → value.
pub type Labels = BTreeMap<String, String>;

/// Whether `labels` include every pair of `selector` (`None` and an empty selector match any).
pub fn matches(selector: Option<&Labels>, labels: &Labels) -> bool {
    selector.is_none_or(|selector| {
        selector
            .iter()
            .all(|(key, value)| labels.get(key) == Some(value))
    })
}

/// A selector as people read it: `cc=sev, region=eu` (keys in byte order).
#[derive(Clone, Copy, Debug)]
pub struct Pairs<'a>(pub &'a Labels);

impl fmt::Display for Pairs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (key, value)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{key}={value}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_node_matches_when_it_carries_every_pair_of_the_selector() {
        let selector = labels(&[("region", "eu"), ("cc", "sev")]);
        let cases = [
            // | node labels                   | matches |
            (
                labels(&[("region", "eu"), ("cc", "sev"), ("rack", "7")]),
                true,
            ),
            (labels(&[("region", "eu")]), false),
            (labels(&[("region", "us"), ("cc", "sev")]), false),
            (labels(&[]), false),
        ];
        for (node, want) in cases {
            assert_eq!(matches(Some(&selector), &node), want, "{node:?}");
        }
        // No selector, or an empty one, matches any node, labelled or not.
        assert!(matches(None, &labels(&[])));
        assert!(matches(Some(&labels(&[])), &labels(&[("region", "eu")])));
    }

    #[test]
    fn a_selector_reads_as_its_pairs_in_key_order() {
        let selector = labels(&[("region", "eu"), ("cc", "sev")]);
        assert_eq!(Pairs(&selector).to_string(), "cc=sev, region=eu");
    }
}
