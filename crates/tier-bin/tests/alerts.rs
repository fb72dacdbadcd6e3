//! The alerting rules (`deploy/alerts.yaml`, and the same groups as a PrometheusRule in
//! `deploy/components/alerts`) name only metrics and labels tierd exports, and every alert says
//! what is wrong and what to do. What tierd exports is read from the live registry: a real
//! driver on the in-memory backend (one Tier blocked by a squatter, the others converged) is
//! scraped through `tier_server::metrics`, so a renamed metric or label fails this test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use prometheus_client::registry::Registry;
use serde_yaml::Value;
use tier_core::{DesiredSet, DriverConfig, Mode, TierSpec, TierState};
use tier_memory::MemoryCluster;

fn deploy(file: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap()
}

fn rules() -> Vec<Value> {
    let file = deploy("alerts.yaml");
    file["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().clone())
        .collect()
}

/// Per exported sample name, its labels and each label's values.
type Exported = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// Scrapes tierd's registry while a driver runs with `networkops` blocked by a squatter Tier.
async fn exported() -> Exported {
    let cluster = MemoryCluster::builder()
        .with_tier(TierSpec::new("squatter", 150, "a user Tier"))
        .build();
    let ensurer = tier_runtime::spawn(
        cluster.clone(),
        cluster.clone(),
        DesiredSet::antrea(),
        DriverConfig::default(),
        Mode::Continuous,
    )
    .unwrap();
    let mut status = ensurer.status();
    tokio::time::timeout(
        Duration::from_secs(30),
        status.wait_for(|s| {
            s.synced
                && s.tiers
                    .iter()
                    .any(|t| matches!(t.state, TierState::Blocked { .. }))
                && s.tiers
                    .iter()
                    .filter(|t| t.state == TierState::Converged)
                    .count()
                    == 5
        }),
    )
    .await
    .unwrap()
    .unwrap();
    let mut registry = Registry::default();
    tier_server::metrics::register(&mut registry, status.clone());
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    ensurer.shutdown().await;
    parse_exposition(&text)
}

/// Parses the sample lines of the text exposition format.
fn parse_exposition(text: &str) -> Exported {
    let mut out = Exported::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, _value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let entry = out.entry(name.to_owned()).or_default();
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let (label, value) = pair.split_once('=').unwrap();
            entry
                .entry(label.to_owned())
                .or_default()
                .insert(value.trim_matches('"').to_owned());
        }
    }
    out
}

const FUNCTIONS: &[&str] = &[
    "absent",
    "absent_over_time",
    "avg",
    "avg_over_time",
    "changes",
    "count",
    "delta",
    "increase",
    "max",
    "max_over_time",
    "min",
    "min_over_time",
    "rate",
    "sum",
    "time",
    "timestamp",
    "clamp_min",
    "clamp_max",
];
const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset"];
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

#[derive(Debug, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Punct(char),
    Other,
}

fn lex(expr: &str) -> Vec<Token> {
    let chars: Vec<char> = expr.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c == '"' || c == '\'' {
            let start = i + 1;
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += 1;
            }
            tokens.push(Token::Str(
                chars[start..i.min(chars.len())].iter().collect(),
            ));
            i += 1;
        } else if c == '[' {
            // A range or subquery duration: `[5m]`.
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
            tokens.push(Token::Other);
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            tokens.push(Token::Other);
        } else {
            tokens.push(Token::Punct(c));
            i += 1;
        }
    }
    tokens
}

