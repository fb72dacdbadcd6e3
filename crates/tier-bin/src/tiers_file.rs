//! The `--tiers FILE` format: a YAML document that replaces the default Antrea set.
//!
//! ```yaml
//! tiers:
//!   - name: baseline
//!     priority: 253
//!     description: "[READ-ONLY]: System generated Baseline Tier"
//! ```
//!
//! [`parse`] reports every problem at once (Tier, field, rule): shape errors found while reading
//! the document, then the rules of [`tier_core::DesiredSet`] over every well-formed entry. Nothing is sent to any API before
//! the file is valid.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_yaml::Value;
use tier_core::{DesiredSet, TierSpec, ValidationRules};

/// One problem in a Tiers file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The Tier (its name, or `#index` when it has no usable name), or `-` for the document.
    pub tier: String,
    /// The field, e.g. `priority`.
    pub field: String,
    /// What is wrong and what is expected.
    pub rule: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tier {}: {}: {}", self.tier, self.field, self.rule)
    }
}

/// Why a Tiers file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TiersFileError {
    /// The file could not be read.
    #[error("cannot read the Tiers file {path}: {source}; check the path and its permissions")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but is not a valid desired set.
    #[error("the Tiers file {path} is invalid ({} problem(s)):{}", .problems.len(), list(.problems))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem found.
        problems: Vec<Problem>,
    },
}

fn list(problems: &[Problem]) -> String {
    problems.iter().map(|p| format!("\n  - {p}")).collect()
}

/// Reads and validates the Tiers file at `path`.
///
/// # Errors
///
/// [`TiersFileError::Read`] when unreadable, [`TiersFileError::Invalid`] listing every problem.
pub fn load(path: &Path) -> Result<DesiredSet, TiersFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| TiersFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text).map_err(|problems| TiersFileError::Invalid {
        path: path.to_owned(),
        problems,
    })
}

/// The largest Tiers file accepted (a file of 20 Tiers is about 2 KiB).
pub const MAX_BYTES: usize = 64 * 1024;

/// The deepest nesting of flow collections (`[`, `{`) accepted before parsing: the YAML scanner
/// takes time quadratic in it, and a Tiers file needs three levels.
pub const MAX_FLOW_DEPTH: usize = 32;

/// Parses and validates a Tiers document; on failure returns every problem found.
pub fn parse(text: &str) -> Result<DesiredSet, Vec<Problem>> {
    if text.len() > MAX_BYTES {
        return Err(vec![problem(
            "-",
            "document",
            format!("{} bytes, at most {MAX_BYTES} are accepted", text.len()),
        )]);
    }
    if flow_depth(text) > MAX_FLOW_DEPTH {
        return Err(vec![problem(
            "-",
            "document",
            format!("`[`/`{{` nested deeper than {MAX_FLOW_DEPTH} levels"),
        )]);
    }
    let doc: Value = serde_yaml::from_str(text).map_err(|e| {
        let what = e.to_string();
        // serde_yaml reads 20- to 39-digit integers as 128-bit ones, which it cannot represent.
        let rule = if what.contains("u128") || what.contains("i128") {
            format!("a number is out of range (priorities are 0 to 255): {what}")
        } else {
            format!("not valid YAML: {what}")
        };
        vec![problem("-", "document", rule)]
    })?;
    let Some(map) = doc.as_mapping() else {
        return Err(vec![problem(
            "-",
            "document",
            "expected a mapping with a `tiers` list".to_owned(),
        )]);
    };
    let mut problems = Vec::new();
    for key in map.keys() {
        if key.as_str() != Some("tiers") {
            problems.push(problem(
                "-",
                &key_name(key),
                "unknown field; only `tiers` is allowed".to_owned(),
            ));
        }
    }
    let entries = match map.get("tiers") {
        Some(Value::Sequence(entries)) if !entries.is_empty() => entries.as_slice(),
        Some(Value::Sequence(_)) => {
            problems.push(problem(
                "-",
                "tiers",
                "must list at least one Tier".to_owned(),
            ));
            &[]
        }
        Some(_) => {
            problems.push(problem("-", "tiers", "must be a list of Tiers".to_owned()));
            &[]
        }
        None => {
            problems.push(problem("-", "tiers", "is required".to_owned()));
            &[]
        }
    };
    let mut specs = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        if let Some(spec) = read_entry(index, entry, &mut problems) {
            specs.push(spec);
        }
    }
    // The rules apply to every well-formed entry, so one malformed entry hides no other problem.
    match DesiredSet::new(specs, &ValidationRules::default()) {
        Ok(set) if problems.is_empty() => Ok(set),
        Ok(_) => Err(problems),
        Err(err) => {
            problems.extend(
                err.violations()
                    .iter()
                    .map(|v| problem(&v.tier, v.field, v.rule.to_string())),
            );
            Err(problems)
        }
    }
}

