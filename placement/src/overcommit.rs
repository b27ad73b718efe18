//! Per-dimension overcommit: how much more than its physical capacity a node may promise.
//!
//! The second seed: CPU is time-shared, so 2–4x is common; memory risks OOM kills and stays
//! near 1.2x; thin-provisioned disk can go further than either. A ratio below 1 keeps headroom
//! back (0.9 promises 90% of the node).
//!
//! Rules enforced here:
//! - a ratio is an exact integer in thousandths (per mille: 1000 = 1.0), so every computation
//!   with it is integer arithmetic and the same on every machine;
//! - a ratio given as a float is rounded to the nearest thousandth and must be finite, greater
//!   than 0, at least [`Overcommit::MIN_RATIO`] and at most [`Overcommit::MAX_RATIO`];
//! - effective capacity = capacity × ratio, rounded down, computed in `u128` and capped at
//!   [`Resources::LIMIT`]: `8 threads × 1.25 = 10`, `3 GB × 1.5 = 4.5 → 4`;
//! - placement treats the effective capacity as the node's capacity: free room, eligibility (not
//!   holding more than the effective capacity), resize room and every policy's scores use it.
//!
//! Why at most 16x: the seed's most generous case is thin-provisioned disk, and 16x is already
//! past what operators run in practice; a larger value is far more likely a typo (a per-mille
//! amount given as a ratio, `1200` for `1.2`) than a wish, and promising 1,000x a node's memory is
//! not a placement anyone wants to compute. The bound also keeps every per-mille value below 2^14,
//! which the exact comparison of the policies' slack scores (policy.rs) relies on to stay within
//! its integer width.

use std::fmt;

use crate::resources::{Dimension, Resources};

/// A ratio per dimension, each an exact integer in thousandths (1000 = 1.0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Overcommit {
    threads: u32,
    memory_gb: u32,
    storage_gb: u32,
}

impl Default for Overcommit {
    /// No overcommit: 1.0 in every dimension.
    fn default() -> Self {
        Overcommit::NONE
    }
}

/// Why an overcommit ratio was refused. Every variant names the dimension.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OvercommitError {
    /// NaN or infinite.
    NotFinite { dimension: Dimension, ratio: f64 },
    /// Zero or negative.
    NotPositive { dimension: Dimension, ratio: f64 },
    /// Positive, but below [`Overcommit::MIN_RATIO`], the resolution ratios are kept in.
    BelowResolution { dimension: Dimension, ratio: f64 },
    /// Above [`Overcommit::MAX_RATIO`].
    TooLarge { dimension: Dimension, ratio: f64 },
}

impl OvercommitError {
    /// The dimension whose ratio was refused.
    pub fn dimension(&self) -> Dimension {
        match self {
            OvercommitError::NotFinite { dimension, .. }
            | OvercommitError::NotPositive { dimension, .. }
            | OvercommitError::BelowResolution { dimension, .. }
            | OvercommitError::TooLarge { dimension, .. } => *dimension,
        }
    }
}

impl fmt::Display for OvercommitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OvercommitError::NotFinite { dimension, ratio } => write!(
                f,
                "overcommit ratio for {dimension} must be a finite number, got {ratio}"
            ),
            OvercommitError::NotPositive { dimension, ratio } => write!(
                f,
                "overcommit ratio for {dimension} must be greater than 0, got {ratio}"
            ),
            OvercommitError::BelowResolution { dimension, ratio } => write!(
                f,
                "overcommit ratio for {dimension} must be at least 0.001 (ratios are kept in \
                 thousandths), got {ratio}"
            ),
            OvercommitError::TooLarge { dimension, ratio } => write!(
                f,
                "overcommit ratio for {dimension} must be at most {}, got {ratio}",
                Overcommit::MAX_RATIO
            ),
        }
    }
}

impl std::error::Error for OvercommitError {}

impl Overcommit {
    /// The largest ratio accepted (see the module doc for why).
    pub const MAX_RATIO: f64 = 16.0;
    /// The smallest ratio accepted: one thousandth, the resolution ratios are kept in.
    pub const MIN_RATIO: f64 = 0.001;
    /// [`Overcommit::MAX_RATIO`] in thousandths.
    pub const MAX_PER_MILLE: u32 = 16_000;
    /// A ratio of 1.0 in thousandths.
    pub const ONE_PER_MILLE: u32 = 1000;
    /// 1.0 in every dimension: the effective capacity is the capacity.
    pub const NONE: Overcommit = Overcommit {
        threads: Self::ONE_PER_MILLE,
        memory_gb: Self::ONE_PER_MILLE,
        storage_gb: Self::ONE_PER_MILLE,
    };

