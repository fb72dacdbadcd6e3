//! Property tests of the `--tiers` parser ([`parse`]): it never panics; it accepts every valid
//! file as written; it rejects everything else with at least one problem, each naming a Tier, a
//! field and a rule; and pathological YAML (alias bombs, deep nesting) stays fast. The
//! cargo-fuzz version lives in `fuzz/` at the top of the repository.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tier_core::{DesiredSet, TierSpec};
use tierd::tiers_file::{Problem, parse};

/// Parses `text` and checks the shape of the outcome.
fn check(text: &str) -> Result<DesiredSet, Vec<Problem>> {
    let result = parse(text);
    match &result {
        Ok(set) => assert!(!set.is_empty(), "accepted with no Tier: {text:?}"),
        Err(problems) => {
            assert!(!problems.is_empty(), "rejected with no problem: {text:?}");
            for p in problems {
                // An entry or a field is named, or (for the document as a whole) the rule.
                let located = p.index.is_some() || !p.field.is_empty();
                let document = p.index.is_none() && p.field.is_empty() && !p.detail.is_empty();
                assert!(
                    (located && !p.to_string().is_empty()) || document,
                    "a problem naming neither an entry, a field nor a rule: {p:?} in {text:?}"
                );
            }
        }
    }
    result
}

// ---------------------------------------------------------------------------------------------
// YAML documents.

/// A YAML node; scalars are kept as written.
#[derive(Clone, Debug)]
enum Yaml {
    Scalar(String),
    Seq(Vec<Yaml>),
    Map(Vec<(Yaml, Yaml)>),
    /// `&name node`.
    Anchor(String, Box<Yaml>),
    /// `*name`.
    Alias(String),
    /// `!tag node`.
    Tagged(String, Box<Yaml>),
}

impl Yaml {
    fn scalar(s: &str) -> Self {
        Yaml::Scalar(s.to_owned())
    }

    /// Flow style: `{k: v, ...}`, `[a, ...]`.
    fn flow(&self, out: &mut String) {
        match self {
            Yaml::Scalar(s) => out.push_str(s),
            Yaml::Seq(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.flow(out);
                }
                out.push(']');
            }
            Yaml::Map(entries) => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    k.flow(out);
                    out.push_str(": ");
                    v.flow(out);
                }
                out.push('}');
            }
            Yaml::Anchor(name, node) => {
                out.push_str(&format!("&{name} "));
                node.flow(out);
            }
            Yaml::Alias(name) => out.push_str(&format!("*{name}")),
            Yaml::Tagged(tag, node) => {
                out.push_str(&format!("{tag} "));
                node.flow(out);
            }
        }
    }

    fn is_collection(&self) -> bool {
        match self {
            Yaml::Seq(items) => !items.is_empty(),
            Yaml::Map(entries) => !entries.is_empty(),
            _ => false,
        }
    }

    /// Block style at `indent`; nested keys in flow style.
    fn block(&self, indent: usize, out: &mut String) {
        let pad = " ".repeat(indent);
        match self {
            Yaml::Seq(items) if !items.is_empty() => {
                for item in items {
                    out.push_str(&pad);
                    out.push('-');
                    item.block_value(indent + 2, out);
                }
            }
            Yaml::Map(entries) if !entries.is_empty() => {
                for (k, v) in entries {
                    out.push_str(&pad);
                    k.flow(out);
                    out.push(':');
                    v.block_value(indent + 2, out);
                }
            }
            other => {
                out.push_str(&pad);
                other.flow(out);
                out.push('\n');
            }
        }
    }

    /// A value after `key:` or `-`: on the same line, or nested below.
    fn block_value(&self, indent: usize, out: &mut String) {
        match self {
            Yaml::Anchor(name, node) if node.is_collection() => {
                out.push_str(&format!(" &{name}\n"));
                node.block(indent, out);
            }
            Yaml::Tagged(tag, node) if node.is_collection() => {
                out.push_str(&format!(" {tag}\n"));
                node.block(indent, out);
            }
            node if node.is_collection() => {
                out.push('\n');
                node.block(indent, out);
            }
            node => {
                out.push(' ');
                node.flow(out);
                out.push('\n');
            }
        }
    }

    fn render(&self, block: bool) -> String {
        let mut out = String::new();
        if block {
            self.block(0, &mut out);
        } else {
            self.flow(&mut out);
        }
        out
    }
}

