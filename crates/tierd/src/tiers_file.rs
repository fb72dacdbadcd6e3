//! The `--tiers FILE` format of `tierd` (a YAML document that replaces the default Antrea set),
//! for the binary and for embedders that read the same file.
//!
//! ```yaml
//! tiers:
//!   - name: baseline
//!     priority: 253
//!     description: "[READ-ONLY]: System generated Baseline Tier"
//! ```
//!
//! [`parse`] reports every problem at once, one line each in Kubernetes' field-error form (as
//! kube-apiserver reports an invalid object): the entry's position and name, the field path in
//! the Tier object, the kind of error, the offending value and the rule:
//!
//! ```text
//! tiers[1] (networkops): spec.priority: Invalid value: 300: must be less than or equal to 255
//! tiers[2] (c): colour: Forbidden: unknown field; the fields are name, priority and description
//! tiers[3]: metadata.name: Required value: name is required
//! ```
//!
//! Calico's Tiers (`tierd --controller calico`, [`parse_calico`]) use the same document with
//! Calico's fields: `name`, `order` (a number, absent meaning last) and `defaultAction`
//! (`Deny`, the default, or `Pass`); the built-in names must carry Calico's values.
//!
//! ```yaml
//! tiers:
//!   - name: security
//!     order: 100
//!     defaultAction: Pass
//! ```
//!
//! Shape errors found while reading the document come first, then the rules of
//! [`tier_core::DesiredSet`] over every well-formed entry (so one malformed entry hides no other
//! problem). Nothing here talks to an API: `tierd` validates the file before it builds a
//! client.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_yaml::Value;
use tier_core::calico::{self, Calico, DefaultAction};
use tier_core::{
    Controller, DesiredSet, ErrorType, Rule, TierSpec, ValidationError, ValidationRules, Violation,
};

