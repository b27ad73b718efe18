//! What a core `v1/Node` offers, as placement amounts: `status.allocatable`'s `cpu` in whole
//! cores (one per thread), `memory` and `ephemeral-storage` in whole GiB, each rounded down, so
//! a placement Node never promises more than the kubelet gives.
//!
//! Rules enforced here:
//! - quantities are read with Kubernetes' own grammar (`32`, `31500m`, `128Gi`, `1e3`, `500G`)
//!   in exact integer arithmetic, checked: a value the types cannot hold, a negative one or one
//!   that does not parse is an error that names the resource, never a panic and never a guess;
//! - a resource the Node does not report counts as 0 (it offers none of it).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{MAX_AMOUNT, ResourceAmounts};

const GIB: u128 = 1 << 30;

/// A quantity that cannot be read as an amount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allocatable {resource} is {value:?}: {why}")]
pub struct BadQuantity {
    pub resource: &'static str,
    pub value: String,
    pub why: &'static str,
}

/// The placement capacity of a core Node whose `status.allocatable` is `allocatable`.
pub fn allocatable_capacity(
    allocatable: &BTreeMap<String, Quantity>,
) -> Result<ResourceAmounts, BadQuantity> {
    let amount = |resource: &'static str, unit: u128| -> Result<i64, BadQuantity> {
        let Some(Quantity(text)) = allocatable.get(resource) else {
            return Ok(0);
        };
        let bad = |why| BadQuantity {
            resource,
            value: text.clone(),
            why,
        };
        let (numerator, denominator) = parse(text).map_err(bad)?;
        let whole = denominator
            .checked_mul(unit)
            .and_then(|d| numerator.checked_div(d))
            .ok_or_else(|| bad("too large"))?;
        i64::try_from(whole)
            .ok()
            .filter(|v| *v <= MAX_AMOUNT)
            .ok_or_else(|| bad("too large"))
    };
    Ok(ResourceAmounts::new(
        amount("cpu", 1)?,
        amount("memory", GIB)?,
        amount("ephemeral-storage", GIB)?,
    ))
}

/// A quantity as the exact fraction `numerator / denominator`; negative values are refused
/// (no resource offers less than nothing).
fn parse(text: &str) -> Result<(u128, u128), &'static str> {
    let text = text.trim();
    let unsigned = text.strip_prefix('+').unwrap_or(text);
    if unsigned.starts_with('-') {
        return Err("negative");
    }
    let number_end = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err("not a number");
    }
    let too_large = "too large";
    let mut numerator: u128 = 0;
    for digit in whole.chars().chain(fraction.chars()) {
        let digit = digit.to_digit(10).ok_or("not a number")?;
        numerator = numerator
            .checked_mul(10)
            .and_then(|n| n.checked_add(u128::from(digit)))
            .ok_or(too_large)?;
    }
    let places = u32::try_from(fraction.len()).map_err(|_| too_large)?;
    let mut denominator = 10u128.checked_pow(places).ok_or(too_large)?;
    let scale = |n: u128, base: u128, power: u32| {
        base.checked_pow(power)
            .and_then(|f| n.checked_mul(f))
            .ok_or(too_large)
    };
    match suffix {
        "" => {}
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            let power = "KMGTPE"
                .find(&suffix[..1])
                .and_then(|at| at.checked_add(1))
                .ok_or("unknown suffix")?;
            numerator = scale(
                numerator,
                1024,
                u32::try_from(power).map_err(|_| too_large)?,
            )?;
        }
        "n" => denominator = scale(denominator, 10, 9)?,
        "u" => denominator = scale(denominator, 10, 6)?,
        "m" => denominator = scale(denominator, 10, 3)?,
        "k" | "M" | "G" | "T" | "P" | "E" => {
            let power = "kMGTPE"
                .find(suffix)
                .and_then(|at| at.checked_add(1))
                .ok_or("unknown suffix")?;
            numerator = scale(
                numerator,
                1000,
                u32::try_from(power).map_err(|_| too_large)?,
            )?;
        }
        exponent if exponent.starts_with(['e', 'E']) => {
            let power: i32 = exponent[1..].parse().map_err(|_| "unknown suffix")?;
            if power >= 0 {
                numerator = scale(numerator, 10, power.unsigned_abs())?;
            } else {
                denominator = scale(denominator, 10, power.unsigned_abs())?;
            }
        }
        _ => return Err("unknown suffix"),
    }
    Ok((numerator, denominator))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn capacity(pairs: &[(&str, &str)]) -> Result<ResourceAmounts, BadQuantity> {
        let allocatable = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect();
        allocatable_capacity(&allocatable)
    }

    #[test]
    fn each_quantity_form_reads_as_whole_units_rounded_down() {
        let cases: &[(&str, &str, i64)] = &[
            ("cpu", "32", 32),
            ("cpu", "31500m", 31),
            ("cpu", "32000m", 32),
            ("cpu", "999m", 0),
            ("cpu", "1.5", 1),
            ("cpu", "+4", 4),
            ("cpu", "2e1", 20),
            ("cpu", "25E-1", 2),
            ("cpu", "4k", 4000),
            ("cpu", "64000000u", 64),
            ("cpu", "8000000000n", 8),
            ("cpu", ".5", 0),
        ];
        for (resource, value, want) in cases {
            let got = capacity(&[(resource, value)]).unwrap();
            assert_eq!(got.threads, *want, "{resource}={value}");
        }
        let memory: &[(&str, i64)] = &[
            ("128Gi", 128),
            ("131072Mi", 128),
            ("134217727Ki", 127), // one KiB short of 128 GiB
            ("134217728Ki", 128),
            ("137438953472", 128),
            ("137438953471", 127),
            ("1Ti", 1024),
            ("200G", 186), // decimal gigabytes: 200e9 / 2^30 = 186.26
            ("1Ei", 1 << 30),
            ("0", 0),
        ];
        for (value, want) in memory {
            let got = capacity(&[("memory", value), ("ephemeral-storage", value)]).unwrap();
            assert_eq!((got.memory_gb, got.storage_gb), (*want, *want), "{value}");
        }
    }

    #[test]
    fn a_missing_resource_is_none_of_it() {
        assert_eq!(
            capacity(&[("cpu", "8"), ("pods", "110")]).unwrap(),
            ResourceAmounts::new(8, 0, 0)
        );
    }

    #[test]
    fn what_cannot_be_read_is_an_error_naming_the_resource() {
        let cases: &[(&str, &str, &str)] = &[
            ("cpu", "-1", "negative"),
            ("memory", "12Xi", "unknown suffix"),
            ("memory", "1.2.3", "not a number"),
            ("memory", "", "not a number"),
            ("memory", "Gi", "not a number"),
            ("cpu", "1e99", "too large"),
            ("cpu", "9007199254740992", "too large"), // 2^53: past MAX_AMOUNT
            (
                "cpu",
                "999999999999999999999999999999999999999999",
                "too large",
            ),
            ("memory", "1e40", "too large"),
        ];
        for (resource, value, why) in cases {
            let error = capacity(&[(resource, value)]).unwrap_err();
            assert_eq!(
                (error.resource, error.why),
                (*resource, *why),
                "{resource}={value}"
            );
        }
        assert_eq!(
            capacity(&[("cpu", "9007199254740991")]).unwrap().threads,
            MAX_AMOUNT
        );
        assert_eq!(
            capacity(&[("memory", "-1Gi")]).unwrap_err().to_string(),
            "allocatable memory is \"-1Gi\": negative"
        );
    }
}
