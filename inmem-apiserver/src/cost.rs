//! An apiserver cost model: what a write costs the server, and how many it can serve a second.
//!
//! A real API server spends CPU on every write (decoding, admission, validation, the etcd
//! round trip, encoding, watch fan-out), most of it in proportion to the bytes the write
//! handles. This model reproduces that bottleneck:
//!
//! - every write request (create, update, patch, delete), including one that ends in 409
//!   Conflict or 422, takes the next free slot of a schedule, first come first served;
//! - its service time is `per_write` plus `per_kib` for every 1,024 bytes it handles (the request
//!   body, the stored object before and after, the watch lines sent: see
//!   [`crate::ByteCounts`]); it is answered that long after its slot starts, so even an idle
//!   server answers a write no sooner than that;
//! - slots are `1 / writes_per_second` apart, or the service time divided by `cores` (the
//!   CPU cores the server keeps busy), whichever is longer (0 turns either cap off);
//! - reads and watches cost nothing (the real server serves them from its watch cache).
//!
//! The bytes a write handles are known only once it has run, and its slot is taken before: the
//! slot is sized from an estimate (the request body, the stored object before, after as large as
//! the body for a create or update and as before for a patch, and that once per watch of the
//! resource), then the schedule moves by the difference once the write has run, so that the
//! server's busy time adds up to the bytes actually handled.
//!
//! Slots are handed out under one lock, so concurrent writers queue in arrival order, as they
//! do for a saturated server's CPU.
//!
//! # Calibration ([`CostModel::REAL_1_36_TWO_CORE`])
//!
//! A real kube-apiserver 1.36 on 2 cores shared with etcd and the controller (issue #33) placed
//! a 5,000-tenant / 500-node backlog (the chart installed, objects created by
//! `kubectl apply --server-side`) at 321, 326 and 356 tenants per second, median 326, at 1.16
//! writes per placement, with 1.58 cores busy: 1.58 / 326 = 4.85 ms of server CPU per placement
//! (4.18 ms per write). Its profile puts about 70 % of a write in work that grows with the bytes
//! (decoding the stored object and the patch, JSON encoding, managedFields, garbage collection,
//! encoding watch events) and 30 % in fixed work (HTTP, TLS, etcd, admission).
//!
//! The same backlog in the in-memory API (`cargo bench --bench end_to_end -- --nodes 500
//! --tenants 5000 --pending 0 --quiet-seconds 0 --backlog --server-side-apply`, the controller
//! of commit 508177e) takes 1.07 writes and about 5,200 bytes per placement (660 of request
//! bodies, 2,700 of stored objects before and after, 1,830 of watch lines; 4,850 per write). The
//! model keeps `cores` at the 1.58 busy and splits the CPU per placement 30 / 70: `per_write` is
//! 30 % of it over 1.07 writes, `per_kib` 70 % of it over 5.08 KiB. The CPU per placement is
//! 4.75 ms rather than 4.85: the bench keeps the model's cores busy about 98 % of the time (a
//! first run at 4.68 ms placed 330 and 331 per second, where 1.58 cores allow 338), so 4.75 ms
//! should place 326 per second. Hence 1.33 ms per write and 654 µs per KiB (0.64 µs per byte):
//! 4.43 ms for the bench's average write, against the real server's 4.18 ms at 1.16 writes per
//! placement (the real server's bytes per write are not known: the bench's bytes stand for
//! them). With it, three runs placed 321, 323 and 323 per second (330 to 334 from the first
//! placement to the last), three more beside another bench on the second core 315, 321 and 320
//! (329 to 331), at 1.07 writes and 5,174 to 5,220 bytes per placement (docs/performance.md,
//! "Bytes per placement").

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What each write costs and how many the server serves per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// The fixed time a write takes to be served once its turn comes.
    pub per_write: Duration,
    /// The most writes started per second (0 means no such cap).
    pub writes_per_second: u32,
    /// The time each 1,024 bytes the write handles add to its service time.
    pub per_kib: Duration,
    /// The CPU cores serving writes: slots are the service time divided by this apart (0 means
    /// no such cap, as for a non-positive or non-finite value).
    pub cores: f64,
}

impl CostModel {
    /// About what a real 2-core control plane costs, by writes only: 3 ms per write, 550
    /// writes per second, whatever their size.
    pub const REAL_TWO_CORE: CostModel = CostModel {
        per_write: Duration::from_millis(3),
        writes_per_second: 550,
        per_kib: Duration::ZERO,
        cores: 0.0,
    };

    /// A real kube-apiserver 1.36 on 2 cores shared with etcd and the controller, by writes and
    /// bytes: calibrated on the backlog bench (see the module docs) so that it reproduces the
    /// real server's 326 placements per second.
    pub const REAL_1_36_TWO_CORE: CostModel = CostModel {
        per_write: Duration::from_micros(PER_WRITE_US),
        writes_per_second: 0,
        per_kib: Duration::from_nanos(PER_KIB_NS),
        cores: 1.58,
    };