/// One problem in a Tiers file, in Kubernetes' field-error form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The entry's position in the `tiers` list; `None` for the document or the list itself.
    pub index: Option<usize>,
    /// The entry's name when it has a usable one, else empty.
    pub tier: String,
    /// The field path: `metadata.name`, `spec.priority`, `spec.description`, an unknown key,
    /// `tiers`; empty for the entry as a whole, or (with no index) the document as a whole.
    pub field: String,
    /// The kind of error.
    pub kind: ErrorType,
    /// The offending value as Kubernetes prints it (strings quoted, numbers bare), if any.
    pub value: Option<String>,
    /// The rule, or what is wrong (may be empty for `Required value`).
    pub detail: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.index.is_none() && self.field.is_empty() {
            return f.write_str(&self.detail);
        }
        if let Some(index) = self.index {
            write!(f, "tiers[{index}]")?;
            if !self.tier.is_empty() {
                write!(f, " ({})", self.tier)?;
            }
            f.write_str(": ")?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        write!(f, "{}", self.kind)?;
        if let Some(value) = &self.value {
            write!(f, ": {value}")?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
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

/// Reads the Tiers file at `path` and hands its text to `parse` (one parser per controller's
/// format; Antrea's is [`parse_with`]), naming the file in either error.
///
/// ```no_run
/// use tier_core::ValidationRules;
/// use tierd::tiers_file;
///
/// let rules = ValidationRules::default();
/// let desired = tiers_file::load("tiers.yaml".as_ref(), |text| tiers_file::parse_with(text, &rules));
/// ```
///
/// # Errors
///
/// [`TiersFileError::Read`] when unreadable, [`TiersFileError::Invalid`] listing every problem
/// `parse` found.
pub fn load<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, Vec<Problem>>,
) -> Result<T, TiersFileError> {
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

/// The fields of an entry, as the file names them and as the Tier object does.
const FIELDS: [(&str, &str); 3] = [
    ("name", "metadata.name"),
    ("priority", "spec.priority"),
    ("description", "spec.description"),
];

/// Parses and validates a Tiers document under Antrea's default rules; on failure returns every
/// problem found.
pub fn parse(text: &str) -> Result<DesiredSet, Vec<Problem>> {
    parse_with(text, &ValidationRules::default())
}

/// Parses and validates a Tiers document under `rules`; on failure returns every problem found.
pub fn parse_with(text: &str, rules: &ValidationRules) -> Result<DesiredSet, Vec<Problem>> {
    parse_document(text, "priorities are 0 to 255", read_entry, |specs| {
        DesiredSet::new(specs, rules)
    })
}

/// Parses and validates a Tiers document of Calico's fields (`name`, `order`: an optional
/// number, `defaultAction`: `Deny` (the default) or `Pass`) under `rules` (Calico's built-in
/// Tiers pinned by default); on failure returns every problem found.
///
/// ```
/// use tier_core::calico::{DefaultAction, Rules};
/// use tierd::tiers_file;
///
/// let set = tiers_file::parse_calico(
///     "tiers:\n  - {name: security, order: 100, defaultAction: Pass}\n",
///     &Rules::default(),
/// )
/// .unwrap();
/// assert_eq!(set.tiers()[0].default_action, DefaultAction::Pass);
/// let problems = tiers_file::parse_calico("tiers: [{name: default, order: 5}]", &Rules::default())
///     .unwrap_err();
/// assert_eq!(
///     problems[0].to_string(),
///     "tiers[0] (default): spec.order: Invalid value: 5: must be 1000000 for this built-in Tier"
/// );
/// ```
pub fn parse_calico(text: &str, rules: &calico::Rules) -> Result<DesiredSet<Calico>, Vec<Problem>> {
    parse_document(text, "orders are floats", read_calico_entry, |specs| {
        DesiredSet::new(specs, rules)
    })
}

/// The shared reading of a Tiers document: size and nesting limits, the `tiers` list, each
/// entry by `read` (one reader per controller's fields), then the set's rules by `validate`
/// over every well-formed entry. `range` says what numbers may be, for a number serde_yaml
/// cannot represent.
fn parse_document<S, C: Controller>(
    text: &str,
    range: &str,
    read: fn(usize, &Value, &mut Vec<Problem>) -> Option<S>,
    validate: impl FnOnce(Vec<S>) -> Result<DesiredSet<C>, ValidationError>,
) -> Result<DesiredSet<C>, Vec<Problem>> {
    if text.len() > MAX_BYTES {
        return Err(vec![document(format!(
            "the file is {} bytes; at most {MAX_BYTES} are accepted",
            text.len()
        ))]);
    }
    if flow_depth(text) > MAX_FLOW_DEPTH {
        return Err(vec![document(format!(
            "`[`/`{{` nested deeper than {MAX_FLOW_DEPTH} levels"
        ))]);
    }
    let doc: Value = serde_yaml::from_str(text).map_err(|e| {
        let what = e.to_string();
        // serde_yaml reads 20- to 39-digit integers as 128-bit ones, which it cannot represent.
        let rule = if what.contains("u128") || what.contains("i128") {
            format!("a number is out of range ({range}): {what}")
        } else {
            format!("not valid YAML: {what}")
        };
        vec![document(rule)]
    })?;
    let Some(map) = doc.as_mapping() else {
        return Err(vec![document(
            "the document must be a mapping with a `tiers` list".to_owned(),
        )]);
    };
    let mut problems = Vec::new();
    for key in map.keys() {
        if key.as_str() != Some("tiers") {
            problems.push(Problem {
                field: key_name(key),
                ..problem(
                    None,
                    ErrorType::Forbidden,
                    None,
                    "unknown field; the only field is tiers",
                )
            });
        }
    }
    let entries = match map.get("tiers") {
        Some(Value::Sequence(entries)) if !entries.is_empty() => entries.as_slice(),
        Some(Value::Sequence(_)) | None => {
            problems.push(problem(
                None,
                ErrorType::Required,
                None,
                "at least one Tier is required",
            ));
            &[]
        }
        Some(other) => {
            problems.push(problem(
                None,
                ErrorType::Invalid,
                render(other),
                &format!("must be a list of Tiers, not {}", kind_of(other)),
            ));
            &[]
        }
    };
    // The well-formed entries and their positions in the file.
    let mut specs = Vec::new();
    let mut positions = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        if let Some(spec) = read(index, entry, &mut problems) {
            specs.push(spec);
            positions.push(index);
        }
    }
    if specs.is_empty() {
        // Every entry (or the list itself) already has a problem.
        return Err(problems);
    }
    // The rules apply to every well-formed entry, so one malformed entry hides no other problem.
    match validate(specs) {
        Ok(set) if problems.is_empty() => Ok(set),
        Ok(_) => Err(problems),
        Err(err) => {
            problems.extend(
                err.violations()
                    .iter()
                    .map(|v| from_violation(v, &positions)),
            );
            Err(problems)
        }
    }
}

/// A core violation, with positions among the well-formed entries turned into file positions.
fn from_violation(violation: &Violation, positions: &[usize]) -> Problem {
    let at = |i: usize| positions.get(i).copied().unwrap_or(i);
    let rule = match &violation.rule {
        Rule::DuplicateName { first } => Rule::DuplicateName { first: at(*first) },
        Rule::DuplicatePriority { holder, first } => Rule::DuplicatePriority {
            holder: holder.clone(),
            first: at(*first),
        },
        other => other.clone(),
    };
    Problem {
        index: violation.index.map(at),
        tier: violation.tier.clone(),
        field: violation.field.to_owned(),
        kind: rule.error_type(),
        value: violation.value.clone(),
        detail: rule.to_string(),
    }
}

/// Entry `index` as a mapping and the name it gives (empty when none), or `None` after pushing
/// the problem "each Tier must be a mapping with `fields`".
fn entry_mapping<'a>(
    index: usize,
    entry: &'a Value,
    fields: &str,
    problems: &mut Vec<Problem>,
) -> Option<(&'a serde_yaml::Mapping, String)> {
    let Some(map) = entry.as_mapping() else {
        problems.push(Problem {
            field: String::new(),
            ..problem(
                Some(index),
                ErrorType::Invalid,
                render(entry),
                &format!(
                    "each Tier must be a mapping with {fields}, not {}",
                    kind_of(entry)
                ),
            )
        });
        return None;
    };
    let tier = match map.get("name") {
        Some(Value::String(name)) => name.clone(),
        _ => String::new(),
    };
    Some((map, tier))
}