    /// Ratios as numbers (`4.0, 1.2, 1.0`), each rounded to the nearest thousandth.
    pub fn from_ratios(
        threads: f64,
        memory_gb: f64,
        storage_gb: f64,
    ) -> Result<Self, OvercommitError> {
        Ok(Overcommit {
            threads: per_mille_of(Dimension::Threads, threads)?,
            memory_gb: per_mille_of(Dimension::MemoryGb, memory_gb)?,
            storage_gb: per_mille_of(Dimension::StorageGb, storage_gb)?,
        })
    }

    /// Ratios in thousandths (`4000, 1200, 1000`), each between 1 and
    /// [`Overcommit::MAX_PER_MILLE`].
    pub fn from_per_mille(
        threads: u32,
        memory_gb: u32,
        storage_gb: u32,
    ) -> Result<Self, OvercommitError> {
        let check = |dimension: Dimension, per_mille: u32| {
            let ratio = f64::from(per_mille) / 1000.0;
            if per_mille == 0 {
                Err(OvercommitError::NotPositive { dimension, ratio })
            } else if per_mille > Self::MAX_PER_MILLE {
                Err(OvercommitError::TooLarge { dimension, ratio })
            } else {
                Ok(per_mille)
            }
        };
        Ok(Overcommit {
            threads: check(Dimension::Threads, threads)?,
            memory_gb: check(Dimension::MemoryGb, memory_gb)?,
            storage_gb: check(Dimension::StorageGb, storage_gb)?,
        })
    }

    /// The ratio of one dimension in thousandths (1000 = 1.0); always in `1..=MAX_PER_MILLE`.
    pub fn per_mille(&self, dimension: Dimension) -> u32 {
        match dimension {
            Dimension::Threads => self.threads,
            Dimension::MemoryGb => self.memory_gb,
            Dimension::StorageGb => self.storage_gb,
        }
    }

    /// The ratio of one dimension as a number, for people (`1.2`).
    pub fn ratio(&self, dimension: Dimension) -> f64 {
        f64::from(self.per_mille(dimension)) / 1000.0
    }

    /// True when every ratio is 1.0.
    pub fn is_none(&self) -> bool {
        *self == Overcommit::NONE
    }

    /// What placement may fill: capacity × ratio per dimension, rounded down, at most
    /// [`Resources::LIMIT`].
    pub fn effective(&self, capacity: Resources) -> Resources {
        Resources::from_fn(|d| scale_down(capacity.get(d), self.per_mille(d)))
    }
}

impl fmt::Display for Overcommit {
    /// `threads x4, memoryGb x1.2, storageGb x1`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for dimension in Dimension::ALL {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{dimension} x{}", self.ratio(dimension))?;
        }
        Ok(())
    }
}

/// `amount × per_mille / 1000`, rounded down, capped at the limit. The product is below
/// 2^64 × 2^32 and cannot overflow `u128`; the checked forms only keep that visible.
fn scale_down(amount: u64, per_mille: u32) -> u64 {
    let scaled = u128::from(amount)
        .checked_mul(u128::from(per_mille))
        .and_then(|product| product.checked_div(1000))
        .unwrap_or(u128::MAX);
    u64::try_from(scaled)
        .unwrap_or(u64::MAX)
        .min(Resources::LIMIT)
}

