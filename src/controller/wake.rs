//! The wake loop: after a node changed, one pass of the waiting room per requeue window at most,
//! waking the waiting tenants a changed node could take and the tenants whose claims their nodes
//! do not back (see `state::waiting` and `state::claims` for the rules).

use std::sync::Arc;

use super::engine::Engine;
use super::state::claims::Claims;
use super::state::{TenantCache, WaitingRoom};

/// What the wake loop reads: the waiting room and claims it judges, through the engine's view.
#[derive(Debug)]
pub struct WakeLoop {
    pub waiting: Arc<WaitingRoom>,
    pub claims: Arc<Claims>,
    pub engine: Arc<Engine>,
    pub tenants: TenantCache,
    /// At least this long between two passes.
    pub requeue_window: std::time::Duration,
}

/// Runs the wake loop: wait for a change, judge the changed nodes as the engine sees them, wake
/// who they could take and whose claims they do not back (see `claims`), then let at least one
/// requeue window pass before the next.
pub async fn run(ctx: WakeLoop) {
    loop {
        let changed = ctx.waiting.next_changes().await;
        if ctx.engine.synced().wait().await.is_err() {
            return;
        }
        let ledgers = ctx.engine.ledgers(changed.as_ref());
        let woken = ctx.waiting.pass(&ledgers);
        if woken > 0 {
            tracing::debug!(woken, nodes = ledgers.len(), "room for waiting tenants");
        }
        // The same window serves the claims: statuses their nodes do not back.
        for tenant in ctx
            .claims
            .unbacked(&ctx.tenants, |node| ctx.engine.node(node))
        {
            tracing::debug!(tenant = %tenant, "status and node disagree: woken");
            ctx.waiting.wake(tenant);
        }
        tokio::time::sleep(ctx.requeue_window).await;
    }
}
