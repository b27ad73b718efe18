//! Resource amounts in the three dimensions the seeds name: threads, memory (GB), storage (GB).
//!
//! Rules enforced here:
//! - every amount is a whole number between 0 and [`Resources::LIMIT`] (the largest Kubernetes
//!   `int64`), so any amount computed here can be written back into an API object;
//! - adding and multiplying are checked: past the limit the answer is `None`, never a wrap;
//! - free headroom subtracts with saturation: a node holding more than its capacity has 0 free.

use std::fmt;

/// One of the three dimensions a tenant asks for and a node offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dimension {
    Threads,
    MemoryGb,
    StorageGb,
}

impl Dimension {
    /// All dimensions, in the order they are reported.
    pub const ALL: [Dimension; 3] = [
        Dimension::Threads,
        Dimension::MemoryGb,
        Dimension::StorageGb,
    ];

    /// The field name used in the API (`threads`, `memoryGb`, `storageGb`).
    pub fn field_name(self) -> &'static str {
        match self {
            Dimension::Threads => "threads",
            Dimension::MemoryGb => "memoryGb",
            Dimension::StorageGb => "storageGb",
        }
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.field_name())
    }
}

/// An amount of each dimension: a request, a capacity, an allocation or free headroom.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    pub threads: u64,
    pub memory_gb: u64,
    pub storage_gb: u64,
}

impl Resources {
    /// The largest amount in any dimension: Kubernetes stores integers as `int64`.
    pub const LIMIT: u64 = i64::MAX as u64;

    pub const ZERO: Resources = Resources::new(0, 0, 0);

    pub const fn new(threads: u64, memory_gb: u64, storage_gb: u64) -> Self {
        Resources {
            threads,
            memory_gb,
            storage_gb,
        }
    }

    /// The amount in one dimension.
    pub fn get(&self, dimension: Dimension) -> u64 {
        match dimension {
            Dimension::Threads => self.threads,
            Dimension::MemoryGb => self.memory_gb,
            Dimension::StorageGb => self.storage_gb,
        }
    }

    /// Builds resources from one function per dimension.
    pub fn from_fn(mut amount: impl FnMut(Dimension) -> u64) -> Self {
        Resources::new(
            amount(Dimension::Threads),
            amount(Dimension::MemoryGb),
            amount(Dimension::StorageGb),
        )
    }

    /// Combines two amounts dimension by dimension; `None` as soon as one dimension fails.
    fn try_zip(self, other: Self, op: impl Fn(u64, u64) -> Option<u64>) -> Option<Self> {
        Some(Resources::new(
            op(self.threads, other.threads)?,
            op(self.memory_gb, other.memory_gb)?,
            op(self.storage_gb, other.storage_gb)?,
        ))
    }

    /// `self + other`, or `None` past [`Resources::LIMIT`] in any dimension.
    pub fn checked_add(self, other: Self) -> Option<Self> {
        self.try_zip(other, |a, b| {
            a.checked_add(b).filter(|sum| *sum <= Self::LIMIT)
        })
    }

    /// `self × factor` in every dimension, or `None` past [`Resources::LIMIT`].
    pub fn checked_mul(self, factor: u64) -> Option<Self> {
        let scale = Resources::new(factor, factor, factor);
        self.try_zip(scale, |a, b| {
            a.checked_mul(b).filter(|product| *product <= Self::LIMIT)
        })
    }

    /// `self ÷ divisor` in every dimension, or `None` when the divisor is 0 or a dimension does
    /// not divide exactly (a share that is not whole was not written by an even split).
    pub fn checked_div(self, divisor: u64) -> Option<Self> {
        let scale = Resources::new(divisor, divisor, divisor);
        self.try_zip(scale, |a, b| {
            (a.checked_rem(b)? == 0).then(|| a.checked_div(b)).flatten()
        })
    }

    /// `self - other` per dimension, never below 0.
    pub fn saturating_sub(self, other: Self) -> Self {
        Resources::from_fn(|d| self.get(d).saturating_sub(other.get(d)))
    }

    /// The smaller of the two in each dimension.
    pub fn min_each(self, other: Self) -> Self {
        Resources::from_fn(|d| self.get(d).min(other.get(d)))
    }

    /// True when every dimension of `self` is at most the same dimension of `room`.
    pub fn fits_within(&self, room: &Self) -> bool {
        Dimension::ALL.iter().all(|d| self.get(*d) <= room.get(*d))
    }

    /// The sum of many amounts, or `None` past [`Resources::LIMIT`].
    pub fn checked_sum<'a>(amounts: impl IntoIterator<Item = &'a Resources>) -> Option<Self> {
        amounts
            .into_iter()
            .try_fold(Resources::ZERO, |total, next| total.checked_add(*next))
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} threads, {} GB memory, {} GB storage",
            self.threads, self.memory_gb, self.storage_gb
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_past_the_int64_limit_is_refused() {
        let near = Resources::new(Resources::LIMIT, 1, 1);
        assert_eq!(near.checked_add(Resources::new(1, 0, 0)), None);
        // LIMIT + 0 = LIMIT, still representable.
        assert_eq!(near.checked_add(Resources::ZERO), Some(near));
    }

    #[test]
    fn multiplying_past_the_int64_limit_is_refused_even_when_u64_would_hold_it() {
        // i64::MAX × 2 = 18446744073709551614 fits u64, not int64.
        let big = Resources::new(1, Resources::LIMIT, 1);
        assert_eq!(big.checked_mul(2), None);
        assert_eq!(
            Resources::new(2, 4, 20).checked_mul(2),
            Some(Resources::new(4, 8, 40))
        );
    }

    #[test]
    fn free_headroom_never_goes_below_zero() {
        // capacity 4 threads, holding 6 after a capacity cut: free is 0, not -2.
        let free = Resources::new(4, 10, 10).saturating_sub(Resources::new(6, 3, 10));
        assert_eq!(free, Resources::new(0, 7, 0));
    }

    #[test]
    fn fitting_needs_every_dimension() {
        let room = Resources::new(4, 8, 100);
        assert!(Resources::new(4, 8, 100).fits_within(&room));
        assert!(!Resources::new(1, 9, 1).fits_within(&room));
    }
}
