//! The Event list of `docs/REFERENCE.md` is rendered from [`tier_kube::events::to_event`], one
//! row per [`TierEvent`] variant (an exhaustive `match` below makes a new variant fail to
//! compile until it has a row). The table sits between `<!-- BEGIN generated: events -->` and
//! `<!-- END generated: events -->`; `TIERD_BLESS=1 cargo test -p tier-kube --test reference`
//! rewrites it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use kube::runtime::events::EventType;
use tier_core::{Controller, TierEvent};

const BEGIN: &str = "<!-- BEGIN generated: events -->\n";
const END: &str = "<!-- END generated: events -->";

/// When the machine emits each event (one per episode, never per retry).
fn when(event: &TierEvent) -> &'static str {
    match event {
        TierEvent::Created { .. } => "tierd created a missing Tier",
        TierEvent::Corrected { .. } => {
            "tierd updated a drifted Tier to the desired fields (the note names those that differed)"
        }
        TierEvent::Blocked { .. } => {
            "a create is predicted to be refused (a Tier in the way); nothing is sent until it moves"
        }
        TierEvent::Denied { rule: None, .. } => {
            "admission denied a write the cache allows, four times in a row"
        }
        TierEvent::Denied { rule: Some(_), .. } => {
            "admission denied a write by a rule tierd recognises (Antrea's priority rule), at once"
        }
        TierEvent::Forbidden { .. } => "the API server answered 403/401 to a write",
        TierEvent::NotInstalled { .. } => "a create got 404: the Tier CRD is not installed",
        TierEvent::Contested { .. } => {
            "a correction found no token after another writer undid writes the server accepted"
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
            fields: tier_core::Drift::of([("priority", false), ("description", true)]),
        },
        TierEvent::Blocked {
            tier: tier(),
            blockers: vec!["team-a".into()],
            reason: "priority 150 is held by Tier team-a".into(),
        },
        TierEvent::Denied {
            tier: tier(),
            message: "tier networkops priority 150 overlaps with existing Tier".into(),
            rule: None,
        },
        TierEvent::Denied {
            tier: "org-security".into(),
            message: "admission webhook \"tiervalidator.antrea.io\" denied the request: update \
                      to Tier priority is not allowed"
                .into(),
            rule: tier_core::Antrea::explain_denial(
                &tier_core::TierSpec::new("org-security", 90, ""),
                Some(&tier_core::ObservedTier {
                    name: "org-security".into(),
                    priority: 95,
                    description: String::new(),
                    resource_version: "7".into(),
                    last_writer: None,
                }),
                tier_core::admission::PRIORITY_UPDATE_DENIED,
            ),
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

fn table() -> String {
    let mut out =
        String::from("| reason | type | action | when | example note |\n|---|---|---|---|---|\n");
    for event in examples() {
        let rendered = tier_kube::events::to_event(&event);
        let kind = match rendered.type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        out.push_str(&format!(
            "| `{}` | {kind} | {} | {} | {} |\n",
            rendered.reason,
            rendered.action,
            when(&event),
            rendered.note.unwrap_or_default().replace('|', "\\|")
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
