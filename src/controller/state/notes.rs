//! What each waiting tenant's status adds about machines: the node request it waits for, or why
//! none is bought. The capacity tick replaces them all at each look; the tenant loop reads one.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// The notes, by tenant key (`namespace/name`).
#[derive(Debug, Default)]
pub struct PurchaseNotes(Mutex<HashMap<String, String>>);

impl PurchaseNotes {
    /// This tenant's note, if it has one.
    pub fn note_for(&self, tenant: &str) -> Option<String> {
        self.lock().get(tenant).cloned()
    }

    /// Keeps `notes` in place of the last ones; answers the tenants whose note changed, came or
    /// went (their statuses must say it).
    pub fn replace(&self, notes: HashMap<String, String>) -> Vec<String> {
        let mut kept = self.lock();
        let changed = notes
            .iter()
            .filter(|(tenant, note)| kept.get(*tenant) != Some(note))
            .map(|(tenant, _)| tenant.clone())
            .chain(
                kept.keys()
                    .filter(|tenant| !notes.contains_key(*tenant))
                    .cloned(),
            )
            .collect();
        *kept = notes;
        changed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notes(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(t, n)| ((*t).to_owned(), (*n).to_owned()))
            .collect()
    }

    #[test]
    fn the_tenants_whose_note_changed_came_or_went_are_answered() {
        let kept = PurchaseNotes::default();
        let sorted = |mut changed: Vec<String>| {
            changed.sort();
            changed
        };
        assert_eq!(
            sorted(kept.replace(notes(&[("d/a", "one"), ("d/b", "two")]))),
            ["d/a", "d/b"]
        );
        assert_eq!(
            sorted(kept.replace(notes(&[("d/a", "one"), ("d/b", "three"), ("d/c", "x")]))),
            ["d/b", "d/c"]
        );
        assert_eq!(
            sorted(kept.replace(notes(&[("d/a", "one")]))),
            ["d/b", "d/c"]
        );
        assert!(kept.replace(notes(&[("d/a", "one")])).is_empty());
        assert_eq!(kept.note_for("d/a").as_deref(), Some("one"));
        assert_eq!(kept.note_for("d/b"), None);
    }
}
