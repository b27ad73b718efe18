//! A cached tenant's key: its namespace (interned: one allocation per namespace) and its name.
//!
//! Rules enforced here:
//! - a key and an `ObjectRef<Tenant>` of the same namespace and name are the same key to every
//!   map and set that holds keys ([`Named`]), so a lookup by reference allocates nothing;
//! - a tenant's reference has its name and namespace only (no UID or resourceVersion).

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use kube::runtime::reflector::ObjectRef;

use crate::api::Tenant;

/// A tenant's namespace and name, as maps of keys look them up.
pub trait Named {
    fn namespace(&self) -> &str;
    fn name(&self) -> &str;
}

impl Hash for dyn Named + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.namespace(), self.name()).hash(state);
    }
}

impl PartialEq for dyn Named + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name() && self.namespace() == other.namespace()
    }
}

impl Eq for dyn Named + '_ {}

impl Named for ObjectRef<Tenant> {
    fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.name.as_str()
    }
}

/// A tenant's namespace and name, borrowed: a lookup by a name read elsewhere (a node's entry).
#[derive(Clone, Copy, Debug)]
pub struct NameRef<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
}

impl Named for NameRef<'_> {
    fn namespace(&self) -> &str {
        self.namespace
    }

    fn name(&self) -> &str {
        self.name
    }
}

/// A cached tenant's name, shared (as [`TenantKey`]) by the cache and whoever queues it.
#[derive(Debug)]
pub struct TenantName {
    namespace: Arc<str>,
    name: Name,
}

/// The longest name held inline: with its length and the variant's tag, a [`Name`] is 24 bytes
/// (a boxed name's pointer and length take 16 of them).
const INLINE: usize = 22;

/// A name, inline when short (most are: no allocation of its own, 32 bytes less per tenant
/// with malloc's rounding), boxed otherwise.
#[derive(Debug)]
enum Name {
    Inline { len: u8, bytes: [u8; INLINE] },
    Boxed(Box<str>),
}

impl Name {
    fn new(name: &str) -> Name {
        let mut bytes = [0; INLINE];
        match (bytes.get_mut(..name.len()), u8::try_from(name.len())) {
            (Some(room), Ok(len)) => {
                room.copy_from_slice(name.as_bytes());
                Name::Inline { len, bytes }
            }
            _ => Name::Boxed(Box::from(name)),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // Copied from a `&str` whole: always UTF-8.
            Name::Inline { len, bytes } => bytes
                .get(..usize::from(*len))
                .and_then(|text| std::str::from_utf8(text).ok())
                .unwrap_or_default(),
            Name::Boxed(name) => name,
        }
    }
}

/// A cached tenant's key.
pub type TenantKey = Arc<TenantName>;

impl TenantName {
    pub fn new(namespace: Arc<str>, name: &str) -> Self {
        TenantName {
            namespace,
            name: Name::new(name),
        }
    }

    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The tenant's reference (name and namespace only).
    pub fn to_ref(&self) -> ObjectRef<Tenant> {
        ObjectRef::new(self.name.as_str()).within(&self.namespace)
    }
}

impl Named for TenantName {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn name(&self) -> &str {
        self.name.as_str()
    }
}

impl Named for TenantKey {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn name(&self) -> &str {
        self.name.as_str()
    }
}

// NB: hashed and compared exactly as `dyn Named`, so that `Borrow` below is sound.
impl Hash for TenantName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn Named).hash(state);
    }
}

impl PartialEq for TenantName {
    fn eq(&self, other: &Self) -> bool {
        (self as &dyn Named) == (other as &dyn Named)
    }
}

impl Eq for TenantName {}

impl<'a> Borrow<dyn Named + 'a> for TenantKey {
    fn borrow(&self) -> &(dyn Named + 'a) {
        self.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_key_is_found_by_the_reference_of_the_same_name_and_namespace() {
        let key: TenantKey = Arc::new(TenantName::new(Arc::from("default"), "acme"));
        let keys = HashSet::from([key.clone()]);
        let same: &dyn Named = &ObjectRef::<Tenant>::new("acme").within("default");
        let other_namespace: &dyn Named = &ObjectRef::<Tenant>::new("acme").within("prod");
        let other_name: &dyn Named = &ObjectRef::<Tenant>::new("acm").within("default");
        assert!(keys.contains(same));
        assert!(!keys.contains(other_namespace));
        assert!(!keys.contains(other_name));
        assert_eq!(key.to_ref(), ObjectRef::new("acme").within("default"));
    }

    #[test]
    fn a_name_is_told_back_whole_inline_or_boxed() {
        let long = "x".repeat(253);
        for name in [
            "",
            "a",
            "tenant-000001",
            "exactly-twenty-two-chr",
            "twenty-three-characters",
            "ünïcödé-tenant",
            &long,
        ] {
            let key = TenantName::new(Arc::from("ns"), name);
            assert_eq!(key.name(), name);
            assert_eq!(
                matches!(key.name, Name::Inline { .. }),
                name.len() <= INLINE,
                "{name}"
            );
        }
        assert_eq!(std::mem::size_of::<Name>(), 24);
    }
}