/// Every problem with `expr`: unknown metrics, labels, label values or functions.
fn problems(expr: &str, exported: &Exported) -> Vec<String> {
    let all_labels: BTreeSet<&String> = exported.values().flat_map(|l| l.keys()).collect();
    let tokens = lex(expr);
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            // Functions and aggregations (`sum by (tier) (...)` has no `(` right after `sum`).
            Token::Ident(word) if FUNCTIONS.contains(&word.as_str()) => i += 1,
            Token::Ident(word) if tokens.get(i + 1) == Some(&Token::Punct('(')) => {
                if GROUPING.contains(&word.as_str()) {
                    i += 2;
                    while let Some(Token::Ident(label)) = tokens.get(i) {
                        if !all_labels.contains(label) {
                            out.push(format!("label `{label}` in {word}(...) is not exported"));
                        }
                        i += 1;
                        if tokens.get(i) == Some(&Token::Punct(',')) {
                            i += 1;
                        }
                    }
                } else if !FUNCTIONS.contains(&word.as_str()) {
                    out.push(format!("`{word}` is not a known PromQL function"));
                }
                i += 1;
            }
            Token::Ident(word) if KEYWORDS.contains(&word.as_str()) => i += 1,
            Token::Ident(metric) => {
                let labels = exported.get(metric);
                if labels.is_none() {
                    out.push(format!("metric `{metric}` is not exported"));
                }
                i += 1;
                if tokens.get(i) == Some(&Token::Punct('{')) {
                    i += 1;
                    while let Some(Token::Ident(label)) = tokens.get(i) {
                        let mut op = String::new();
                        i += 1;
                        while let Some(Token::Punct(c)) = tokens.get(i) {
                            if ['=', '!', '~'].contains(c) {
                                op.push(*c);
                                i += 1;
                            } else {
                                break;
                            }
                        }
                        let value = match tokens.get(i) {
                            Some(Token::Str(v)) => v.clone(),
                            other => panic!("a matcher without a string value: {other:?}"),
                        };
                        i += 1;
                        match labels.and_then(|l| l.get(label)) {
                            None => {
                                out.push(format!("label `{label}` is not exported by `{metric}`"))
                            }
                            Some(values) if op == "=" && !values.contains(&value) => {
                                out.push(format!(
                                    "`{metric}` never has {label}=\"{value}\" (it has {values:?})"
                                ))
                            }
                            Some(_) => {}
                        }
                        if tokens.get(i) == Some(&Token::Punct(',')) {
                            i += 1;
                        }
                    }
                    assert_eq!(
                        tokens.get(i),
                        Some(&Token::Punct('}')),
                        "unclosed matcher in {expr}"
                    );
                    i += 1;
                }
            }
            Token::Punct('{') => {
                out.push("a selector without a metric name".to_owned());
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// Labels named in `{{ $labels.x }}` templates.
fn template_labels(text: &str) -> Vec<String> {
    text.split("$labels.")
        .skip(1)
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn every_expression_names_only_what_tierd_exports() {
    let exported = exported().await;
    assert!(exported.contains_key("tierd_tier_state"), "{exported:?}");
    let rules = rules();
    assert!(rules.len() >= 4);
    let mut all = Vec::new();
    for rule in &rules {
        let name = rule["alert"].as_str().unwrap();
        let expr = rule["expr"].as_str().unwrap();
        all.extend(
            problems(expr, &exported)
                .into_iter()
                .map(|p| format!("{name}: {p}")),
        );
        let labels: BTreeSet<&String> = exported.values().flat_map(|l| l.keys()).collect();
        for field in ["summary", "description"] {
            let text = rule["annotations"][field].as_str().unwrap_or_default();
            for label in template_labels(text) {
                // `instance` and `job` are the target labels Prometheus adds to every series.
                if !labels.contains(&label) && label != "instance" && label != "job" {
                    all.push(format!("{name}: {field} uses $labels.{label}, never set"));
                }
            }
        }
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
}

#[tokio::test(start_paused = true)]
async fn the_checker_catches_unknown_names() {
    let exported = exported().await;
    assert_eq!(
        problems(
            r#"sum by (tier) (tierd_tier_state{state="blocked"}) == 1"#,
            &exported
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        problems(r#"tierd_tiers_stuck == 1"#, &exported),
        ["metric `tierd_tiers_stuck` is not exported"]
    );
    assert_eq!(
        problems(r#"tierd_tier_state{phase="blocked"} == 1"#, &exported),
        ["label `phase` is not exported by `tierd_tier_state`"]
    );
    assert_eq!(
        problems(r#"tierd_tier_state{state="blokced"}"#, &exported).len(),
        1
    );
    assert_eq!(
        problems(r#"max by (pod) (tierd_cache_synced)"#, &exported),
        ["label `pod` in by(...) is not exported"]
    );
}

#[test]
fn every_alert_has_a_summary_a_description_and_the_wanted_conditions() {
    let rules = rules();
    for rule in &rules {
        let name = rule["alert"].as_str().unwrap();
        for field in ["summary", "description"] {
            let text = rule["annotations"][field].as_str().unwrap_or_default();
            assert!(text.len() > 20, "{name} needs a {field}");
        }
    }
    let names: BTreeSet<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
    for wanted in [
        "TierdTierBlocked",
        "TierdTierContested",
        "TierdTierCacheNotSynced",
        "TierdNoReplicaReady",
    ] {
        assert!(names.contains(wanted), "{wanted} missing from {names:?}");
    }
    let blocked = rules
        .iter()
        .find(|r| r["alert"] == "TierdTierBlocked")
        .unwrap();
    assert_eq!(blocked["for"].as_str(), Some("5m"));
    assert!(
        blocked["annotations"]["description"]
            .as_str()
            .unwrap()
            .contains("{{ $labels.tier }}")
    );
}

#[test]
fn the_prometheus_rule_holds_the_same_groups_as_the_rules_file() {
    let rule = deploy("components/alerts/prometheusrule.yaml");
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    assert_eq!(
        rule["apiVersion"].as_str(),
        Some("monitoring.coreos.com/v1")
    );
    assert_eq!(rule["spec"]["groups"], deploy("alerts.yaml")["groups"]);
}
