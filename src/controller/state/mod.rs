//! What the controller knows between reconciles: the watch caches and how objects enter them
//! (decode, strip, the tenant cache), copies newer than the cache (newest), what each tenant's
//! status claims (claims), who waits for room (waiting), what a waiting tenant's status says
//! about machines (notes), the room being made for waiters by moves (room) and the last capacity
//! tick's view for readers (tick). It knows no loop and no engine: the
//! loops and the engine read and feed it (`tests/layers.rs` keeps it so).

pub mod claims;
pub mod decode;
pub mod newest;
pub mod notes;
pub mod orders;
pub mod strip;
mod synced;
pub mod tenant_cache;
pub mod tick;
pub mod waiting;

pub use notes::PurchaseNotes;
pub use orders::RoomOrders;
pub use synced::Synced;
pub use tenant_cache::{Glance, TenantCache, TenantKey};
pub use waiting::WaitingRoom;

/// Gives back a hash map's room once it holds under a quarter of it: maps that fill with every
/// tenant at start-up (all due, all written at once) would otherwise keep that room for good
/// (4 MB a map at 100,000 tenants). Shrinks to twice what is held, so the work is amortized:
/// shrinking again needs the map to lose most of what it then holds.
pub fn give_back_room<K, V, S>(map: &mut std::collections::HashMap<K, V, S>)
where
    K: Eq + std::hash::Hash,
    S: std::hash::BuildHasher,
{
    /// Small maps are not worth the work.
    const SMALL: usize = 1024;
    if map.capacity() > SMALL && map.len() < map.capacity() / 4 {
        map.shrink_to(map.len().saturating_mul(2));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    #[test]
    fn a_map_gives_back_its_room_only_when_mostly_empty_and_large() {
        let mut map: HashMap<u32, u32> = (0..100_000).map(|i| (i, i)).collect();
        let full = map.capacity();
        map.retain(|k, _| *k < 30_000);
        // NB: removals may leave tombstones, which `capacity` no longer counts.
        let held = map.capacity();
        super::give_back_room(&mut map);
        assert_eq!(map.capacity(), held, "30 % held: kept");
        map.retain(|k, _| *k < 1_000);
        super::give_back_room(&mut map);
        assert!(map.capacity() < full / 16, "{} of {full}", map.capacity());
        assert!(map.capacity() >= 2_000);
        assert_eq!(map.len(), 1_000);
        let mut small: HashMap<u32, u32> = (0..500).map(|i| (i, i)).collect();
        let before = small.capacity();
        small.clear();
        super::give_back_room(&mut small);
        assert_eq!(small.capacity(), before, "small maps are left alone");
    }
}