    /// A model charging `per_write` per write, at most `writes_per_second`, bytes free.
    pub const fn per_write(per_write: Duration, writes_per_second: u32) -> CostModel {
        CostModel {
            per_write,
            writes_per_second,
            per_kib: Duration::ZERO,
            cores: 0.0,
        }
    }

    /// How long a write handling `bytes` takes to be served.
    pub fn service(&self, bytes: u64) -> Duration {
        let by_bytes = self
            .per_kib
            .as_nanos()
            .checked_mul(u128::from(bytes))
            .map(|n| n.checked_div(1024).unwrap_or(0))
            .and_then(|n| u64::try_from(n).ok())
            .map_or(Duration::MAX, Duration::from_nanos);
        self.per_write.saturating_add(by_bytes)
    }

    /// How far apart the slots of writes handling `bytes` are.
    fn spacing(&self, bytes: u64) -> Duration {
        let by_rate = match self.writes_per_second {
            0 => Duration::ZERO,
            rate => Duration::from_secs(1)
                .checked_div(rate)
                .unwrap_or(Duration::ZERO),
        };
        let by_cores = if self.cores.is_finite() && self.cores > 0.0 {
            // In whole nanoseconds, rounded (an `as` cast from f64 saturates).
            let nanos = (self.service(bytes).as_nanos() as f64 / self.cores).round();
            Duration::from_nanos(nanos as u64)
        } else {
            Duration::ZERO
        };
        by_rate.max(by_cores)
    }

    /// Whether the bytes a write handles change what it costs.
    pub fn charges_bytes(&self) -> bool {
        !self.per_kib.is_zero()
    }
}

