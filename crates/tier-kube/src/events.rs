//! Kubernetes Events for what the driver does, published with kube's [`Recorder`].
//!
//! [`publish`] reads a driver's event stream (lossless, in order: the same stream the driver
//! logs) and turns every [`TierEvent`] (a successful create or correction, the start of a
//! blocked, denied, forbidden or not-installed episode, the start and end of a contest) into an
//! Event about the Tier (Antrea's `crd.antrea.io/v1beta1` `Tier`, or another controller's
//! through [`publish_about`] and an [`EventSubject`]; cluster-scoped, so the Events land in the
//! `default` namespace). The machine emits one event per episode, so a Tier retried a
//! thousand times yields one Event, not a thousand; kube's recorder further folds repeats into
//! a series.
//!
//! Publishing never stops the daemon: a failed publish is logged and dropped.
//!
//! Every Event tierd publishes is built here ([`to_event`], [`bad_certificate`]), so
//! [`REASONS`] is the whole list (docs/REFERENCE.md's Event table is generated from these).
//!
//! ```no_run
//! # async fn example(client: kube::Client, events: tier_core::EventReceiver) {
//! let reporter = tier_kube::events::reporter(std::env::var("POD_NAME").ok());
//! tokio::spawn(tier_kube::events::publish(client, reporter, events));
//! # }
//! ```

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tier_core::{EventReceiver, TierEvent};

use crate::crd::Tier;

/// The reporting controller's name in Events.
pub(crate) const CONTROLLER: &str = "tierd";

/// The reason of the Warning Event about the self-signed certificate's Secret, whose bad
/// content tierd replaced ([`bad_certificate`]).
pub const BAD_CERTIFICATE: &str = "BadCertificate";

/// The reason of leadership Events ([`leader_election`]), client-go's.
pub const LEADER_ELECTION: &str = "LeaderElection";

/// Every reason of tierd's Events: one per [`TierEvent`] kind ([`to_event`]), then
/// [`BAD_CERTIFICATE`] and [`LEADER_ELECTION`].
pub const REASONS: [&str; 10] = [
    "Created",
    "Corrected",
    "Blocked",
    "Denied",
    "Forbidden",
    "NotInstalled",
    "Contested",
    "ContestEnded",
    BAD_CERTIFICATE,
    LEADER_ELECTION,
];

/// The longest one Event may take to publish before it is dropped.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// The reporter of tierd's Events; `instance` is usually the pod name.
pub fn reporter(instance: Option<String>) -> Reporter {
    Reporter {
        controller: CONTROLLER.to_owned(),
        instance,
    }
}

/// What tierd's Events are about: the `apiVersion` and `kind` of one controller's Tiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSubject {
    api_version: String,
    kind: String,
}

impl EventSubject {
    /// Antrea's Tiers (`crd.antrea.io/v1beta1` `Tier`).
    pub fn antrea() -> Self {
        Self::of::<Tier>(&())
    }

    /// The Tiers of `resource` (a lister's,
    /// [`KubeLister::resource`](crate::lister::KubeLister::resource)).
    pub fn of<T: kube::Resource>(resource: &T::DynamicType) -> Self {
        Self {
            api_version: T::api_version(resource).into_owned(),
            kind: T::kind(resource).into_owned(),
        }
    }

    /// A reference to the Tier called `name`, the object of its Events (cluster-scoped: no
    /// namespace).
    pub fn reference(&self, name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some(self.api_version.clone()),
            kind: Some(self.kind.clone()),
            name: Some(name.to_owned()),
            ..ObjectReference::default()
        }
    }
}

/// A reference to the Antrea Tier called `name`, the object of its Events.
pub fn reference(name: &str) -> ObjectReference {
    EventSubject::antrea().reference(name)
}

