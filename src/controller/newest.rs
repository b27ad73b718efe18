//! The newest known copy of each object: the watch cache, overlaid with what we wrote ourselves
//! (or re-read) until the cache catches up.
//!
//! Rules enforced here:
//! - a copy is used only while its resourceVersion is newer than the cached one; once the cache
//!   has caught up the copy is dropped, so the overlay holds only writes still in flight;
//! - resourceVersions are compared as numbers. NB: clients should treat them as opaque, but both
//!   copies come from the same API server, where they are etcd revisions; an unparseable one
//!   counts as oldest, so the cache wins.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kube::{Resource, ResourceExt};

/// Copies by namespace ("" for cluster-scoped objects), then name: looked up without building a
/// key, since every snapshot of the node cache asks for each node.
type Copies<K> = HashMap<String, HashMap<String, Arc<K>>>;

/// Copies newer than the cache, by namespace and name.
#[derive(Debug)]
pub struct Newest<K> {
    copies: Mutex<Copies<K>>,
}

impl<K> Default for Newest<K> {
    fn default() -> Self {
        Newest {
            copies: Mutex::default(),
        }
    }
}

fn version<K: Resource>(object: &K) -> u64 {
    object
        .resource_version()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
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

impl<K: Resource> Newest<K> {
    fn copies(&self) -> std::sync::MutexGuard<'_, Copies<K>> {
        self.copies.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many copies are held.
    pub fn len(&self) -> usize {
        self.copies().values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps what a write (or a fresh read) returned.
    pub fn remember(&self, object: K) {
        self.remember_shared(Arc::new(object));
    }

    /// [`remember`](Self::remember) for a copy shared with its other readers.
    pub fn remember_shared(&self, object: Arc<K>) {
        let (namespace, name) = (namespace_of(object.as_ref()).to_owned(), object.name_any());
        self.copies()
            .entry(namespace)
            .or_default()
            .insert(name, object);
    }

    /// Forgets an object (it is gone).
    pub fn forget(&self, namespace: Option<&str>, name: &str) {
        remove(&mut self.copies(), namespace.unwrap_or_default(), name);
    }

    /// The newer of the cached object and our copy.
    pub fn freshest(&self, cached: Arc<K>) -> Arc<K> {
        let mut copies = self.copies();
        if copies.is_empty() {
            return cached;
        }
        let (namespace, name) = (namespace_of(cached.as_ref()), name_of(cached.as_ref()));
        match copies.get(namespace).and_then(|named| named.get(name)) {
            Some(copy) if version(copy.as_ref()) > version(cached.as_ref()) => copy.clone(),
            Some(_) => {
                remove(&mut copies, namespace, name);
                cached
            }
            None => cached,
        }
    }

    /// The watch delivered this object: a copy it has caught up with is dropped.
    pub fn observed(&self, object: &K) {
        let mut copies = self.copies();
        if copies.is_empty() {
            return;
        }
        let (namespace, name) = (namespace_of(object), name_of(object));
        if copies
            .get(namespace)
            .and_then(|named| named.get(name))
            .is_some_and(|copy| version(copy.as_ref()) <= version(object))
        {
            remove(&mut copies, namespace, name);
        }
    }

    /// Drops copies of objects the cache no longer holds (deleted): `present(namespace, name)`
    /// says whether it does.
    pub fn retain_present(&self, present: impl Fn(&str, &str) -> bool) {
        let mut copies = self.copies();
        for (namespace, named) in copies.iter_mut() {
            named.retain(|name, _| present(namespace, name));
        }
        copies.retain(|_, named| !named.is_empty());
    }
}

/// Removes one copy, and its namespace's map once empty (so `is_empty` stays cheap and true).
fn remove<K>(copies: &mut Copies<K>, namespace: &str, name: &str) {
    if let Some(named) = copies.get_mut(namespace) {
        named.remove(name);
        if named.is_empty() {
            copies.remove(namespace);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
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
}