/// [`CostModel::REAL_1_36_TWO_CORE`]'s fixed part, in microseconds (see the module docs).
const PER_WRITE_US: u64 = 1_330;
/// [`CostModel::REAL_1_36_TWO_CORE`]'s part per KiB, in nanoseconds (see the module docs).
const PER_KIB_NS: u64 = 654_000;

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

    /// Takes the next slot at or after `now` for a write expected to handle `bytes`, and says
    /// when the write is served, if a model is set.
    pub fn admit(&self, now: Instant, bytes: u64) -> Option<Instant> {
        let mut state = self.lock();
        let (model, next_free) = state.as_mut()?;
        let start = (*next_free).max(now);
        *next_free = start.checked_add(model.spacing(bytes)).unwrap_or(start);
        Some(start.checked_add(model.service(bytes)).unwrap_or(start))
    }

    /// A write admitted for `expected` bytes handled `actual`: the schedule moves by the
    /// difference of their slots, so that the busy time adds up to the bytes handled.
    pub fn settle(&self, expected: u64, actual: u64) {
        let mut state = self.lock();
        let Some((model, next_free)) = state.as_mut() else {
            return;
        };
        let (was, is) = (model.spacing(expected), model.spacing(actual));
        let moved = if is >= was {
            next_free.checked_add(is.saturating_sub(was))
        } else {
            next_free.checked_sub(was.saturating_sub(is))
        };
        if let Some(moved) = moved {
            *next_free = moved;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn writes_are_spaced_by_the_rate_and_served_after_their_cost() {
        let schedule = WriteSchedule::default();
        assert_eq!(schedule.admit(Instant::now(), 0), None, "no model, no cost");
        schedule.set(Some(CostModel::per_write(Duration::from_millis(3), 500)));
        let now = Instant::now();
        let served: Vec<Duration> = (0..4)
            .map(|_| schedule.admit(now, 10_000).unwrap().duration_since(now))
            .collect();
        // Slots 2 ms apart (500/s), each served 3 ms into its slot; bytes are free.
        assert_eq!(
            served,
            [3, 5, 7, 9].map(Duration::from_millis),
            "four writes arriving together queue behind each other"
        );
        // A write arriving after the queue drained starts at once.
        let later = now + Duration::from_secs(1);
        assert_eq!(
            schedule.admit(later, 0).unwrap().duration_since(later),
            Duration::from_millis(3)
        );
    }

    #[test]
    fn a_rate_of_zero_costs_only_the_per_write_time() {
        let schedule = WriteSchedule::default();
        schedule.set(Some(CostModel::per_write(Duration::from_millis(1), 0)));
        let now = Instant::now();
        for _ in 0..3 {
            assert_eq!(
                schedule.admit(now, 0).unwrap().duration_since(now),
                Duration::from_millis(1)
            );
        }
    }

    /// 1 ms fixed, 1 ms per KiB, 2 cores.
    fn by_bytes() -> CostModel {
        CostModel {
            per_write: Duration::from_millis(1),
            writes_per_second: 0,
            per_kib: Duration::from_millis(1),
            cores: 2.0,
        }
    }

    #[test]
    fn the_service_time_grows_with_the_bytes() {
        let model = by_bytes();
        for (bytes, us) in [
            (0, 1000),
            (512, 1500),
            (1024, 2000),
            (3072, 4000),
            (1, 1000),
        ] {
            assert_eq!(
                model.service(bytes),
                Duration::from_micros(us) + Duration::from_nanos(if bytes == 1 { 976 } else { 0 }),
                "{bytes} bytes"
            );
        }
        for (bytes, us) in [(0, 500), (512, 750), (1024, 1000), (3072, 2000)] {
            assert_eq!(
                model.spacing(bytes),
                Duration::from_micros(us),
                "{bytes} bytes on 2 cores"
            );
        }
        assert_eq!(
            CostModel::REAL_TWO_CORE.service(1 << 20),
            Duration::from_millis(3)
        );
        assert_eq!(
            CostModel::per_write(Duration::ZERO, 0).spacing(1 << 20),
            Duration::ZERO,
            "no rate, no cores: no queue"
        );
        assert_eq!(
            CostModel {
                cores: f64::NAN,
                ..by_bytes()
            }
            .spacing(1024),
            Duration::ZERO
        );
    }

    #[test]
    fn the_calibrated_model_says_what_its_docs_say() {
        let real = CostModel::REAL_1_36_TWO_CORE;
        // The bench's average write, 4,850 bytes: 1.33 ms + 4.74 KiB at 654 µs = 4.43 ms.
        let write = real.service(4850).as_secs_f64() * 1e3;
        assert!((write - 4.43).abs() < 0.005, "{write} ms");
        // A placement, 1.07 writes and 5,200 bytes: 4.75 ms, 1.58 cores place 333 per second
        // at most, 326 at the bench's 98 %.
        let placement = 1.07 * real.per_write.as_secs_f64() * 1e3
            + 5200.0 / 1024.0 * real.per_kib.as_secs_f64() * 1e3;
        assert!((placement - 4.745).abs() < 0.005, "{placement} ms");
        let rate = real.cores / placement * 1e3;
        assert!((0.98 * rate - 326.0).abs() < 1.0, "{rate} per second");
    }

    #[test]
    fn the_rate_cap_and_the_cores_take_the_longer_spacing() {
        let model = CostModel {
            writes_per_second: 1000,
            ..by_bytes()
        };
        // 1 ms per write by rate; 0.5 ms on 2 cores for an empty write, 2 ms for 3 KiB.
        assert_eq!(model.spacing(0), Duration::from_millis(1));
        assert_eq!(model.spacing(3072), Duration::from_millis(2));
    }

    #[test]
    fn slots_on_cores_are_spaced_by_each_writes_bytes() {
        let schedule = WriteSchedule::default();
        schedule.set(Some(by_bytes()));
        let now = Instant::now();
        // (bytes, served after, in µs): slots start at 0, 0.5 ms (after 1 ms / 2 cores), 2.5
        // (after 4 ms / 2), 3.5 (after 2 ms / 2).
        let table = [(0, 1000), (3072, 4500), (1024, 4500), (0, 4500)];
        for (bytes, us) in table {
            assert_eq!(
                schedule.admit(now, bytes).unwrap().duration_since(now),
                Duration::from_micros(us),
                "{bytes} bytes"
            );
        }
    }

    #[test]
    fn settling_moves_the_next_slot_by_the_difference() {
        let schedule = WriteSchedule::default();
        schedule.set(Some(by_bytes()));
        let now = Instant::now();
        let slot_after = |schedule: &WriteSchedule| {
            // A write of 0 bytes is served 1 ms into its slot.
            schedule
                .admit(now, 0)
                .unwrap()
                .duration_since(now)
                .saturating_sub(Duration::from_millis(1))
        };
        schedule.admit(now, 1024); // slot 0, the next at 1 ms
        schedule.settle(1024, 3072); // it handled 2 KiB more: the next at 2 ms
        assert_eq!(slot_after(&schedule), Duration::from_millis(2));
        // The 0-byte write's slot ends at 2.5 ms; it handled nothing more.
        schedule.settle(0, 0);
        schedule.admit(now, 2048); // slot at 2.5 ms, the next at 4 ms
        schedule.settle(2048, 0); // it handled 2 KiB less: the next at 3 ms
        assert_eq!(slot_after(&schedule), Duration::from_millis(3));
        // No model: nothing to settle.
        let free = WriteSchedule::default();
        free.settle(0, 1 << 20);
        assert_eq!(free.admit(now, 0), None);
    }
}
