//! The newest known copy of each object: the watch cache, overlaid with what we wrote ourselves
//! (or re-read) until the cache catches up.
//!
//! Rules enforced here:
//! - a copy is used only while its resourceVersion is newer than the cached one; once the cache
//!   has caught up the copy is dropped, so the overlay holds only writes still in flight;
//! - every copy is stripped as the watch cache's objects are (`strip`);
//! - a bounded overlay ([`Newest::bounded`]: the Tenants', whose writes can run tens of
//!   thousands ahead of their watch in a flood) keeps at most two generations of `bound` copies;
//!   a copy that ages out leaves only its resourceVersion behind (16 bytes), so a cache still
//!   older than it is known to be behind ([`Newest::freshest_known`] answers `None`) and the
//!   caller reads the object instead of deciding from a stale one;
//! - resourceVersions are compared as numbers. NB: clients should treat them as opaque, but both
//!   copies come from the same API server, where they are etcd revisions; an unparseable one
//!   counts as oldest, so the cache wins.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kube::{Resource, ResourceExt};

use super::strip::{self, Cached};

/// Copies by namespace ("" for cluster-scoped objects), then name: looked up without building a
/// key, since every snapshot of the node cache asks for each node.
type Copies<K> = HashMap<String, HashMap<String, Arc<K>>>;

/// Copies newer than the cache, by namespace and name.
#[derive(Debug)]
pub struct Newest<K> {
    overlay: Mutex<Overlay<K>>,
    /// Copies per generation, at most; `None` keeps every copy until the cache catches up.
    bound: Option<usize>,
}

#[derive(Debug)]
struct Overlay<K> {
    /// The newer generation of copies, and how many it holds.
    copies: Copies<K>,
    len: usize,
    /// The older generation: dropped, but for their versions, when the newer one fills up.
    older: Copies<K>,
    /// The resourceVersion of each dropped copy, by [`name_key`], until the cache catches up.
    dropped: HashMap<u64, u64>,
}

impl<K> Default for Overlay<K> {
    fn default() -> Self {
        Overlay {
            copies: HashMap::new(),
            len: 0,
            older: HashMap::new(),
            dropped: HashMap::new(),
        }
    }
}

impl<K> Default for Newest<K> {
    fn default() -> Self {
        Newest {
            overlay: Mutex::default(),
            bound: None,
        }
    }
}

