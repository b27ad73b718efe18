//! A watch cache's first full list, as a flag any number of tasks can await.

use tokio::sync::watch;

use crate::error::Error;

/// Whether a watch cache has synced, awaitable by any number of tasks at once. The reflector
/// raises it when its first list is complete.
// NB: never await `Store::wait_until_ready` on a controller's store: it wakes only the task that
// polled it last (a oneshot inside), and the Controller itself awaits it before reconciling, so a
// second waiter can leave the Controller asleep for good.
#[derive(Clone, Debug)]
pub struct Synced {
    ready: watch::Receiver<bool>,
}

impl Synced {
    /// A flag and its view; send `true` once the cache holds its first full list.
    pub fn flag() -> (watch::Sender<bool>, Synced) {
        let (raise, ready) = watch::channel(false);
        (raise, Synced { ready })
    }

    /// A cache that is synced from the start (tests that fill a store by hand).
    pub fn already() -> Synced {
        let (raise, synced) = Synced::flag();
        let _ = raise.send(true);
        synced
    }

    pub fn is_synced(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits until the cache has synced; fails if it never can (its reflector is gone).
    pub async fn wait(&self) -> Result<(), Error> {
        if self.is_synced() {
            return Ok(());
        }
        let mut ready = self.ready.clone();
        ready
            .wait_for(|synced| *synced)
            .await
            .map(|_| ())
            .map_err(|_| Error::CacheClosed)
    }
}
