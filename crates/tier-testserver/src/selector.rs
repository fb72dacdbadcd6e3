//! Label and field selectors of list and watch requests (`labelSelector`, `fieldSelector`).
//!
//! Field selectors support `metadata.name` and `metadata.namespace` (what kube-apiserver
//! allows for custom resources); label selectors support `k=v`, `k==v`, `k!=v`, `k`, `!k`,
//! `k in (a,b)` and `k notin (a,b)`.

use serde_json::Value;

use crate::status::StatusError;
use crate::util::object_name;

/// A parsed pair of selectors; the default matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Selector {
    labels: Vec<LabelRequirement>,
    fields: Vec<FieldRequirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    field: Field,
    value: String,
    equal: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Name,
    Namespace,
}

impl Selector {
    /// Parses both selectors; 400 BadRequest on syntax errors or unsupported field labels.
    pub(crate) fn parse(labels: &str, fields: &str) -> Result<Self, StatusError> {
        Ok(Self {
            labels: parse_labels(labels)?,
            fields: parse_fields(fields)?,
        })
    }

    /// Whether a label selector is present (kube-apiserver omits `remainingItemCount` then).
    pub(crate) fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// Whether `obj` matches every requirement.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.fields.iter().all(|r| {
            let actual = match r.field {
                Field::Name => object_name(obj).unwrap_or_default(),
                Field::Namespace => obj
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            };
            (actual == r.value) == r.equal
        }) && self.labels.iter().all(|r| label_matches(r, obj))
    }
}

fn label_matches(req: &LabelRequirement, obj: &Value) -> bool {
    let label = |key: &str| {
        obj.pointer("/metadata/labels")
            .and_then(|l| l.get(key))
            .and_then(Value::as_str)
    };
    match req {
        LabelRequirement::Equals(k, v) => label(k) == Some(v.as_str()),
        LabelRequirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
        LabelRequirement::Exists(k) => label(k).is_some(),
        LabelRequirement::NotExists(k) => label(k).is_none(),
        LabelRequirement::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
        LabelRequirement::NotIn(k, vs) => !label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
    }
}

fn parse_fields(text: &str) -> Result<Vec<FieldRequirement>, StatusError> {
    let mut out = Vec::new();
    for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (key, value, equal) = if let Some((k, v)) = term.split_once("!=") {
            (k, v, false)
        } else if let Some((k, v)) = term.split_once("==") {
            (k, v, true)
        } else if let Some((k, v)) = term.split_once('=') {
            (k, v, true)
        } else {
            return Err(StatusError::bad_request(format!(
                "invalid selector: '{text}'; can't understand '{term}'"
            )));
        };
        let field = match key.trim() {
            "metadata.name" => Field::Name,
            "metadata.namespace" => Field::Namespace,
            other => {
                return Err(StatusError::bad_request(format!(
                    "field label not supported: {other}"
                )));
            }
        };
        out.push(FieldRequirement {
            field,
            value: value.trim().to_owned(),
            equal,
        });
    }
    Ok(out)
}

/// Splits at commas outside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_labels(text: &str) -> Result<Vec<LabelRequirement>, StatusError> {
    let bad = |term: &str| {
        StatusError::bad_request(format!(
            "unable to parse requirement: found '{term}', expected a valid label selector"
        ))
    };
    let mut out = Vec::new();
    for term in split_top_level(text)
        .into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let req = if let Some(key) = term.strip_prefix('!') {
            LabelRequirement::NotExists(valid_key(key.trim()).ok_or_else(|| bad(term))?)
        } else if let Some((k, v)) = term.split_once("!=") {
            LabelRequirement::NotEquals(
                valid_key(k.trim()).ok_or_else(|| bad(term))?,
                v.trim().to_owned(),
            )
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            LabelRequirement::Equals(
                valid_key(k.trim()).ok_or_else(|| bad(term))?,
                v.trim().to_owned(),
            )
        } else if let Some((k, rest)) = set_operator(term, " notin ") {
            LabelRequirement::NotIn(
                valid_key(k).ok_or_else(|| bad(term))?,
                set_values(rest).ok_or_else(|| bad(term))?,
            )
        } else if let Some((k, rest)) = set_operator(term, " in ") {
            LabelRequirement::In(
                valid_key(k).ok_or_else(|| bad(term))?,
                set_values(rest).ok_or_else(|| bad(term))?,
            )
        } else {
            LabelRequirement::Exists(valid_key(term).ok_or_else(|| bad(term))?)
        };
        out.push(req);
    }
    Ok(out)
}

fn set_operator<'a>(term: &'a str, op: &str) -> Option<(&'a str, &'a str)> {
    term.find(op)
        .map(|i| (term[..i].trim(), term[i + op.len()..].trim()))
}

fn set_values(text: &str) -> Option<Vec<String>> {
    let inner = text.strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

fn valid_key(key: &str) -> Option<String> {
    let ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    ok.then(|| key.to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(name: &str, labels: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}})
    }

    #[test]
    fn empty_selectors_match_everything() {
        let s = Selector::parse("", "").unwrap();
        assert!(s.is_empty());
        assert!(s.matches(&obj("a", json!({}))));
    }

    #[test]
    fn field_selector_filters_by_name() {
        let s = Selector::parse("", "metadata.name=baseline").unwrap();
        assert!(s.matches(&obj("baseline", json!({}))));
        assert!(!s.matches(&obj("other", json!({}))));
        let s = Selector::parse("", "metadata.name!=baseline,metadata.namespace=").unwrap();
        assert!(!s.matches(&obj("baseline", json!({}))));
        assert!(s.matches(&obj("other", json!({}))));
        assert_eq!(
            Selector::parse("", "spec.priority=1").unwrap_err().message,
            "field label not supported: spec.priority"
        );
        assert_eq!(Selector::parse("", "nonsense").unwrap_err().code, 400);
    }

    #[test]
    fn label_selector_operators() {
        let o = obj("a", json!({"app": "web", "tier": "x"}));
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app in (db, web)", true),
            ("app notin (db,web)", false),
            ("app=web,tier=y", false),
            ("app in (db),tier", false),
        ] {
            assert_eq!(Selector::parse(sel, "").unwrap().matches(&o), want, "{sel}");
        }
        assert_eq!(Selector::parse("a in b", "").unwrap_err().code, 400);
    }
}