/// The Kubernetes Event for a [`TierEvent`]: the reason is the event's kind, the note its one
/// rendering ([`TierEvent`]'s `Display`), the type `Warning` when people should look.
pub fn to_event(event: &TierEvent) -> Event {
    let (reason, action) = match event {
        TierEvent::Created { .. } => ("Created", "Create"),
        TierEvent::Corrected { .. } => ("Corrected", "Update"),
        TierEvent::Blocked { .. } => ("Blocked", "Create"),
        TierEvent::Denied { .. } => ("Denied", "Write"),
        TierEvent::Forbidden { .. } => ("Forbidden", "Write"),
        TierEvent::NotInstalled { .. } => ("NotInstalled", "Create"),
        TierEvent::Contested { .. } => ("Contested", "Update"),
        TierEvent::ContestEnded { .. } => ("ContestEnded", "Update"),
    };
    Event {
        type_: if event.is_warning() {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_owned(),
        note: Some(event.to_string()),
        action: action.to_owned(),
        secondary: None,
    }
}

/// The Warning Event `BadCertificate` about the self-signed certificate's Secret (see
/// `certs`): `note` says what was wrong and what tierd did (at most 1 kB, as events.k8s.io
/// allows).
pub fn bad_certificate(note: String) -> Event {
    Event {
        type_: EventType::Warning,
        reason: BAD_CERTIFICATE.to_owned(),
        note: Some(note),
        action: "Renew".to_owned(),
        secondary: None,
    }
}

/// The Kubernetes Event for a [`LeaderEvent`](crate::lease::LeaderEvent), about the Lease:
/// reason [`LEADER_ELECTION`], the note its `Display`; a lost lead is a `Warning`.
pub fn leader_election(event: &crate::lease::LeaderEvent) -> Event {
    use crate::lease::LeaderEvent;
    let (type_, action) = match event {
        LeaderEvent::Acquired { .. } => (EventType::Normal, "Acquire"),
        LeaderEvent::Lost { .. } => (EventType::Warning, "Renew"),
        LeaderEvent::Released { .. } => (EventType::Normal, "Release"),
    };
    Event {
        type_,
        reason: LEADER_ELECTION.to_owned(),
        note: Some(event.to_string()),
        action: action.to_owned(),
        secondary: None,
    }
}

/// Publishes a Kubernetes Event for every [`TierEvent`] of `events` (a driver's lossless event
/// stream, see `tier_runtime::spawn_with_events`) until the driver drops its end. Returns the
/// number of Events published. The Events are about Antrea's Tiers; see [`publish_about`].
pub async fn publish(client: kube::Client, reporter: Reporter, events: EventReceiver) -> u64 {
    publish_about(client, reporter, events, EventSubject::antrea()).await
}

/// [`publish`], the Events about the Tiers of `subject` (Calico's, say).
pub async fn publish_about(
    client: kube::Client,
    reporter: Reporter,
    mut events: EventReceiver,
    subject: EventSubject,
) -> u64 {
    let recorder = Recorder::new(client, reporter);
    let mut published = 0;
    while let Some(event) = events.recv().await {
        let (reference, kube_event) = (subject.reference(event.tier()), to_event(&event));
        let send = recorder.publish(&kube_event, &reference);
        match tokio::time::timeout(PUBLISH_TIMEOUT, send).await {
            Ok(Ok(())) => published += 1,
            Ok(Err(error)) => {
                let error = crate::explain::client_error(&error);
                tracing::warn!(tier = event.tier(), %error, "cannot publish an Event")
            }
            Err(_) => tracing::warn!(
                tier = event.tier(),
                "publishing an Event took over {PUBLISH_TIMEOUT:?}; dropped"
            ),
        }
    }
    published
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_is_built_here_with_a_listed_reason() {
        assert_eq!(bad_certificate("x".into()).reason, BAD_CERTIFICATE);
        assert!(REASONS.contains(&BAD_CERTIFICATE));
        // No other module builds an Event (its reason would be missing from REASONS and from
        // docs/REFERENCE.md's table): each sets a type.
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        for entry in std::fs::read_dir(&src).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() || path.file_name().is_some_and(|n| n == "events.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                !text.contains("EventType::"),
                "{} builds a Kubernetes Event; build it in events.rs and list its reason in \
                 REASONS",
                path.display()
            );
        }
    }

    #[test]
    fn events_name_the_tier_and_its_kind() {
        let reference = reference("baseline");
        assert_eq!(
            reference.api_version.as_deref(),
            Some("crd.antrea.io/v1beta1")
        );
        assert_eq!(reference.kind.as_deref(), Some("Tier"));
        assert_eq!(reference.name.as_deref(), Some("baseline"));
        assert_eq!(reference.namespace, None);
        let calico = crate::calico::CalicoApi::V3.resource();
        let calico = EventSubject::of::<crate::calico::CalicoTier>(&calico).reference("default");
        assert_eq!(calico.api_version.as_deref(), Some("projectcalico.org/v3"));
        assert_eq!(calico.kind.as_deref(), Some("Tier"));
        let blocked = to_event(&TierEvent::Blocked {
            tier: "networkops".into(),
            blockers: vec!["team-a".into()],
            reason: "priority 150 is held by Tier team-a".into(),
        });
        assert_eq!(blocked.reason, "Blocked");
        assert!(matches!(blocked.type_, EventType::Warning));
        assert_eq!(
            blocked.note.as_deref(),
            Some("Tier networkops cannot be created: priority 150 is held by Tier team-a")
        );
        let ended = to_event(&TierEvent::ContestEnded {
            tier: "platform".into(),
        });
        assert!(matches!(ended.type_, EventType::Normal));
        let contested = to_event(&TierEvent::Contested {
            tier: "platform".into(),
            streak: 4,
            by: None,
        });
        assert!(
            contested
                .note
                .as_deref()
                .is_some_and(|n| n
                    .contains("undid tierd's accepted writes of Tier platform (4 times in a row)")),
            "{:?}",
            contested.note
        );
    }
}