fn per_mille_of(dimension: Dimension, ratio: f64) -> Result<u32, OvercommitError> {
    if !ratio.is_finite() {
        return Err(OvercommitError::NotFinite { dimension, ratio });
    }
    if ratio <= 0.0 {
        return Err(OvercommitError::NotPositive { dimension, ratio });
    }
    if ratio > Overcommit::MAX_RATIO {
        return Err(OvercommitError::TooLarge { dimension, ratio });
    }
    // The same bound the CRD schema states, so a ratio the API accepts is one we accept.
    if ratio < Overcommit::MIN_RATIO {
        return Err(OvercommitError::BelowResolution { dimension, ratio });
    }
    // In [1, 16000]: the cast is exact after rounding.
    let per_mille = (ratio * 1000.0).round() as u32;
    Ok(per_mille.min(Overcommit::MAX_PER_MILLE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_kept_in_thousandths_rounded_to_nearest() {
        let o = Overcommit::from_ratios(4.0, 1.2, 1.0).ok();
        // 1.2 × 1000 = 1200.0000000000002 in f64, rounded to 1200.
        assert_eq!(o, Overcommit::from_per_mille(4000, 1200, 1000).ok());
        // 0.001 × 1000 = 1; 1.0004 × 1000 = 1000.4 → 1000; 1.0006 × 1000 = 1000.6 → 1001.
        let small = Overcommit::from_ratios(0.001, 1.0004, 1.0006).ok();
        assert_eq!(small, Overcommit::from_per_mille(1, 1000, 1001).ok());
        // 0.0005 would round to 1 thousandth, but the schema's minimum is 0.001: refused alike.
        assert!(Overcommit::from_ratios(0.0005, 1.0, 1.0).is_err());
    }

    #[test]
    fn effective_capacity_table() {
        struct Case {
            name: &'static str,
            overcommit: Overcommit,
            capacity: Resources,
            want: Resources,
        }
        let o = |t, m, s| Overcommit::from_per_mille(t, m, s).unwrap_or_default();
        let cases = [
            Case {
                // 64 × 4000 / 1000 = 256; 256 × 1200 / 1000 = 307.2 → 307; 8000 × 1 = 8000.
                name: "the seed's profile: CPU 4x, memory 1.2x, disk 1x",
                overcommit: o(4000, 1200, 1000),
                capacity: Resources::new(64, 256, 8000),
                want: Resources::new(256, 307, 8000),
            },
            Case {
                // 3 × 1500 / 1000 = 4.5 → 4; 7 × 1999 / 1000 = 13.993 → 13; 1 × 999 / 1000 → 0.
                name: "fractions round down",
                overcommit: o(1500, 1999, 999),
                capacity: Resources::new(3, 7, 1),
                want: Resources::new(4, 13, 0),
            },
            Case {
                // 10 × 900 / 1000 = 9: a ratio below 1 keeps headroom back.
                name: "undercommit keeps headroom",
                overcommit: o(900, 900, 900),
                capacity: Resources::new(10, 10, 10),
                want: Resources::new(9, 9, 9),
            },
            Case {
                // LIMIT × 16 overflows int64 (not u128): capped at LIMIT. LIMIT × 1 = LIMIT.
                name: "huge capacities are capped at the int64 limit",
                overcommit: o(16_000, 1000, 1),
                capacity: Resources::new(Resources::LIMIT, Resources::LIMIT, Resources::LIMIT),
                // LIMIT × 1 / 1000 = 9223372036854775807 / 1000 = 9223372036854775 (rounded down).
                want: Resources::new(Resources::LIMIT, Resources::LIMIT, 9_223_372_036_854_775),
            },
            Case {
                name: "no overcommit changes nothing",
                overcommit: Overcommit::NONE,
                capacity: Resources::new(5, 6, 7),
                want: Resources::new(5, 6, 7),
            },
        ];
        for case in cases {
            assert_eq!(
                case.overcommit.effective(case.capacity),
                case.want,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn bad_ratios_are_refused_naming_the_dimension() {
        assert_eq!(
            Overcommit::from_per_mille(1000, 16_500, 1000).err(),
            Some(OvercommitError::TooLarge {
                dimension: Dimension::MemoryGb,
                ratio: 16.5
            })
        );
        assert!(Overcommit::NONE.is_none());
        let half_again = Overcommit::from_per_mille(1000, 1000, 1500);
        assert!(half_again.is_ok_and(|o| !o.is_none()));
        let err = |t, m, s| Overcommit::from_ratios(t, m, s).err();
        assert_eq!(
            err(f64::NAN, 1.0, 1.0).map(|e| e.dimension()),
            Some(Dimension::Threads)
        );
        assert_eq!(
            err(1.0, 0.0, 1.0),
            Some(OvercommitError::NotPositive {
                dimension: Dimension::MemoryGb,
                ratio: 0.0
            })
        );
        assert_eq!(
            err(1.0, 1.0, 16.5).map(|e| e.to_string()),
            Some("overcommit ratio for storageGb must be at most 16, got 16.5".to_owned())
        );
        assert_eq!(
            err(1.0, -2.0, f64::INFINITY).map(|e| e.to_string()),
            Some("overcommit ratio for memoryGb must be greater than 0, got -2".to_owned())
        );
        assert_eq!(
            err(0.0004, 1.0, 1.0).map(|e| e.to_string()),
            Some(
                "overcommit ratio for threads must be at least 0.001 (ratios are kept in \
                 thousandths), got 0.0004"
                    .to_owned()
            )
        );
        assert!(Overcommit::from_ratios(16.0, 0.001, 1.0).is_ok());
        assert!(Overcommit::from_per_mille(16_001, 1000, 1000).is_err());
        assert!(Overcommit::from_per_mille(1000, 0, 1000).is_err());
    }

    #[test]
    fn display_reads_as_ratios() {
        let o = Overcommit::from_ratios(4.0, 1.2, 1.0).unwrap_or_default();
        assert_eq!(o.to_string(), "threads x4, memoryGb x1.2, storageGb x1");
    }
}
