//! What the capacity tick reads and writes through: its handles, built once by the wiring.

use std::sync::Arc;

use super::memory::Memory;
use crate::controller::consolidation;
use crate::controller::engine::Engine;
use crate::controller::publisher::EventPublisher;
use crate::controller::settings::Settings;
use crate::controller::state::tick::Published;
use crate::controller::state::{PurchaseNotes, RoomOrders, Synced, TenantCache, WaitingRoom};
use crate::metrics::Metrics;

/// What the capacity tick reads and writes through.
pub struct CapacityLoop {
    pub client: kube::Client,
    /// The placement engine: its view of the nodes (what a machine holds).
    pub engine: Arc<Engine>,
    /// The tenant watch cache: who waits.
    pub tenants: TenantCache,
    /// Raised once the tenant cache holds its first full list.
    pub tenants_synced: Synced,
    /// Tenants waiting for room: one whose note changed is woken.
    pub waiting: Arc<WaitingRoom>,
    /// What the loop remembers between looks (the request watch feeds it too).
    pub memory: Arc<Memory>,
    /// What each waiting tenant's status adds (the tenant loop reads them).
    pub notes: Arc<PurchaseNotes>,
    /// What consolidation remembers between looks.
    pub consolidation: Arc<consolidation::Memory>,
    /// The room being made by moves (`None`: make-room is off).
    pub orders: Option<Arc<RoomOrders>>,
    /// The last tick's view, for readers (the page).
    pub published: Arc<Published>,
    /// Publishes Kubernetes Events; `None` publishes nothing.
    pub events: Option<EventPublisher>,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
}

impl std::fmt::Debug for CapacityLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapacityLoop")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}
