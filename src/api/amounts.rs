//! Amounts in the three dimensions as the API holds them: `int64` between 0 and
//! [`MAX_AMOUNT`]; conversion into placement's unsigned [`placement::Resources`] is checked and a
//! negative amount is an error that names its field.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The largest amount the API accepts, 2^53 - 1: JSON clients that read numbers as doubles
/// (kubectl's JSONPath, JavaScript) keep every amount up to it exact.
pub const MAX_AMOUNT: i64 = 9_007_199_254_740_991;

/// An amount in each of the three dimensions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceAmounts {
    /// CPU threads.
    #[schemars(range(min = 0, max = MAX_AMOUNT))]
    pub threads: i64,
    /// Memory, in whole gigabytes.
    #[schemars(range(min = 0, max = MAX_AMOUNT))]
    pub memory_gb: i64,
    /// Storage, in whole gigabytes.
    #[schemars(range(min = 0, max = MAX_AMOUNT))]
    pub storage_gb: i64,
}

/// An amount that cannot be used: negative, which only a hand edit or an old schema lets in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} is {value}; amounts must be whole numbers of at least 0")]
pub struct NegativeAmount {
    pub field: &'static str,
    pub value: i64,
}

impl ResourceAmounts {
    pub const fn new(threads: i64, memory_gb: i64, storage_gb: i64) -> Self {
        ResourceAmounts {
            threads,
            memory_gb,
            storage_gb,
        }
    }

    /// Checked conversion into placement's unsigned amounts.
    pub fn to_resources(&self) -> Result<placement::Resources, NegativeAmount> {
        let amount = |field: &'static str, value: i64| {
            u64::try_from(value).map_err(|_| NegativeAmount { field, value })
        };
        Ok(placement::Resources::new(
            amount("threads", self.threads)?,
            amount("memoryGb", self.memory_gb)?,
            amount("storageGb", self.storage_gb)?,
        ))
    }
}

impl From<placement::Resources> for ResourceAmounts {
    /// Placement amounts never exceed `i64::MAX` ([`placement::Resources::LIMIT`]).
    fn from(resources: placement::Resources) -> Self {
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        ResourceAmounts {
            threads: clamp(resources.threads),
            memory_gb: clamp(resources.memory_gb),
            storage_gb: clamp(resources.storage_gb),
        }
    }
}