/// `s` as a YAML double-quoted scalar, escaping what YAML does not allow unescaped.
fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~'
            | '\u{a0}'..='\u{d7ff}'
            | '\u{e000}'..='\u{fefe}'
            | '\u{ff00}'..='\u{fffd}' => {
                out.push(c);
            }
            c if c >= '\u{10000}' => out.push(c),
            c => out.push_str(&format!("\\U{:08x}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

/// Scalars as written: integers and numbers beyond them, floats, special values, quoted and
/// plain strings, and the keys of the format.
fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        any::<u64>().prop_map(|u| u.to_string()),
        (0i64..=300).prop_map(|i| i.to_string()),
        "-?[1-9][0-9]{19,60}",
        "-?[0-9]\\.[0-9]{1,4}e[+-]?[0-9]{1,4}",
        any::<f64>().prop_map(|f| format!("{f:?}")),
        prop::sample::select(vec![
            "~",
            "null",
            "true",
            "no",
            "yes",
            ".nan",
            "-.inf",
            "0x1F",
            "0o17",
            "0b101",
            "1_000",
            "+12",
            "-0",
            "10.0",
            "1e400",
            "''",
            "\"\"",
            "tiers",
            "name",
            "priority",
            "description",
            "a",
            "<<",
            "- x",
            "? x",
        ])
        .prop_map(str::to_owned),
        "[a-z][a-z0-9.-]{0,10}",
        any::<String>().prop_map(|s| quoted(&s)),
        "[ -~]{0,12}".prop_map(|s| format!("'{}'", s.replace('\'', "''"))),
    ]
}

fn anchor_name() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c"]).prop_map(str::to_owned)
}

fn tag() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "!!str",
        "!!int",
        "!!float",
        "!!bool",
        "!!null",
        "!!map",
        "!!seq",
        "!!binary",
        "!x",
        "!<tag:x,2000:y>",
    ])
    .prop_map(str::to_owned)
}

fn yaml() -> impl Strategy<Value = Yaml> {
    let leaf = prop_oneof![
        6 => scalar().prop_map(Yaml::Scalar),
        1 => anchor_name().prop_map(Yaml::Alias),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            3 => prop::collection::vec(inner.clone(), 0..5).prop_map(Yaml::Seq),
            3 => prop::collection::vec((inner.clone(), inner.clone()), 0..5).prop_map(Yaml::Map),
            1 => (anchor_name(), inner.clone()).prop_map(|(a, n)| Yaml::Anchor(a, Box::new(n))),
            1 => (tag(), inner).prop_map(|(t, n)| Yaml::Tagged(t, Box::new(n))),
        ]
    })
}

/// A Tier entry with random fields and values of any shape.
fn entry() -> impl Strategy<Value = Yaml> {
    let key = prop_oneof![
        6 => prop::sample::select(vec!["name", "priority", "description"]).prop_map(Yaml::scalar),
        1 => scalar().prop_map(Yaml::Scalar),
    ];
    let value = prop_oneof![
        3 => scalar().prop_map(Yaml::Scalar),
        1 => yaml(),
    ];
    prop_oneof![
        8 => prop::collection::vec((key, value), 0..5).prop_map(Yaml::Map),
        1 => yaml(),
    ]
}

