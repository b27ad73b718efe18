//! Publishing Kubernetes Events (`events.k8s.io/v1`) without keeping them.
//!
//! Rules enforced here:
//! - one publish is one create: an Event named `{object}.{nanoseconds in hex}` (the form
//!   kube's and client-go's recorders use), with `eventTime`, `action`, `reason`, `type`,
//!   `regarding`, `reportingController` and `reportingInstance` set, as the API requires;
//! - nothing is cached. kube's `Recorder` keeps every event it published for six minutes so that
//!   a repeat becomes a series count; its memory grows with the number of events (some 4 MB
//!   per thousand). Our events are published on transitions, so repeats are rare and each is its
//!   own Event;
//! - a note longer than the API's 1 KiB limit is cut at a character boundary.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::events::EventType;

/// The API's limit on `note`, in bytes.
const NOTE_LIMIT: usize = 1024;

/// Creates Events as this controller and instance.
#[derive(Clone)]
pub struct EventPublisher {
    client: kube::Client,
    controller: String,
    instance: String,
}

impl std::fmt::Debug for EventPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventPublisher")
            .field("controller", &self.controller)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

/// One Event to publish.
#[derive(Clone, Debug)]
pub struct Occurrence<'a> {
    pub type_: EventType,
    pub reason: &'a str,
    pub action: &'a str,
    pub note: String,
}

impl EventPublisher {
    /// `instance` defaults to the controller's name.
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Self {
        EventPublisher {
            client,
            controller: controller.to_owned(),
            instance: instance.unwrap_or_else(|| controller.to_owned()),
        }
    }

    /// Publishes one Event about `regarding` when there is a publisher (`None` publishes
    /// nothing: scripted-mock tests). A failure is logged: an Event is never worth failing a
    /// reconcile for.
    pub async fn publish_or_log(
        publisher: Option<&EventPublisher>,
        occurrence: Occurrence<'_>,
        regarding: ObjectReference,
    ) {
        let Some(publisher) = publisher else { return };
        let reason = occurrence.reason;
        if let Err(error) = publisher.publish(occurrence, regarding).await {
            tracing::warn!(%error, reason, "could not publish an event");
        }
    }

    /// Publishes one Event about `regarding`, done by `action`; a failure to publish is logged,
    /// never fatal (what every loop's `publish` does).
    pub async fn publish_about<K: kube::Resource<DynamicType = ()>>(
        publisher: Option<&EventPublisher>,
        regarding: &K,
        (type_, reason, action): (EventType, &str, &str),
        note: String,
    ) {
        let occurrence = Occurrence {
            type_,
            reason,
            action,
            note,
        };
        Self::publish_or_log(publisher, occurrence, regarding.object_ref(&())).await;
    }

    /// Creates one Event about `regarding`, in its namespace.
    pub async fn publish(
        &self,
        occurrence: Occurrence<'_>,
        regarding: ObjectReference,
    ) -> Result<(), kube::Error> {
        let event = self.event(occurrence, regarding, Timestamp::now());
        let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        events
            .create(&PostParams::default(), &event)
            .await
            .map(drop)
    }

    fn event(
        &self,
        occurrence: Occurrence<'_>,
        regarding: ObjectReference,
        now: Timestamp,
    ) -> Event {
        let object = regarding.name.as_deref().unwrap_or(&self.controller);
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{object}.{:x}", now.as_nanosecond())),
                namespace: regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(occurrence.action.to_owned()),
            reason: Some(occurrence.reason.to_owned()),
            note: Some(within_limit(occurrence.note)),
            type_: Some(
                match occurrence.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_owned(),
            ),
            regarding: Some(regarding),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        }
    }
}

/// The note, cut to the API's limit at a character boundary.
fn within_limit(mut note: String) -> String {
    if note.len() > NOTE_LIMIT {
        let mut end = NOTE_LIMIT;
        while !note.is_char_boundary(end) {
            end = end.saturating_sub(1);
        }
        note.truncate(end);
    }
    note
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn an_event_carries_what_the_api_requires_and_a_note_within_its_limit() {
        let api = inmem_apiserver::ApiServer::new();
        let client = kube::Client::new(api.clone(), "default");
        let publisher = EventPublisher::new(client, "tenant-placer", None);
        let regarding = ObjectReference {
            name: Some("acme".into()),
            namespace: Some("team-a".into()),
            ..ObjectReference::default()
        };
        let occurrence = Occurrence {
            type_: EventType::Warning,
            reason: "ResizeBlocked",
            action: "Reconcile",
            note: "é".repeat(600),
        };
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let event = publisher.event(occurrence.clone(), regarding.clone(), now);
        assert_eq!(
            event.metadata.name.as_deref(),
            Some(format!("acme.{:x}", now.as_nanosecond()).as_str())
        );
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.reporting_instance.as_deref(), Some("tenant-placer"));
        assert!(event.event_time.is_some() && event.series.is_none());
        assert_eq!(event.note.unwrap().len(), 1024, "512 two-byte characters");

        publisher.publish(occurrence, regarding).await.unwrap();
        let stored = api.list("events.k8s.io", "events");
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0]["metadata"]["namespace"], "team-a");
    }
}
