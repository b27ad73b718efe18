//! An apiserver cost model: what a write costs the server, and how many it can serve a second.
//!
//! A real API server spends CPU on every write (decoding, admission, validation, the etcd
//! round trip, encoding, watch fan-out): about 3 ms on a 2-core control plane, which then
//! sustains some 550 writes per second. This model reproduces that bottleneck:
//!
//! - every write request (create, update, patch, delete), including one that ends in 409
//!   Conflict or 422, takes the next free slot of a schedule that admits at most
//!   `writes_per_second` (slots are `1 / writes_per_second` apart, first come first served);
//! - it is served `per_write` after its slot starts, so even an idle server answers a write
//!   no sooner than that;
//! - reads and watches cost nothing (the real server serves them from its watch cache).
//!
//! Slots are handed out under one lock, so concurrent writers queue in arrival order, as they
//! do for a saturated server's CPU.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What each write costs and how many the server serves per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// The time a write takes to be served once its turn comes.
    pub per_write: Duration,
    /// The most writes started per second (0 means no cap).
    pub writes_per_second: u32,
}

impl CostModel {
    /// About what a real 2-core control plane costs: 3 ms per write, 550 writes per second.
    pub const REAL_TWO_CORE: CostModel = CostModel {
        per_write: Duration::from_millis(3),
        writes_per_second: 550,
    };

    fn spacing(&self) -> Duration {
        match self.writes_per_second {
            0 => Duration::ZERO,
            rate => Duration::from_secs(1)
                .checked_div(rate)
                .unwrap_or(Duration::ZERO),
        }
    }
}

/// The schedule of write slots.
#[derive(Debug, Default)]
pub(crate) struct WriteSchedule {
    state: Mutex<Option<(CostModel, Instant)>>,
}

impl WriteSchedule {
    pub fn set(&self, model: Option<CostModel>) {
        *self.lock() = model.map(|m| (m, Instant::now()));
    }

    pub fn model(&self) -> Option<CostModel> {
        self.lock().map(|(m, _)| m)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(CostModel, Instant)>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the next slot at or after `now` and says when the write is served, if a model is set.
    pub fn admit(&self, now: Instant) -> Option<Instant> {
        let mut state = self.lock();
        let (model, next_free) = state.as_mut()?;
        let start = (*next_free).max(now);
        *next_free = start.checked_add(model.spacing()).unwrap_or(start);
        Some(start.checked_add(model.per_write).unwrap_or(start))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn writes_are_spaced_by_the_rate_and_served_after_their_cost() {
        let schedule = WriteSchedule::default();
        assert_eq!(schedule.admit(Instant::now()), None, "no model, no cost");
        schedule.set(Some(CostModel {
            per_write: Duration::from_millis(3),
            writes_per_second: 500,
        }));
        let now = Instant::now();
        let served: Vec<Duration> = (0..4)
            .map(|_| schedule.admit(now).unwrap().duration_since(now))
            .collect();
        // Slots 2 ms apart (500/s), each served 3 ms into its slot.
        assert_eq!(
            served,
            [3, 5, 7, 9].map(Duration::from_millis),
            "four writes arriving together queue behind each other"
        );
        // A write arriving after the queue drained starts at once.
        let later = now + Duration::from_secs(1);
        assert_eq!(
            schedule.admit(later).unwrap().duration_since(later),
            Duration::from_millis(3)
        );
    }

    #[test]
    fn a_rate_of_zero_costs_only_the_per_write_time() {
        let schedule = WriteSchedule::default();
        schedule.set(Some(CostModel {
            per_write: Duration::from_millis(1),
            writes_per_second: 0,
        }));
        let now = Instant::now();
        for _ in 0..3 {
            assert_eq!(
                schedule.admit(now).unwrap().duration_since(now),
                Duration::from_millis(1)
            );
        }
    }
}