/// A document shaped like a Tiers file, anything in it replaced.
fn document() -> impl Strategy<Value = Yaml> {
    let tiers = prop_oneof![
        6 => prop::collection::vec(entry(), 0..6).prop_map(Yaml::Seq),
        1 => (anchor_name(), prop::collection::vec(entry(), 0..4))
            .prop_map(|(a, e)| Yaml::Anchor(a, Box::new(Yaml::Seq(e)))),
        1 => yaml(),
    ];
    let extra = prop::collection::vec((scalar().prop_map(Yaml::Scalar), yaml()), 0..2);
    (tiers, extra, any::<bool>()).prop_map(|(tiers, extra, tiers_first)| {
        let mut entries = extra;
        let tiers = (Yaml::scalar("tiers"), tiers);
        if tiers_first {
            entries.insert(0, tiers);
        } else {
            entries.push(tiers);
        }
        Yaml::Map(entries)
    })
}

// ---------------------------------------------------------------------------------------------
// Valid files, and files with one defect.

/// Names that are DNS-1123 subdomains.
fn valid_name() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?(\\.[a-z0-9]{1,5}){0,2}"
}

/// Up to 20 Tiers with distinct valid names and distinct unreserved priorities.
fn valid_set() -> impl Strategy<Value = Vec<TierSpec>> {
    let priorities: Vec<i64> = (0..=255)
        .filter(|p| ![251, 252, 254, 255].contains(p))
        .collect();
    (
        prop::collection::btree_set(valid_name(), 1..=20),
        prop::sample::subsequence(priorities, 20),
        prop::collection::vec("[ -~]{0,20}|[a-zé日本 ]{0,10}", 20),
    )
        .prop_flat_map(|(names, priorities, descriptions)| {
            let tiers: Vec<TierSpec> = names
                .into_iter()
                .zip(priorities)
                .zip(descriptions)
                .map(|((n, p), d)| TierSpec::new(n, p, d))
                .collect();
            Just(tiers).prop_shuffle()
        })
}

/// How an entry is written: its fields in some order, values in some style.
#[derive(Clone, Debug)]
struct Style {
    order: [usize; 3],
    quote_name: bool,
    /// Leave an empty description out.
    omit_empty: bool,
}

fn style() -> impl Strategy<Value = Style> {
    (Just([0, 1, 2]).prop_shuffle(), any::<bool>(), any::<bool>()).prop_map(
        |(order, quote_name, omit_empty)| Style {
            order,
            quote_name,
            omit_empty,
        },
    )
}

fn entry_yaml(tier: &TierSpec, style: &Style) -> Yaml {
    // A plain name that YAML reads as another type (`1`, `0o17`, `null`) must be quoted.
    let plain = serde_yaml::from_str::<serde_yaml::Value>(&tier.name).ok();
    let name = if style.quote_name || plain.as_ref().and_then(|v| v.as_str()) != Some(&tier.name) {
        format!("'{}'", tier.name)
    } else {
        tier.name.clone()
    };
    let fields = [
        Some(("name", name)),
        Some(("priority", tier.priority.to_string())),
        (!(style.omit_empty && tier.description.is_empty()))
            .then(|| ("description", quoted(&tier.description))),
    ];
    Yaml::Map(
        style
            .order
            .iter()
            .filter_map(|&i| fields[i].clone())
            .map(|(k, v)| (Yaml::scalar(k), Yaml::Scalar(v)))
            .collect(),
    )
}

fn file(entries: Vec<Yaml>, block: bool) -> String {
    Yaml::Map(vec![(Yaml::scalar("tiers"), Yaml::Seq(entries))]).render(block)
}

