//! The marks consolidation and make-room read and write on Tenants and Nodes (annotations).
//!
//! Rules enforced here:
//! - `do-not-disrupt` is `"true"` or `"false"`; any other value is taken as `"true"`, the safe
//!   reading, and reported as such ([`DoNotDisrupt::Unreadable`]);
//! - the consolidating mark on a Node says the controller drains it to hand it back (a person's
//!   drain carries none, and is never counted against the budget).

use std::collections::BTreeMap;

use super::TenantPhase;

/// On a Tenant: its node is never emptied for consolidation, and it is never moved for room. On
/// a Node: it is never emptied.
pub const DO_NOT_DISRUPT_ANNOTATION: &str = "placement.tenant-placer.dev/do-not-disrupt";

/// On a Node the controller drains to hand it back: when the drain began (RFC 3339).
pub const CONSOLIDATING_ANNOTATION: &str = "placement.tenant-placer.dev/consolidating";

/// What an object's `do-not-disrupt` annotation says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DoNotDisrupt {
    /// Absent, or `"false"`.
    No,
    /// `"true"`.
    Yes,
    /// Another value: taken as `"true"`.
    Unreadable(String),
}

impl DoNotDisrupt {
    /// Reads the annotation from an object's annotations.
    pub fn of(annotations: &BTreeMap<String, String>) -> DoNotDisrupt {
        DoNotDisrupt::of_value(
            annotations
                .get(DO_NOT_DISRUPT_ANNOTATION)
                .map(String::as_str),
        )
    }

    /// Reads the annotation's value (`None`: absent).
    pub fn of_value(value: Option<&str>) -> DoNotDisrupt {
        match value {
            None | Some("false") => DoNotDisrupt::No,
            Some("true") => DoNotDisrupt::Yes,
            Some(other) => DoNotDisrupt::Unreadable(other.to_owned()),
        }
    }

    /// Whether it keeps the object from being disrupted.
    pub fn keeps(&self) -> bool {
        *self != DoNotDisrupt::No
    }
}

/// What says whether a tenant rests where it is and may be moved for room: read alike from a
/// whole Tenant and from the controller's compact copy of one.
#[derive(Clone, Copy, Debug)]
pub struct Resting<'a> {
    /// `None`: no status (nothing held).
    pub phase: Option<TenantPhase>,
    /// Its status records a move.
    pub migrating: bool,
    pub deleting: bool,
    pub suspended: bool,
    /// The `do-not-disrupt` annotation's value.
    pub do_not_disrupt: Option<&'a str>,
    /// Its replicas are spread (`spec.spread`): they move only as the spread rule allows.
    pub spread: bool,
}

impl Resting<'_> {
    /// Active, no move in flight, not being deleted, not suspended, not spread, and not
    /// `do-not-disrupt` (an unreadable value keeps it).
    pub fn may_move(&self) -> bool {
        self.phase == Some(TenantPhase::Active)
            && !self.spread
            && !self.migrating
            && !self.deleting
            && !self.suspended
            && !DoNotDisrupt::of_value(self.do_not_disrupt).keeps()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn do_not_disrupt_is_true_false_or_taken_as_true() {
        let of = |value: Option<&str>| {
            let annotations = value
                .map(|v| BTreeMap::from([(DO_NOT_DISRUPT_ANNOTATION.to_owned(), v.to_owned())]))
                .unwrap_or_default();
            DoNotDisrupt::of(&annotations)
        };
        assert_eq!(of(None), DoNotDisrupt::No);
        assert_eq!(of(Some("false")), DoNotDisrupt::No);
        assert_eq!(of(Some("true")), DoNotDisrupt::Yes);
        assert_eq!(of(Some("yes")), DoNotDisrupt::Unreadable("yes".into()));
        assert!(of(Some("True")).keeps());
        assert!(of(Some("true")).keeps());
        assert!(!of(Some("false")).keeps());
    }
}
