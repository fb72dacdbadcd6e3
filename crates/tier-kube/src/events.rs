//! Kubernetes Events for what the driver does, published with kube's [`Recorder`].
//!
//! [`publish`] follows a driver's [`StatusHandle`] and turns every [`TierEvent`] (a successful
//! create or correction, the start of a blocked episode, the start of a contest) into an Event
//! about the Tier (`crd.antrea.io/v1beta1` `Tier`; cluster-scoped, so the Events land in the
//! `default` namespace). Events come from status *transitions*, so a Tier retried a thousand
//! times while blocked yields one `Blocked` Event, not a thousand; kube's recorder further
//! folds repeats into a series.
//!
//! Publishing never stops the daemon: a failed publish is logged and dropped.
//!
//! ```no_run
//! # async fn example(client: kube::Client, status: tier_core::StatusHandle) {
//! let reporter = tier_kube::events::reporter(std::env::var("POD_NAME").ok());
//! tokio::spawn(tier_kube::events::publish(client, reporter, status));
//! # }
//! ```

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tier_core::{StatusHandle, TierEvent, events};

use crate::crd::Tier;

/// The reporting controller's name in Events.
pub const CONTROLLER: &str = "tierd";

/// The longest one Event may take to publish before it is dropped.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// The reporter of tierd's Events; `instance` is usually the pod name.
pub fn reporter(instance: Option<String>) -> Reporter {
    Reporter {
        controller: CONTROLLER.to_owned(),
        instance,
    }
}

/// A reference to the Tier called `name`, the object of its Events.
pub fn reference(name: &str) -> ObjectReference {
    use kube::Resource as _;
    ObjectReference {
        api_version: Some(Tier::api_version(&()).into_owned()),
        kind: Some(Tier::kind(&()).into_owned()),
        name: Some(name.to_owned()),
        ..ObjectReference::default()
    }
}

/// The Kubernetes Event for a [`TierEvent`].
pub fn to_event(event: &TierEvent) -> Event {
    let (type_, reason, action, note) = match event {
        TierEvent::Created { tier } => (
            EventType::Normal,
            "Created",
            "Create",
            format!("created system Tier {tier}"),
        ),
        TierEvent::Corrected { tier } => (
            EventType::Normal,
            "Corrected",
            "Update",
            format!("corrected the priority and description of system Tier {tier}"),
        ),
        TierEvent::Blocked { tier, message } => (
            EventType::Warning,
            "Blocked",
            "Create",
            format!("the API server refuses to write system Tier {tier}: {message}"),
        ),
        TierEvent::Contested { tier, corrections } => (
            EventType::Warning,
            "Contested",
            "Update",
            format!(
                "another writer keeps changing system Tier {tier} back ({corrections} corrections \
                 in a row); tierd now holds off its corrections"
            ),
        ),
    };
    Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    }
}

/// Publishes an Event for every [`TierEvent`] of the driver behind `status`, from the driver's
/// start, until the driver stops. Returns the number of Events published.
///
/// The baseline is a driver that has done nothing yet (every count zero), not the status when
/// this task first runs: a driver can converge before a freshly spawned task is scheduled, and
/// those Created events must not be lost. Use it for a driver spawned by the same code.
pub async fn publish(client: kube::Client, reporter: Reporter, mut status: StatusHandle) -> u64 {
    let mut before = tier_core::Status::default();
    let recorder = Recorder::new(client, reporter);
    let mut published = 0;
    // Whatever happened before the first change notification is in the current status.
    let mut first = true;
    loop {
        let stopped = if std::mem::take(&mut first) {
            false
        } else {
            status.changed().await.is_err()
        };
        let after = status.current();
        for event in events(&before, &after) {
            let (reference, kube_event) = (reference(event.tier()), to_event(&event));
            let send = recorder.publish(&kube_event, &reference);
            match tokio::time::timeout(PUBLISH_TIMEOUT, send).await {
                Ok(Ok(())) => published += 1,
                Ok(Err(error)) => {
                    tracing::warn!(tier = event.tier(), %error, "cannot publish an Event")
                }
                Err(_) => tracing::warn!(
                    tier = event.tier(),
                    "publishing an Event took over {PUBLISH_TIMEOUT:?}; dropped"
                ),
            }
        }
        before = after;
        if stopped || before.stopped {
            return published;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let blocked = to_event(&TierEvent::Blocked {
            tier: "networkops".into(),
            message: "overlaps".into(),
        });
        assert_eq!(blocked.reason, "Blocked");
        assert!(matches!(blocked.type_, EventType::Warning));
        assert_eq!(
            blocked.note.as_deref(),
            Some("the API server refuses to write system Tier networkops: overlaps")
        );
    }
}
