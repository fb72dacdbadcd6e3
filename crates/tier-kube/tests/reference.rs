//! The Event list of `docs/REFERENCE.md` is rendered from [`tier_kube::events::to_event`], one
//! row per [`TierEvent`] variant (an exhaustive `match` below makes a new variant fail to
//! compile until it has a row), then from [`tier_kube::lease::to_event`], one row per
//! [`LeaderEvent`] (about the Lease, with `--leader-elect`). The table sits between `<!-- BEGIN generated: events -->` and
//! `<!-- END generated: events -->`; `TIERD_BLESS=1 cargo test -p tier-kube --test reference`
//! rewrites it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use kube::runtime::events::{Event, EventType};
use tier_core::TierEvent;
use tier_kube::lease::LeaderEvent;

const BEGIN: &str = "<!-- BEGIN generated: events -->\n";
const END: &str = "<!-- END generated: events -->";

/// When the machine emits each event (one per episode, never per retry).
fn when(event: &TierEvent) -> &'static str {
    match event {
        TierEvent::Created { .. } => "tierd created a missing Tier",
        TierEvent::Corrected { .. } => "tierd updated a drifted Tier to the desired fields",
        TierEvent::Blocked { .. } => {
            "a create is predicted to be refused (a Tier in the way); nothing is sent until it moves"
        }
        TierEvent::Denied { .. } => {
            "admission denied a write the cache allows, four times in a row"
        }
        TierEvent::Forbidden { .. } => "the API server answered 403/401 to a write",
        TierEvent::NotInstalled { .. } => "a create got 404: the Tier CRD is not installed",
        TierEvent::Contested { .. } => {
            "a correction found no token: someone keeps changing the Tier back"
        }
        TierEvent::ContestEnded { .. } => "the write budget is full again after a contest",
    }
}

/// One example of every variant.
fn examples() -> Vec<TierEvent> {
    let tier = || "networkops".to_owned();
    vec![
        TierEvent::Created { tier: tier() },
        TierEvent::Corrected {
            tier: tier(),
            fields: "priority and description",
        },
        TierEvent::Blocked {
            tier: tier(),
            blockers: vec!["team-a".into()],
            reason: "priority 150 is held by Tier team-a".into(),
        },
        TierEvent::Denied {
            tier: tier(),
            message: "update to Tier priority is not allowed".into(),
        },
        TierEvent::Forbidden {
            tier: tier(),
            permission: Some("update tiers.crd.antrea.io".into()),
            message: "forbidden".into(),
        },
        TierEvent::NotInstalled {
            tier: tier(),
            message: "the server could not find the requested resource".into(),
        },
        TierEvent::Contested {
            tier: tier(),
            streak: 4,
            by: None,
        },
        TierEvent::ContestEnded { tier: tier() },
    ]
}

/// When the elector emits each leadership change (about the Lease, in its namespace).
fn when_leader(event: &LeaderEvent) -> &'static str {
    match event {
        LeaderEvent::Acquired { .. } => {
            "with `--leader-elect`: this replica acquired the Lease (or renewed it after losing the permission); about the Lease"
        }
        LeaderEvent::Lost { .. } => {
            "this replica could not renew within the renew deadline, or saw another holder: it stopped writing"
        }
        LeaderEvent::Released { .. } => "this replica released the Lease on SIGTERM",
    }
}

/// One example of every leadership change.
fn leader_examples() -> Vec<LeaderEvent> {
    let identity = || "tierd-5d8f7-x2k4q_3f2a9c1e0b7d4a68".to_owned();
    vec![
        LeaderEvent::Acquired {
            identity: identity(),
        },
        LeaderEvent::Lost {
            identity: identity(),
            reason: "the Lease was not renewed within 10s".into(),
        },
        LeaderEvent::Released {
            identity: identity(),
        },
    ]
}

fn row(rendered: Event, when: &str) -> String {
    let kind = match rendered.type_ {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    };
    format!(
        "| `{}` | {kind} | {} | {} | {} |\n",
        rendered.reason,
        rendered.action,
        when,
        rendered.note.unwrap_or_default().replace('|', "\\|")
    )
}

fn table() -> String {
    let mut out =
        String::from("| reason | type | action | when | example note |\n|---|---|---|---|---|\n");
    for event in examples() {
        out.push_str(&row(tier_kube::events::to_event(&event), when(&event)));
    }
    for event in leader_examples() {
        out.push_str(&row(
            tier_kube::lease::to_event(&event),
            when_leader(&event),
        ));
    }
    out
}

#[test]
fn every_event_variant_has_an_example() {
    let mut seen = [false; 8];
    for event in examples() {
        let index = match event {
            TierEvent::Created { .. } => 0,
            TierEvent::Corrected { .. } => 1,
            TierEvent::Blocked { .. } => 2,
            TierEvent::Denied { .. } => 3,
            TierEvent::Forbidden { .. } => 4,
            TierEvent::NotInstalled { .. } => 5,
            TierEvent::Contested { .. } => 6,
            TierEvent::ContestEnded { .. } => 7,
        };
        seen[index] = true;
    }
    assert!(seen.iter().all(|s| *s), "{seen:?}");
}

#[test]
fn the_event_list_in_docs_reference_matches_the_code() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/REFERENCE.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let (Some(begin), Some(end)) = (text.find(BEGIN), text.find(END)) else {
        panic!(
            "{} lacks the lines `{}` and `{END}`; add them, then run \
             `TIERD_BLESS=1 cargo test -p tier-kube --test reference`",
            path.display(),
            BEGIN.trim_end()
        );
    };
    let from = begin + BEGIN.len();
    assert!(from <= end, "{END} comes before {BEGIN}");
    let spliced = format!("{}{}{}", &text[..from], table(), &text[end..]);
    if std::env::var_os("TIERD_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, spliced).unwrap();
        return;
    }
    let first = text
        .lines()
        .zip(spliced.lines())
        .find(|(old, new)| old != new)
        .map(|(old, new)| format!("\n  docs: {old}\n  code: {new}"))
        .unwrap_or_default();
    assert!(
        spliced == text,
        "the Event list in {} differs from tier_kube::events::to_event;{first}\n\
         run `TIERD_BLESS=1 cargo test -p tier-kube --test reference` and commit the result",
        path.display()
    );
}