/// One defect in one entry: what to write, the field the problem must name, and whether the
/// problem is reported on the Tier (or only on the document).
#[derive(Clone, Debug)]
enum Defect {
    /// The name as written, and the label of its problems (`None`: the position).
    Name(&'static str, Option<&'static str>),
    NoName,
    Priority(String),
    NoPriority,
    Description(&'static str),
    Unknown(String),
}

fn defect() -> impl Strategy<Value = Defect> {
    prop_oneof![
        prop::sample::select(vec![
            ("Bad_Name", Some("Bad_Name")),
            ("-a", Some("-a")),
            ("a-", Some("a-")),
            ("a..b", Some("a..b")),
            ("'a b'", Some("a b")),
            ("!!binary YQ==", Some("YQ==")),
            ("\"\"", None),
            ("~", None),
            ("1", None),
            ("[a]", None),
            ("{a: b}", None),
        ])
        .prop_map(|(name, label)| Defect::Name(name, label)),
        Just(Defect::NoName),
        prop_oneof![
            prop::sample::select(vec![
                "251",
                "252",
                "254",
                "255",
                "256",
                "-1",
                "10.0",
                "1e3",
                ".nan",
                "~",
                "x",
                "'10'",
                "[10]",
                "{a: 1}",
                "true",
                "9223372036854775807",
                "-9223372036854775808",
                "1e400",
                "99999999999999999999999999999999999999999999",
            ])
            .prop_map(str::to_owned),
            (256i64..).prop_map(|p| p.to_string()),
            (..0i64).prop_map(|p| p.to_string()),
        ]
        .prop_map(Defect::Priority),
        Just(Defect::NoPriority),
        prop::sample::select(vec!["1", "[a]", "{a: b}", "true", "1.5"])
            .prop_map(Defect::Description),
        prop_oneof![
            Just("colour".to_owned()),
            Just("Name".to_owned()),
            Just("~".to_owned()),
            Just("1".to_owned()),
            "[a-z]{1,8}".prop_filter("unknown", |k| !["name", "priority", "description"]
                .contains(&k.as_str())),
        ]
        .prop_map(Defect::Unknown),
    ]
}

impl Defect {
    /// Writes the defect into `entry` (a map written by [`entry_yaml`]).
    fn apply(&self, entry: &mut Yaml) {
        let Yaml::Map(fields) = entry else {
            unreachable!("entries are maps")
        };
        let mut set = |key: &str, value: Option<&str>| {
            fields.retain(|(k, _)| !matches!(k, Yaml::Scalar(s) if s == key));
            if let Some(v) = value {
                fields.push((Yaml::scalar(key), Yaml::scalar(v)));
            }
        };
        match self {
            Defect::Name(v, _) => set("name", Some(v)),
            Defect::NoName => set("name", None),
            Defect::Priority(v) => set("priority", Some(v)),
            Defect::NoPriority => set("priority", None),
            Defect::Description(v) => set("description", Some(v)),
            Defect::Unknown(k) => fields.push((Yaml::Scalar(k.clone()), Yaml::scalar("1"))),
        }
    }

