//! What the last capacity tick saw, published for readers (the page): the machines of each class
//! by use, the Nodes labelled for a request that is not theirs, what each class delivers, the
//! nodes consolidation keeps and why, what it saved, and the room being made. Readers get a
//! shared copy and never reach into a loop's memory.
//!
//! Rules enforced here:
//! - a view is whole: one tick's, replaced at the end of the next (never edited in place);
//! - every list is in name order, so two views of the same fleet compare equal.

use std::sync::{Arc, Mutex, PoisonError};

use placement::Resources;

use super::orders::Order;

/// One tick's view.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TickView {
    /// The machines of each class of the pool, by use (every class, zeros included).
    pub machines: Vec<ClassMachines>,
    /// Nodes labelled as made for a live request that does not own them (never handed back).
    pub strays: Vec<StrayNode>,
    /// Nodes the consolidation plan could free that are not being drained, and why.
    pub kept: Vec<KeptNode>,
    /// The monthly cost of the nodes consolidation handed back since this process started.
    pub saved_monthly: u64,
    /// Room being made for waiting tenants by moves.
    pub orders: Vec<Order>,
}

/// Readers key what they show on it: an order counts by its waiter, host and number of moves.
impl std::hash::Hash for TickView {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (&self.machines, &self.strays, &self.kept, self.saved_monthly).hash(state);
        for order in &self.orders {
            (&order.waiter, &order.host, order.moves.len()).hash(state);
        }
    }
}

/// The machines of one class, by what each is used for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClassMachines {
    pub class: String,
    /// Asked for, not yet a Node.
    pub awaited: u32,
    pub in_use: u32,
    pub idle: u32,
    /// Ready, but no Node is there.
    pub orphaned: u32,
    /// The smallest capacity the class's Nodes report, when it is less than it promises.
    pub delivers_less: Option<Resources>,
}

/// A Node whose label names a request that does not own it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StrayNode {
    pub node: String,
    pub labelled_for: String,
}

/// A node consolidation could free and keeps.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeptNode {
    pub node: String,
    /// The reason as Events and the metric name it (`BudgetExhausted`, …).
    pub reason: &'static str,
    /// Why, in words.
    pub why: &'static str,
    /// How long the plan had been able to free it at the tick, in whole seconds.
    pub freeable_seconds: u64,
}

/// The last view published, shared between the tick (which writes it) and readers.
#[derive(Debug, Default)]
pub struct Published(Mutex<Option<Arc<TickView>>>);

impl Published {
    /// Replaces the view.
    pub fn set(&self, view: TickView) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(view));
    }

    /// The last view, once a tick has run.
    pub fn get(&self) -> Option<Arc<TickView>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
