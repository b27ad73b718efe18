//! What the capacity tick reads and writes through: its handles, built once by the wiring.

use std::sync::Arc;
use std::time::Duration;

use super::memory::Memory;
use crate::api::LabelSelector;
use crate::controller::consolidation;
use crate::controller::disruption::Limits;
use crate::controller::engine::Engine;
use crate::controller::publisher::EventPublisher;
use crate::controller::settings::Settings;
use crate::controller::state::tick::Published;
use crate::controller::state::{PurchaseNotes, RoomOrders, Synced, TenantCache, WaitingRoom};
use crate::metrics::Metrics;

/// What the capacity tick reads of the settings, taken once by the wiring.
#[derive(Clone, Debug)]
pub struct CapacitySettings {
    /// How often the tick runs.
    pub every: Duration,
    /// A first placement waits this long in `PendingCapacity` before a machine is bought for it.
    pub request_after: Duration,
    /// The queue's order, which the purchase follows.
    pub queue: placement::QueueMode,
    /// How the planner puts the waiting tenants on the machines it buys.
    pub policy: placement::Policy,
    /// A bought machine that has held nothing this long is handed back.
    pub empty_node_after: Duration,
    /// The pool's Nodes: the classes and requests of the pool.
    pub pool_nodes: Option<LabelSelector>,
    /// Tenants moved at most to make room for one waiter (0: make-room is off).
    pub make_room_moves: u16,
    /// What consolidation does, and what hands back empty machines.
    pub consolidation: consolidation::ConsolidationSettings,
    /// The disruption budget and windows, for make-room and consolidation alike.
    pub limits: Limits,
}

impl CapacitySettings {
    /// The tick's settings; `None` when nothing is bought (`request_after` unset).
    pub fn of(settings: &Settings) -> Option<Self> {
        Some(CapacitySettings {
            every: settings.request_check,
            request_after: settings.request_after?,
            queue: settings.queue,
            policy: settings.policy,
            empty_node_after: settings.empty_node_after,
            pool_nodes: settings.pool_nodes.clone(),
            make_room_moves: settings.make_room_moves_in_force(),
            consolidation: consolidation::ConsolidationSettings::from(settings),
            limits: settings.disruption_limits(),
        })
    }
}

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
    pub settings: CapacitySettings,
}

impl std::fmt::Debug for CapacityLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapacityLoop")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}