    /// The field the problem names.
    fn field(&self) -> &str {
        match self {
            Defect::Name(..) | Defect::NoName => "metadata.name",
            Defect::Priority(_) | Defect::NoPriority => "spec.priority",
            Defect::Description(_) => "spec.description",
            Defect::Unknown(k) if k == "~" => "null",
            Defect::Unknown(k) => k,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The properties.

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        check(&text).unwrap_err();
    }

    #[test]
    fn yaml_like_text_never_panics(text in "[a-z0-9:#&*!?|>'\"{}\\[\\],. \\n-]{0,120}") {
        let _ = check(&text);
    }

    #[test]
    fn yaml_documents_never_panic(doc in yaml(), block in any::<bool>()) {
        let _ = check(&doc.render(block));
    }

    #[test]
    fn tiers_like_documents_never_panic(doc in document(), block in any::<bool>()) {
        let _ = check(&doc.render(block));
    }

    #[test]
    fn a_valid_file_is_accepted_as_written(
        tiers in valid_set(),
        styles in prop::collection::vec(style(), 20),
        block in any::<bool>(),
    ) {
        let entries = tiers.iter().zip(&styles).map(|(t, s)| entry_yaml(t, s)).collect();
        let text = file(entries, block);
        let set = check(&text).unwrap_or_else(|p| panic!("{p:?} in {text}"));
        prop_assert_eq!(set.tiers(), tiers.as_slice(), "{}", text);
    }

    #[test]
    fn one_defect_is_reported_on_its_tier(
        tiers in valid_set(),
        styles in prop::collection::vec(style(), 20),
        at in any::<prop::sample::Index>(),
        defect in defect(),
        block in any::<bool>(),
    ) {
        let mut entries: Vec<Yaml> =
            tiers.iter().zip(&styles).map(|(t, s)| entry_yaml(t, s)).collect();
        let at = at.index(entries.len());
        defect.apply(&mut entries[at]);
        let text = file(entries, block);
        let problems = check(&text).unwrap_err();
        // The name shown is the entry's name when it is still a usable string, else none.
        let label = match &defect {
            Defect::Name(_, Some(label)) => (*label).to_owned(),
            Defect::Name(_, None) | Defect::NoName => String::new(),
            _ => tiers[at].name.clone(),
        };
        prop_assert!(
            problems
                .iter()
                .any(|p| p.index == Some(at) && p.tier == label && p.field == defect.field()),
            "{:?} not reported on {} {}: {:?} in\n{}",
            defect,
            label,
            defect.field(),
            problems,
            text
        );
    }

    #[test]
    fn nesting_of_any_depth_is_handled(depth in 0usize..400, kind in 0u8..3) {
        let text = match kind {
            0 => format!("tiers: {}{}", "[".repeat(depth), "]".repeat(depth)),
            1 => format!("tiers: {}1{}", "{a: ".repeat(depth), "}".repeat(depth)),
            _ => {
                let mut text = "tiers:\n".to_owned();
                for i in 0..depth {
                    text.push_str(&" ".repeat(i));
                    text.push_str("-\n");
                }
                text
            }
        };
        let problems = check(&text).unwrap_err();
        if kind < 2 && depth > 32 {
            prop_assert!(problems[0].detail.contains("nested deeper than 32"), "{:?}", problems);
        } else if depth > 130 {
            let rule = &problems[0].detail;
            let refused = rule.contains("recursion limit exceeded") || rule.contains("at most");
            prop_assert!(refused, "{:?}", problems);
        }
    }
}

/// Times `parse(text)`, asserting the shape of the outcome.
fn timed(text: &str) -> (Duration, Result<DesiredSet, Vec<Problem>>) {
    let start = Instant::now();
    let result = check(text);
    (start.elapsed(), result)
}

#[test]
fn alias_bombs_are_refused_quickly() {
    for levels in 2..=10 {
        // a0 holds 10 scalars (or a Tier), and each level 10 aliases of the one below.
        for leaf in ["[x, x, x, x, x, x, x, x, x, x]", "{name: a, priority: 1}"] {
            let mut text = format!("a0: &a0 {leaf}\n");
            for l in 1..levels {
                let aliases = vec![format!("*a{}", l - 1); 10].join(", ");
                text.push_str(&format!("a{l}: &a{l} [{aliases}]\n"));
            }
            text.push_str(&format!("tiers: [*a{}]\n", levels - 1));
            let (elapsed, result) = timed(&text);
            let problems = result.unwrap_err();
            assert!(
                elapsed < Duration::from_secs(2),
                "{levels} levels: {elapsed:?}"
            );
            if levels >= 5 {
                assert!(
                    problems[0].detail.contains("repetition limit exceeded"),
                    "{problems:?}"
                );
            }
        }
    }
}

/// Files up to the size limit are parsed in full (not refused for their size, which would make
/// this test vacuous) and quickly: no input the limit lets through can blow the parser up.
/// (The time bound catches super-linear blow-ups such as alias expansion, not constant
/// factors; `tier-bench` measures speed.)
#[test]
fn files_at_the_size_limit_are_parsed_quickly() {
    use tierd::tiers_file::MAX_BYTES;

    let fill = |line: &dyn Fn(usize) -> String, head: &str| {
        let mut text = head.to_owned();
        for i in 0.. {
            let next = line(i);
            if text.len() + next.len() > MAX_BYTES {
                break;
            }
            text.push_str(&next);
        }
        text
    };
    for text in [
        fill(
            &|i| format!("  - {{name: t{i}, priority: {}}}\n", i % 300),
            "tiers:\n",
        ),
        fill(
            &|_| "  - *t\n".to_owned(),
            "x: &t {name: a, priority: 1}\ntiers:\n",
        ),
        format!(
            "tiers:\n  - name: {}\n    priority: 1\n",
            "a".repeat(MAX_BYTES - 40)
        ),
    ] {
        assert!(text.len() <= MAX_BYTES && text.len() > MAX_BYTES - 100);
        let (elapsed, result) = timed(&text);
        let problems = result.err().unwrap_or_default();
        assert!(
            !problems.iter().any(|p| p.field == "document"),
            "refused before parsing: {:?}",
            problems.first()
        );
        assert!(
            problems.iter().any(|p| p.tier != "-"),
            "parsed: problems name Tiers"
        );
        assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    }
}

/// Asserts that `priority` gives exactly one problem, on Tier `a`'s priority.
fn assert_priority_problem(priority: &str) {
    let problems = check(&format!("tiers: [{{name: a, priority: {priority}}}]")).unwrap_err();
    assert_eq!(problems.len(), 1, "{priority}: {problems:?}");
    assert_eq!(
        (problems[0].tier.as_str(), problems[0].field.as_str()),
        ("a", "spec.priority"),
        "{priority}: {problems:?}"
    );
}

#[test]
fn numbers_beyond_i64_are_priority_problems() {
    for priority in [
        "1e400",
        "-1e400",
        "9223372036854775808",
        "18446744073709551615",
        "1e3",
        "10.0",
        ".inf",
        // Beyond u128: read as a float.
        "999999999999999999999999999999999999999999",
    ] {
        assert_priority_problem(priority);
    }
}

/// Integers beyond u64 (or below i64) that fit an i128 are refused by serde_yaml's `Value`
/// ("invalid type: integer `...` as u128, expected any YAML value"), so the problem is reported
/// on the document (`tier -: document: not valid YAML: ...`) instead of the Tier's priority.
#[test]
#[ignore = "serde_yaml cannot represent 20- to 39-digit integers: they are reported on the document, as out of range, not on the Tier"]
fn integers_beyond_u64_are_priority_problems() {
    for priority in ["18446744073709551616", "-9223372036854775809"] {
        assert_priority_problem(priority);
    }
}

#[test]
fn aliased_tiers_are_duplicates() {
    // Aliases of a whole Tier and of a merged mapping: the same Tier twice is a duplicate.
    let problems = check("x: &t {name: a, priority: 1}\ntiers: [*t, *t]\n").unwrap_err();
    let fields: BTreeSet<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert!(
        fields.contains("x")
            && fields.contains("metadata.name")
            && fields.contains("spec.priority")
    );
}

/// Found by the `tiers_file` fuzz target: an empty key yields a problem whose field is empty.
#[test]
fn an_empty_key_is_named() {
    for text in ["?\n>", "\"\": 1", "tiers: [{name: a, priority: 1, '': 2}]"] {
        check(text).unwrap_err();
    }
}

/// Deeply nested flow collections take quadratic time in the YAML scanner (unsafe-libyaml
/// rescans its stack of possible simple keys, one per open `[`/`{`, for every token), all of it
/// before serde_yaml's recursion limit of 128 applies. Debug build: 10 000 levels (20 KB) take
/// about 0.6 s, 30 000 about 5 s, 100 000 (200 KB) 45 to 60 s.
#[test]
fn deep_flow_nesting_is_refused_quickly() {
    let depth = 30_000;
    let text = format!("tiers: {}{}", "[".repeat(depth), "]".repeat(depth));
    let (elapsed, _) = timed(&text);
    assert!(
        elapsed < Duration::from_secs(1),
        "{depth} levels: {elapsed:?}"
    );
}