fn version<K: Resource>(object: &K) -> u64 {
    // Read in place: `ResourceExt::resource_version` copies it, at every look-up of a copy.
    object
        .meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A dropped copy's key: a hash of its namespace and name (a collision only costs a read).
fn name_key(namespace: &str, name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (namespace, name).hash(&mut hasher);
    hasher.finish()
}

fn key_of<K: Resource>(object: &K) -> u64 {
    name_key(namespace_of(object), name_of(object))
}

/// The newer of two copies of one object (same UID); `given` when they are not the same object.
pub fn newer<K: Resource>(given: Arc<K>, other: Option<Arc<K>>) -> Arc<K> {
    match other {
        Some(other)
            if other.meta().uid == given.meta().uid
                && version(other.as_ref()) > version(given.as_ref()) =>
        {
            other
        }
        _ => given,
    }
}

fn namespace_of<K: Resource>(object: &K) -> &str {
    object.meta().namespace.as_deref().unwrap_or_default()
}

fn name_of<K: Resource>(object: &K) -> &str {
    object.meta().name.as_deref().unwrap_or_default()
}

impl<K> Overlay<K> {
    fn get(&self, namespace: &str, name: &str) -> Option<&Arc<K>> {
        [&self.copies, &self.older]
            .into_iter()
            .find_map(|copies| copies.get(namespace)?.get(name))
    }

    fn remove(&mut self, namespace: &str, name: &str) {
        if remove(&mut self.copies, namespace, name) {
            self.len = self.len.saturating_sub(1);
        }
        remove(&mut self.older, namespace, name);
    }

    /// Forgets everything of one object: its copy and the version of a dropped one.
    fn forget(&mut self, namespace: &str, name: &str) {
        self.remove(namespace, name);
        if !self.dropped.is_empty() {
            self.forget_version(name_key(namespace, name));
        }
    }

    /// Forgets a dropped copy's version (the cache caught up, or the object is gone).
    fn forget_version(&mut self, key: u64) {
        self.dropped.remove(&key);
        super::give_back_room(&mut self.dropped);
    }

    fn is_empty(&self) -> bool {
        self.copies.is_empty() && self.older.is_empty() && self.dropped.is_empty()
    }
}

impl<K: Resource> Newest<K> {
    /// An overlay keeping at most `bound` copies a generation (two generations).
    pub fn bounded(bound: usize) -> Self {
        Newest {
            overlay: Mutex::default(),
            bound: Some(bound.max(1)),
        }
    }

    fn overlay(&self) -> std::sync::MutexGuard<'_, Overlay<K>> {
        self.overlay.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many copies are held.
    pub fn len(&self) -> usize {
        let overlay = self.overlay();
        [&overlay.copies, &overlay.older]
            .into_iter()
            .flat_map(HashMap::values)
            .map(HashMap::len)
            .sum()
    }

    /// Whether nothing is held: no copy, and no version of a dropped one.
    pub fn is_empty(&self) -> bool {
        self.overlay().is_empty()
    }

    /// Keeps what a write (or a fresh read) returned, stripped as the cache's objects are, and
    /// hands back the copy kept.
    pub fn remember(&self, object: K) -> Arc<K>
    where
        K: Cached,
    {
        let copy = Arc::new(strip::stripped(object));
        self.remember_shared(copy.clone());
        copy
    }

    /// [`remember`](Self::remember) for a copy shared with its other readers (stripped by the
    /// caller).
    pub fn remember_shared(&self, object: Arc<K>) {
        let (namespace, name) = (namespace_of(object.as_ref()).to_owned(), object.name_any());
        let mut overlay = self.overlay();
        remove(&mut overlay.older, &namespace, &name);
        if overlay
            .copies
            .entry(namespace)
            .or_default()
            .insert(name, object)
            .is_none()
        {
            overlay.len = overlay.len.saturating_add(1);
        }
        if self.bound.is_some_and(|bound| overlay.len >= bound) {
            // The older generation goes; what it held is remembered by version only.
            let aged = std::mem::take(&mut overlay.copies);
            overlay.len = 0;
            let dropped = std::mem::replace(&mut overlay.older, aged);
            for copy in dropped.values().flat_map(HashMap::values) {
                overlay
                    .dropped
                    .insert(key_of(copy.as_ref()), version(copy.as_ref()));
            }
        }
    }

    /// Forgets an object (it is gone).
    pub fn forget(&self, namespace: Option<&str>, name: &str) {
        self.overlay().forget(namespace.unwrap_or_default(), name);
    }

    /// The newer of the cached object and our copy, for an overlay that keeps every copy (a
    /// bounded one may answer a cache that is behind: see [`freshest_known`](Self::freshest_known)).
    pub fn freshest(&self, cached: Arc<K>) -> Arc<K> {
        self.freshest_known(cached.clone()).unwrap_or(cached)
    }

    /// The newer of the cached object and our copy; `None` when the cache is older than a
    /// version we wrote whose copy was dropped (read the object instead).
    pub fn freshest_known(&self, cached: Arc<K>) -> Option<Arc<K>> {
        let mut overlay = self.overlay();
        if overlay.is_empty() {
            return Some(cached);
        }
        let (namespace, name) = (namespace_of(cached.as_ref()), name_of(cached.as_ref()));
        let cached_version = version(cached.as_ref());
        match overlay.get(namespace, name) {
            Some(copy) if version(copy.as_ref()) > cached_version => return Some(copy.clone()),
            Some(_) => overlay.remove(namespace, name),
            None => {}
        }
        let key = name_key(namespace, name);
        match overlay.dropped.get(&key) {
            Some(&written) if written > cached_version => None,
            Some(_) => {
                overlay.forget_version(key);
                Some(cached)
            }
            None => Some(cached),
        }
    }

    /// The watch delivered this object: a copy it has caught up with is dropped.
    pub fn observed(&self, object: &K) {
        let mut overlay = self.overlay();
        if overlay.is_empty() {
            return;
        }
        let (namespace, name) = (namespace_of(object), name_of(object));
        let observed = version(object);
        if overlay
            .get(namespace, name)
            .is_some_and(|copy| version(copy.as_ref()) <= observed)
        {
            overlay.remove(namespace, name);
        }
        if !overlay.dropped.is_empty() {
            let key = name_key(namespace, name);
            if overlay
                .dropped
                .get(&key)
                .is_some_and(|&written| written <= observed)
            {
                overlay.forget_version(key);
            }
        }
    }

    /// Drops copies of objects the cache no longer holds (deleted): `present(namespace, name)`
    /// says whether it does.
    pub fn retain_present(&self, present: impl Fn(&str, &str) -> bool) {
        let mut overlay = self.overlay();
        let overlay = &mut *overlay;
        for copies in [&mut overlay.copies, &mut overlay.older] {
            for (namespace, named) in copies.iter_mut() {
                named.retain(|name, _| present(namespace, name));
            }
            copies.retain(|_, named| !named.is_empty());
        }
        overlay.len = overlay.copies.values().map(HashMap::len).sum();
    }
}

/// Removes one copy, and its namespace's map once empty (so `is_empty` stays cheap and true);
/// whether there was one.
fn remove<K>(copies: &mut Copies<K>, namespace: &str, name: &str) -> bool {
    let Some(named) = copies.get_mut(namespace) else {
        return false;
    };
    let removed = named.remove(name).is_some();
    if named.is_empty() {
        copies.remove(namespace);
    } else {
        super::give_back_room(named);
    }
    removed
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::api::Node;
    use crate::testing::{NodeBuilder, node};

    /// Node `n` at resourceVersion `rv`, with `threads` threads: which copy won shows in them.
    fn at(rv: u64, threads: i64) -> NodeBuilder {
        node("n").capacity(threads, 1, 1).resource_version(rv)
    }

    #[test]
    fn the_newer_copy_of_the_same_object_wins() {
        let recreated = at(20, 3).uid("other").build();
        let older = at(10, 1).uid("one").build();
        let newer_copy = at(12, 2).uid("one").build();
        let given = Arc::new(older);
        assert_eq!(
            newer(given.clone(), Some(Arc::new(newer_copy)))
                .spec
                .capacity
                .threads,
            2
        );
        assert_eq!(newer(given.clone(), None).spec.capacity.threads, 1);
        assert_eq!(
            newer(given, Some(Arc::new(recreated)))
                .spec
                .capacity
                .threads,
            1,
            "another UID is another object"
        );
    }

    #[test]
    fn a_copy_goes_when_the_watch_delivers_its_version_or_a_newer_one() {
        let newest = Newest::default();
        newest.remember(at(12, 2).build());
        newest.observed(&at(11, 1).build());
        assert_eq!(newest.len(), 1, "an older event keeps the copy");
        newest.observed(&at(12, 2).build());
        assert!(newest.is_empty());
    }

    #[test]
    fn a_copy_wins_while_newer_and_goes_once_the_cache_catches_up() {
        let newest = Newest::default();
        newest.remember(at(12, 2).build());
        assert_eq!(
            newest
                .freshest(Arc::new(at(10, 1).build()))
                .spec
                .capacity
                .threads,
            2
        );
        // The cache caught up (rv 12): the cached object wins and the copy is dropped.
        assert_eq!(
            newest
                .freshest(Arc::new(at(12, 3).build()))
                .spec
                .capacity
                .threads,
            3
        );
        assert_eq!(
            newest
                .freshest(Arc::new(at(10, 1).build()))
                .spec
                .capacity
                .threads,
            1
        );
    }

    fn named(name: &str, rv: u64) -> Arc<Node> {
        Arc::new(node(name).capacity(1, 1, 1).resource_version(rv).build())
    }

    #[test]
    fn a_bounded_overlay_keeps_two_generations_and_then_knows_the_cache_is_behind() {
        let newest = Newest::bounded(2);
        for name in ["a", "b", "c", "d", "e"] {
            newest.remember_shared(named(name, 10));
        }
        // a and b aged out when d filled the second generation; c, d, e are kept.
        assert_eq!(newest.len(), 3);
        assert_eq!(
            newest
                .freshest_known(named("e", 5))
                .map(|n| n.resource_version()),
            Some(Some("10".into()))
        );
        assert!(
            newest.freshest_known(named("a", 5)).is_none(),
            "behind a dropped write"
        );
        assert!(newest.freshest_known(named("b", 9)).is_none());
        // The cache caught up with a (the version we wrote), and b's event arrived.
        assert_eq!(
            newest
                .freshest_known(named("a", 10))
                .map(|n| n.resource_version()),
            Some(Some("10".into()))
        );
        newest.observed(&named("b", 11));
        assert!(
            newest.freshest_known(named("b", 9)).is_some(),
            "the event cleared it"
        );
        // A gone object leaves nothing behind.
        for name in ["c", "d", "e"] {
            newest.forget(None, name);
        }
        assert!(newest.is_empty());
    }

    #[test]
    fn a_copy_remembered_again_stays_one_copy_of_the_newer_generation() {
        let newest = Newest::bounded(2);
        newest.remember_shared(named("a", 10));
        newest.remember_shared(named("b", 10));
        // a is in the older generation now; remembered again it moves, not doubles.
        newest.remember_shared(named("a", 12));
        assert_eq!(newest.len(), 2);
        assert_eq!(
            newest
                .freshest(named("a", 11))
                .resource_version()
                .as_deref(),
            Some("12")
        );
    }

    #[test]
    fn an_unbounded_overlay_is_never_behind() {
        let newest = Newest::default();
        for rv in 1..100 {
            newest.remember_shared(named(&format!("n{rv}"), rv + 1));
        }
        assert_eq!(newest.len(), 99);
        assert!((1..100).all(|rv| newest.freshest_known(named(&format!("n{rv}"), 1)).is_some()));
    }
}