fn read_entry(index: usize, entry: &Value, problems: &mut Vec<Problem>) -> Option<TierSpec> {
    let Some(map) = entry.as_mapping() else {
        problems.push(problem(
            &format!("#{index}"),
            "-",
            "each Tier must be a mapping with name, priority and description".to_owned(),
        ));
        return None;
    };
    let name = match map.get("name") {
        Some(Value::String(name)) => Some(name.clone()),
        Some(_) => None,
        None => None,
    };
    let label = name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("#{index}"));
    let before = problems.len();
    match map.get("name") {
        Some(Value::String(_)) => {}
        Some(_) => problems.push(problem(&label, "name", "must be a string".to_owned())),
        None => problems.push(problem(&label, "name", "is required".to_owned())),
    }
    let priority = match map.get("priority") {
        Some(Value::Number(n)) => match n.as_i64() {
            Some(p) => Some(p),
            None => {
                problems.push(problem(
                    &label,
                    "priority",
                    "must be a whole number between 0 and 255".to_owned(),
                ));
                None
            }
        },
        Some(_) => {
            problems.push(problem(
                &label,
                "priority",
                "must be a whole number between 0 and 255".to_owned(),
            ));
            None
        }
        None => {
            problems.push(problem(&label, "priority", "is required".to_owned()));
            None
        }
    };
    let description = match map.get("description") {
        None | Some(Value::Null) => Some(String::new()),
        Some(Value::String(d)) => Some(d.clone()),
        Some(_) => {
            problems.push(problem(
                &label,
                "description",
                "must be a string".to_owned(),
            ));
            None
        }
    };
    for key in map.keys() {
        if !matches!(key.as_str(), Some("name" | "priority" | "description")) {
            problems.push(problem(
                &label,
                &key_name(key),
                "unknown field; allowed are name, priority and description".to_owned(),
            ));
        }
    }
    if problems.len() > before {
        return None;
    }
    Some(TierSpec::new(name?, priority?, description?))
}

/// The deepest nesting of `[` and `{` outside quoted scalars and comments: an upper bound good
/// enough to refuse pathological input before the YAML scanner sees it.
fn flow_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut quote: Option<char> = None;
    let mut after_space = true;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some('"'), '\\') => {
                chars.next();
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') if after_space => {
                // A comment runs to the end of the line.
                chars.by_ref().find(|&rest| rest == '\n');
            }
            (None, '[' | '{') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (None, ']' | '}') => depth = depth.saturating_sub(1),
            _ => {}
        }
        after_space = c.is_whitespace() || c == '#';
    }
    deepest
}

fn key_name(key: &Value) -> String {
    match key {
        Value::String(s) if s.is_empty() => "\"\"".to_owned(),
        Value::String(s) => s.clone(),
        other => serde_yaml::to_string(other)
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "?".to_owned()),
    }
}

fn problem(tier: &str, field: &str, rule: String) -> Problem {
    Problem {
        tier: tier.to_owned(),
        field: field.to_owned(),
        rule,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_valid_file() {
        let set = parse(
            "tiers:\n  - name: a\n    priority: 10\n    description: first\n  - name: b\n    priority: 11\n",
        )
        .unwrap();
        assert_eq!(
            set.tiers(),
            [TierSpec::new("a", 10, "first"), TierSpec::new("b", 11, "")]
        );
    }

    #[test]
    fn reports_every_shape_problem_at_once() {
        let problems = parse(
            "extra: 1\ntiers:\n  - name: a\n    priority: high\n  - priority: 3\n  - name: c\n    priority: 4\n    colour: red\n  - 7\n",
        )
        .unwrap_err();
        let got: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "tier -: extra: unknown field; only `tiers` is allowed",
                "tier a: priority: must be a whole number between 0 and 255",
                "tier #1: name: is required",
                "tier c: colour: unknown field; allowed are name, priority and description",
                "tier #3: -: each Tier must be a mapping with name, priority and description",
            ]
        );
    }

    #[test]
    fn reports_every_rule_violation_at_once() {
        let problems = parse(
            "tiers:\n  - {name: Bad_Name, priority: 10}\n  - {name: b, priority: 254}\n  - {name: c, priority: 10}\n  - {name: d, priority: 300}\n",
        )
        .unwrap_err();
        let got: Vec<(&str, &str)> = problems
            .iter()
            .map(|p| (p.tier.as_str(), p.field.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("Bad_Name", "name"),
                ("b", "priority"),
                ("c", "priority"),
                ("d", "priority")
            ]
        );
        assert!(problems[1].rule.contains("reserved"), "{:?}", problems[1]);
        assert!(
            problems[2]
                .rule
                .contains("already used by tier \"Bad_Name\""),
            "{:?}",
            problems[2]
        );
    }

    #[test]
    fn a_malformed_entry_hides_no_rule_violation() {
        let problems = parse("tiers:\n  - {name: a, priority: x}\n  - {name: b, priority: 251}\n")
            .unwrap_err();
        let got: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "tier a: priority: must be a whole number between 0 and 255",
                "tier b: priority: is reserved; choose another priority",
            ]
        );
    }

    #[test]
    fn pathological_documents_are_refused_before_parsing() {
        let deep = format!("tiers: {}{}", "[".repeat(33), "]".repeat(33));
        assert!(
            parse(&deep).unwrap_err()[0]
                .rule
                .contains("nested deeper than 32")
        );
        // Brackets in quotes and comments do not count.
        let quoted = format!(
            "# {}\ntiers:\n  - {{name: a, priority: 1, description: \"{}\"}}\n",
            "[".repeat(40),
            "{".repeat(40)
        );
        assert!(parse(&quoted).is_ok(), "{:?}", parse(&quoted));
        let big = format!("tiers: []\n#{}", "x".repeat(MAX_BYTES));
        assert!(parse(&big).unwrap_err()[0].rule.contains("at most 65536"));
        let huge = parse("tiers: [{name: a, priority: 18446744073709551616}]").unwrap_err();
        assert!(
            huge[0].rule.starts_with("a number is out of range"),
            "{huge:?}"
        );
        let empty_key = parse("\"\": 1").unwrap_err();
        assert_eq!(empty_key[0].field, "\"\"");
    }

    #[test]
    fn syntax_errors_and_wrong_shapes() {
        assert_eq!(parse("tiers: [").unwrap_err()[0].field, "document");
        assert_eq!(parse("- a").unwrap_err()[0].field, "document");
        assert_eq!(
            parse("tiers: []").unwrap_err()[0].rule,
            "must list at least one Tier"
        );
        assert_eq!(parse("{}").unwrap_err()[0].rule, "is required");
    }
}
