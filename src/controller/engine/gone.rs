//! The UIDs of tenants seen deleted or released lately: a decision never places one again.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

/// The UIDs of tenants seen deleted or released lately (UIDs are never reused, so remembering
/// one is always right; the bound only limits memory: a decision older than this many deletes is
/// not expected).
#[derive(Debug, Default)]
pub struct GoneUids(Mutex<(std::collections::VecDeque<String>, UidSet)>);

/// UIDs, hashed as the API server's UIDs may be (see [`placement::NameHasher`]): checked once
/// a decision.
type UidSet = HashSet<String, std::hash::BuildHasherDefault<placement::NameHasher>>;

impl GoneUids {
    const KEPT: usize = 65_536;

    /// This tenant is deleted (its delete event, or a release): it is never placed again.
    pub fn insert(&self, uid: &str) {
        let mut guard = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (order, set) = &mut *guard;
        if !set.insert(uid.to_owned()) {
            return;
        }
        order.push_back(uid.to_owned());
        if order.len() > Self::KEPT
            && let Some(oldest) = order.pop_front()
        {
            set.remove(&oldest);
        }
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
            .contains(uid)
    }
}
