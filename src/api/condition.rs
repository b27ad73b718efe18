//! The Kubernetes condition Tenants and Nodes carry. What the controller rewrites anyway is read
//! leniently: an unparsable transition time reads as [`Condition::UNREADABLE_TIME`] and is never
//! kept, so the next status write replaces it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A condition in the usual Kubernetes shape: Tenants (Placed) and Nodes (OverCapacity, Drained)
/// carry the same kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition type: Placed (Tenant), OverCapacity or Drained (Node).
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// A CamelCase reason.
    pub reason: String,
    /// A human sentence.
    pub message: String,
    /// When the status last changed.
    #[serde(deserialize_with = "lenient_time")]
    pub last_transition_time: Time,
    /// The metadata.generation this condition describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A transition time, or [`Condition::UNREADABLE_TIME`] when its text is not one.
fn lenient_time<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Time, D::Error> {
    let text = String::deserialize(deserializer)?;
    Ok(text.parse().map_or(Condition::UNREADABLE_TIME, Time))
}

impl Condition {
    /// What an unparsable transition time reads as: the Unix epoch, which no controller writes.
    pub const UNREADABLE_TIME: Time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);

    /// A condition of `type_`, keeping the transition time of the one in `previous` while its
    /// status stays the same (the one rule for transition times); an unreadable time is not kept.
    pub fn keeping_time(
        previous: &[Condition],
        type_: &str,
        status: &str,
        reason: &str,
        message: String,
        observed_generation: Option<i64>,
        now: &Time,
    ) -> Condition {
        let last_transition_time = match previous.iter().find(|c| c.type_ == type_) {
            Some(p) if p.status == status && p.last_transition_time != Self::UNREADABLE_TIME => {
                p.last_transition_time.clone()
            }
            _ => now.clone(),
        };
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message,
            last_transition_time,
            observed_generation,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_condition_time_that_cannot_be_parsed_reads_as_unreadable_and_is_not_kept() {
        let read: Condition = serde_json::from_value(serde_json::json!({
            "type": "OverCapacity", "status": "False", "reason": "WithinCapacity",
            "message": "", "lastTransitionTime": "not-a-time",
        }))
        .unwrap();
        assert_eq!(read.last_transition_time, Condition::UNREADABLE_TIME);
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let next = Condition::keeping_time(
            &[read],
            "OverCapacity",
            "False",
            "WithinCapacity",
            String::new(),
            None,
            &now,
        );
        assert_eq!(
            next.last_transition_time, now,
            "rewritten at the next write"
        );
    }
}