fn read_entry(index: usize, entry: &Value, problems: &mut Vec<Problem>) -> Option<TierSpec> {
    let (map, tier) = entry_mapping(index, entry, "name, priority and description", problems)?;
    let before = problems.len();
    let mut push = |field: &str, kind, value, detail: &str| {
        problems.push(Problem {
            tier: tier.clone(),
            field: field.to_owned(),
            ..problem(Some(index), kind, value, detail)
        });
    };
    let name = read_name(map.get("name"), &mut push);
    let priority = match map.get("priority") {
        Some(Value::Number(n)) => match (n.as_i64(), n.as_u64()) {
            (Some(p), _) => Some(p),
            (None, Some(_)) => {
                push(
                    "spec.priority",
                    ErrorType::Invalid,
                    Some(n.to_string()),
                    &Rule::PriorityTooHigh.to_string(),
                );
                None
            }
            (None, None) => {
                push(
                    "spec.priority",
                    ErrorType::Invalid,
                    Some(n.to_string()),
                    "must be an integer between 0 and 255",
                );
                None
            }
        },
        Some(other) => {
            push(
                "spec.priority",
                ErrorType::Invalid,
                render(other),
                &format!(
                    "must be an integer between 0 and 255, not {}",
                    kind_of(other)
                ),
            );
            None
        }
        None => {
            push("spec.priority", ErrorType::Required, None, "");
            None
        }
    };
    let description = match map.get("description") {
        None | Some(Value::Null) => Some(String::new()),
        Some(Value::String(d)) => Some(d.clone()),
        Some(other) => {
            push(
                "spec.description",
                ErrorType::Invalid,
                render(other),
                &format!("must be a string, not {}", kind_of(other)),
            );
            None
        }
    };
    for key in map.keys() {
        let known = key
            .as_str()
            .is_some_and(|k| FIELDS.iter().any(|(name, _)| *name == k));
        if !known {
            push(
                &key_name(key),
                ErrorType::Forbidden,
                None,
                "unknown field; the fields are name, priority and description",
            );
        }
    }
    if problems.len() > before {
        return None;
    }
    Some(TierSpec::new(name?, priority?, description?))
}

