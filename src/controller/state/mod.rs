//! What the controller knows between reconciles: the watch caches and how objects enter them
//! (decode, strip, the tenant cache), copies newer than the cache (newest), what each tenant's
//! status claims (claims), who waits for room (waiting), what a waiting tenant's status says
//! about machines (notes) and the room being made for waiters by moves (room). It knows no loop and no engine: the
//! loops and the engine read and feed it (`tests/layers.rs` keeps it so).

pub mod claims;
pub mod decode;
pub mod newest;
pub mod notes;
pub mod room;
pub mod strip;
mod synced;
pub mod tenant_cache;
pub mod waiting;

pub use notes::PurchaseNotes;
pub use room::RoomOrders;
pub use synced::Synced;
pub use tenant_cache::{Glance, TenantCache, TenantKey};
pub use waiting::WaitingRoom;