/// The fields of a Calico entry, as the file names them.
const CALICO_FIELDS: [&str; 3] = ["name", "order", "defaultAction"];

/// One entry of a Calico Tiers file, or `None` after pushing its problems.
fn read_calico_entry(
    index: usize,
    entry: &Value,
    problems: &mut Vec<Problem>,
) -> Option<calico::TierSpec> {
    let (map, tier) = entry_mapping(index, entry, "name, order and defaultAction", problems)?;
    let before = problems.len();
    let mut push = |field: &str, kind, value, detail: &str| {
        problems.push(Problem {
            tier: tier.clone(),
            field: field.to_owned(),
            ..problem(Some(index), kind, value, detail)
        });
    };
    let name = read_name(map.get("name"), &mut push);
    let order = match map.get("order") {
        None | Some(Value::Null) => Some(None),
        Some(Value::Number(n)) => n.as_f64().map(Some),
        Some(other) => {
            push(
                "spec.order",
                ErrorType::Invalid,
                render(other),
                &format!("must be a number, not {}", kind_of(other)),
            );
            None
        }
    };
    let default_action = match map.get("defaultAction") {
        None | Some(Value::Null) => Some(DefaultAction::Deny),
        Some(Value::String(action)) if action == "Deny" => Some(DefaultAction::Deny),
        Some(Value::String(action)) if action == "Pass" => Some(DefaultAction::Pass),
        Some(other) => {
            push(
                "spec.defaultAction",
                ErrorType::Unsupported,
                render(other),
                "supported values: \"Deny\", \"Pass\"",
            );
            None
        }
    };
    for key in map.keys() {
        if !key.as_str().is_some_and(|k| CALICO_FIELDS.contains(&k)) {
            push(
                &key_name(key),
                ErrorType::Forbidden,
                None,
                "unknown field; the fields are name, order and defaultAction",
            );
        }
    }
    if problems.len() > before {
        return None;
    }
    Some(calico::TierSpec::new(name?, order?, default_action?))
}

/// The `name` of an entry: a string, required.
fn read_name(
    value: Option<&Value>,
    push: &mut impl FnMut(&str, ErrorType, Option<String>, &str),
) -> Option<String> {
    match value {
        Some(Value::String(name)) => Some(name.clone()),
        Some(other) => {
            push(
                "metadata.name",
                ErrorType::Invalid,
                render(other),
                &format!("must be a string, not {}", kind_of(other)),
            );
            None
        }
        None => {
            push(
                "metadata.name",
                ErrorType::Required,
                None,
                "name is required",
            );
            None
        }
    }
}

/// A value as Kubernetes prints it in `Invalid value: ...`: strings quoted, numbers and booleans
/// bare; `None` for lists and mappings (the rule names their kind instead).
fn render(value: &Value) -> Option<String> {
    match value {
        Value::Null => Some("null".to_owned()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(format!("{s:?}")),
        Value::Tagged(tagged) => render(&tagged.value).map(|v| format!("{} {v}", tagged.tag)),
        Value::Sequence(_) | Value::Mapping(_) => None,
    }
}

/// The kind of a YAML value, for "must be X, not Y".
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// A problem with the whole document (unreadable, too big, not a mapping).
fn document(detail: String) -> Problem {
    Problem {
        field: String::new(),
        ..problem(None, ErrorType::Invalid, None, &detail)
    }
}

/// A problem on `tiers` (or, with `index`, on that entry), of `kind`.
fn problem(index: Option<usize>, kind: ErrorType, value: Option<String>, detail: &str) -> Problem {
    Problem {
        index,
        tier: String::new(),
        field: "tiers".to_owned(),
        kind,
        value,
        detail: detail.to_owned(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        parse(text)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

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
        assert_eq!(
            lines(
                "extra: 1\ntiers:\n  - name: a\n    priority: high\n  - priority: 3\n  - name: c\n    priority: 4\n    colour: red\n  - 7\n  - {name: [x], priority: 1.5, description: 2}\n"
            ),
            [
                "extra: Forbidden: unknown field; the only field is tiers",
                "tiers[0] (a): spec.priority: Invalid value: \"high\": must be an integer between 0 \
                 and 255, not a string",
                "tiers[1]: metadata.name: Required value: name is required",
                "tiers[2] (c): colour: Forbidden: unknown field; the fields are name, priority and \
                 description",
                "tiers[3]: Invalid value: 7: each Tier must be a mapping with name, priority and \
                 description, not an integer",
                "tiers[4]: metadata.name: Invalid value: must be a string, not a list",
                "tiers[4]: spec.priority: Invalid value: 1.5: must be an integer between 0 and 255",
                "tiers[4]: spec.description: Invalid value: 2: must be a string, not an integer",
            ]
        );
    }

    #[test]
    fn reports_every_rule_violation_at_once_with_file_positions() {
        assert_eq!(
            lines(
                "tiers:\n  - {name: Bad_Name, priority: 10}\n  - {name: x, priority: nope}\n  - {name: b, priority: 254}\n  - {name: c, priority: 10}\n  - {name: networkops, priority: 300}\n  - {name: c, priority: 12}\n  - {name: big, priority: 18446744073709551615}\n"
            ),
            [
                "tiers[1] (x): spec.priority: Invalid value: \"nope\": must be an integer between 0 \
                 and 255, not a string",
                "tiers[6] (big): spec.priority: Invalid value: 18446744073709551615: must be less \
                 than or equal to 255",
                "tiers[0] (Bad_Name): metadata.name: Invalid value: \"Bad_Name\": must be a \
                 lowercase RFC 1123 subdomain: each label must start and end with a lowercase \
                 letter or a digit",
                "tiers[2] (b): spec.priority: Invalid value: 254: is reserved; choose another priority",
                "tiers[3] (c): spec.priority: Duplicate value: 10: already used by tiers[0] (Bad_Name)",
                "tiers[4] (networkops): spec.priority: Invalid value: 300: must be less than or equal \
                 to 255",
                "tiers[5] (c): metadata.name: Duplicate value: \"c\": already used by tiers[3]",
            ]
        );
    }

    #[test]
    fn a_malformed_entry_hides_no_rule_violation() {
        assert_eq!(
            lines("tiers:\n  - {name: a, priority: x}\n  - {name: b, priority: 251}\n"),
            [
                "tiers[0] (a): spec.priority: Invalid value: \"x\": must be an integer between 0 \
                 and 255, not a string",
                "tiers[1] (b): spec.priority: Invalid value: 251: is reserved; choose another priority",
            ]
        );
        // Every entry malformed: no rule of the set (not even "empty") is added.
        assert_eq!(
            lines("tiers:\n  - {name: a}\n"),
            ["tiers[0] (a): spec.priority: Required value"]
        );
    }

    #[test]
    fn problems_stay_structured() {
        let problems = parse("tiers: [{name: a, priority: 300}]").unwrap_err();
        assert_eq!(
            problems,
            [Problem {
                index: Some(0),
                tier: "a".into(),
                field: "spec.priority".into(),
                kind: ErrorType::Invalid,
                value: Some("300".into()),
                detail: "must be less than or equal to 255".into(),
            }]
        );
    }

    #[test]
    fn pathological_documents_are_refused_before_parsing() {
        let deep = format!("tiers: {}{}", "[".repeat(33), "]".repeat(33));
        assert!(
            parse(&deep).unwrap_err()[0]
                .detail
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
        assert!(
            parse(&big).unwrap_err()[0]
                .to_string()
                .ends_with("bytes; at most 65536 are accepted")
        );
        let huge = parse("tiers: [{name: a, priority: 18446744073709551616}]").unwrap_err();
        assert!(
            huge[0].detail.starts_with("a number is out of range"),
            "{huge:?}"
        );
        assert_eq!(
            lines("\"\": 1"),
            [
                "\"\": Forbidden: unknown field; the only field is tiers",
                "tiers: Required value: at least one Tier is required",
            ]
        );
    }

    #[test]
    fn syntax_errors_and_wrong_shapes() {
        assert!(lines("tiers: [")[0].starts_with("not valid YAML: "));
        assert_eq!(
            lines("- a"),
            ["the document must be a mapping with a `tiers` list"]
        );
        assert_eq!(
            lines("tiers: []"),
            ["tiers: Required value: at least one Tier is required"]
        );
        assert_eq!(
            lines("{}"),
            ["tiers: Required value: at least one Tier is required"]
        );
        assert_eq!(
            lines("tiers: 3"),
            ["tiers: Invalid value: 3: must be a list of Tiers, not an integer"]
        );
    }

    fn calico_lines(text: &str) -> Vec<String> {
        parse_calico(text, &calico::Rules::default())
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn parses_a_calico_file_with_optional_order_and_default_action() {
        let set = parse_calico(
            "tiers:\n  - {name: security, order: 100.5, defaultAction: Pass}\n  - name: last\n  - {name: kube-admin, order: 1000, defaultAction: Pass}\n",
            &calico::Rules::default(),
        )
        .unwrap();
        assert_eq!(
            set.tiers(),
            [
                calico::TierSpec::new("security", Some(100.5), DefaultAction::Pass),
                calico::TierSpec::new("last", None, DefaultAction::Deny),
                calico::TierSpec::new("kube-admin", Some(1000.0), DefaultAction::Pass),
            ]
        );
    }

    #[test]
    fn reports_every_calico_problem_at_once_with_file_positions() {
        assert_eq!(
            calico_lines(
                "tiers:\n  - {name: a, order: high}\n  - {name: b, defaultAction: Allow}\n  - {name: c, priority: 3}\n  - {name: Bad_Name}\n  - {name: default, order: 5}\n  - {name: d, order: .inf}\n  - {name: d}\n"
            ),
            [
                "tiers[0] (a): spec.order: Invalid value: \"high\": must be a number, not a string",
                "tiers[1] (b): spec.defaultAction: Unsupported value: \"Allow\": supported values: \"Deny\", \"Pass\"",
                "tiers[2] (c): priority: Forbidden: unknown field; the fields are name, order and defaultAction",
                "tiers[3] (Bad_Name): metadata.name: Invalid value: \"Bad_Name\": must be a lowercase RFC 1123 label: each label must start and end with a lowercase letter or a digit",
                "tiers[4] (default): spec.order: Invalid value: 5: must be 1000000 for this built-in Tier",
                "tiers[5] (d): spec.order: Invalid value: inf: must be a finite number",
                "tiers[6] (d): metadata.name: Duplicate value: \"d\": already used by tiers[5]",
            ]
        );
    }
}
