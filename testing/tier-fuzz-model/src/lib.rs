//! Test infrastructure, not shipped: the one input model of AdmissionReviews for the Tier
//! webhook, used by the cargo-fuzz target `webhook_review_structured` (in `fuzz/`, which builds
//! it with libFuzzer's bytes) and by the CI proptests in
//! `crates/tier-server/tests/fuzz_webhook.rs` (which build it from proptest's bytes with
//! [`arbitrary::Unstructured`]).
//!
//! A [`Review`] is mostly the shape kube-apiserver sends, with any field absent, of another JSON
//! type, or garbage, priorities of every JSON type (numbers beyond any machine type included) and
//! extra keys everywhere. [`Review::json`] renders it; [`Review::is_well_formed`] says whether
//! the webhook must answer it, and [`Review::expected`] computes Antrea's verdict for it
//! independently of the webhook (an oracle). [`Mutation`]s break a rendered review anywhere.

use std::fmt::Write as _;

pub use arbitrary;
use arbitrary::{Arbitrary, Unstructured};

/// The controller user of the policy under test: the one user allowed to change priorities.
pub const CONTROLLER: &str = "system:serviceaccount:kube-system:tierd";

/// Antrea's system Tiers and their priorities, as the webhook under test has them cached.
pub const SYSTEM: [(&str, i64); 6] = [
    ("baseline", 253),
    ("application", 250),
    ("platform", 200),
    ("networkops", 150),
    ("securityops", 100),
    ("emergency", 50),
];

/// The priorities Antrea reserves (no Tier may be created with them).
pub const RESERVED: [i64; 4] = [251, 252, 254, 255];

/// The longest `request.uid` the webhook echoes; a longer one is refused.
pub const MAX_UID_BYTES: usize = 128;

/// Whether `name` is a DNS-1123 subdomain (Kubernetes' rule for object names), written apart
/// from the webhook's check: at most 253 bytes of dot-separated labels, each of lowercase
/// letters, digits and `-`, starting and ending with a letter or digit.
pub fn is_dns1123_subdomain(name: &str) -> bool {
    let label = |l: &str| {
        let edge =
            |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        edge(l.chars().next())
            && edge(l.chars().last())
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    (1..=253).contains(&name.len()) && name.split('.').all(label)
}

/// `Some` one time in ten, so that replaced parts do not drown the well-formed reviews.
fn rarely<'a, T: Arbitrary<'a>>(u: &mut Unstructured<'a>) -> arbitrary::Result<Option<T>> {
    // Out of bytes, `int_in_range` gives its start: the common case.
    Ok(if u.int_in_range(0..=9u8)? == 9 {
        Some(u.arbitrary()?)
    } else {
        None
    })
}

/// Any JSON value, numbers written digit by digit included.
#[derive(Arbitrary, Clone, Debug)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A signed machine integer.
    Int(i64),
    /// An unsigned machine integer.
    UInt(u64),
    /// A float (`null` when not finite, as JSON has no such number).
    Float(f64),
    /// A string.
    Str(String),
    /// `-?digits(.fraction)?(e exponent)?`, beyond any machine type.
    BigNumber {
        /// Whether a `-` leads.
        negative: bool,
        /// The integer digits (each byte modulo 10; leading zeros dropped).
        digits: Vec<u8>,
        /// The fraction digits (each byte modulo 10).
        fraction: Vec<u8>,
        /// The exponent, if any (beyond `f64` from `e309` on).
        exponent: Option<i16>,
    },
    /// An array.
    Array(Vec<Json>),
    /// An object, keys in order, duplicates kept.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// A JSON string.
    pub fn str(s: &str) -> Self {
        Json::Str(s.to_owned())
    }

    fn object<const N: usize>(fields: [(&str, Json); N]) -> Self {
        Json::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }

    /// Whether every number in this value fits an `f64`: serde_json refuses the others
    /// ("number out of range"), as Go's encoding/json does, so kube-apiserver never sends them.
    pub fn numbers_fit(&self) -> bool {
        match self {
            Json::BigNumber { .. } => self.render().parse::<f64>().is_ok_and(f64::is_finite),
            Json::Array(items) => items.iter().all(Json::numbers_fit),
            Json::Object(fields) => fields.iter().all(|(_, v)| v.numbers_fit()),
            _ => true,
        }
    }

    /// How deeply arrays and objects nest in this value (a scalar is 0).
    pub fn depth(&self) -> usize {
        match self {
            Json::Array(items) => 1 + items.iter().map(Json::depth).max().unwrap_or(0),
            Json::Object(fields) => 1 + fields.iter().map(|(_, v)| v.depth()).max().unwrap_or(0),
            _ => 0,
        }
    }

    /// What `serde_json::Value::as_i64` makes of this value (serde_json is the oracle).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Json::Int(_) | Json::UInt(_) | Json::Float(_) | Json::BigNumber { .. } => {
                serde_json::from_str::<serde_json::Value>(&self.render())
                    .ok()
                    .and_then(|v| v.as_i64())
            }
            _ => None,
        }
    }

    /// The value of `key` in an object, as serde_json keeps it (the last one).
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(fields) => fields.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string at `request.uid`, if both keys occur exactly once.
    pub fn sent_uid(&self) -> Option<&str> {
        fn only<'a>(node: &'a Json, key: &str) -> Option<&'a Json> {
            let Json::Object(fields) = node else {
                return None;
            };
            let mut found = fields.iter().filter(|(k, _)| k == key).map(|(_, v)| v);
            let first = found.next()?;
            found.next().is_none().then_some(first)
        }
        match only(only(self, "request")?, "uid")? {
            Json::Str(uid) => Some(uid),
            _ => None,
        }
    }

    /// The JSON text of this value.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Json::UInt(u) => {
                let _ = write!(out, "{u}");
            }
            Json::Float(f) => match serde_json::Number::from_f64(*f) {
                Some(n) => {
                    let _ = write!(out, "{n}");
                }
                None => out.push_str("null"),
            },
            Json::Str(s) => write_str(out, s),
            Json::BigNumber {
                negative,
                digits,
                fraction,
                exponent,
            } => {
                if *negative {
                    out.push('-');
                }
                let digits = digit_string(digits);
                // JSON forbids leading zeros.
                let digits = digits.trim_start_matches('0');
                out.push_str(if digits.is_empty() { "0" } else { digits });
                if !fraction.is_empty() {
                    out.push('.');
                    out.push_str(&digit_string(fraction));
                }
                if let Some(e) = exponent {
                    let _ = write!(out, "e{e}");
                }
            }
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Json::Object(fields) => {
                out.push('{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_str(out, key);
                    out.push(':');
                    value.write(out);
                }
                out.push('}');
            }
        }
    }
}

fn digit_string(bytes: &[u8]) -> String {
    bytes.iter().map(|b| char::from(b'0' + b % 10)).collect()
}

fn write_str(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned()));
}

/// A field of the review: the expected type (nine times in ten), absent, or any other JSON
/// value (`null` included).
#[derive(Clone, Debug)]
pub enum Field<T> {
    /// The field, of its type.
    Value(T),
    /// The key left out.
    Absent,
    /// The field replaced by any JSON value.
    Garbage(Json),
}

impl<'a, T: Arbitrary<'a>> Arbitrary<'a> for Field<T> {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        // Out of bytes, `int_in_range` gives its start: a value.
        Ok(match u.int_in_range(0..=19u8)? {
            18 => Field::Absent,
            19 => Field::Garbage(u.arbitrary()?),
            _ => Field::Value(u.arbitrary()?),
        })
    }
}

impl<T> Field<T> {
    fn put(&self, fields: &mut Vec<(String, Json)>, key: &str, to_json: impl Fn(&T) -> Json) {
        match self {
            Field::Value(v) => fields.push((key.to_owned(), to_json(v))),
            Field::Absent => {}
            Field::Garbage(j) => fields.push((key.to_owned(), j.clone())),
        }
    }

    /// Whether the field deserializes: a value, or absent when `optional`.
    fn fits(&self, optional: bool, value_fits: impl Fn(&T) -> bool) -> bool {
        match self {
            Field::Value(v) => value_fits(v),
            Field::Absent => optional,
            Field::Garbage(_) => false,
        }
    }

    /// The value, if the field holds one.
    pub fn value(&self) -> Option<&T> {
        match self {
            Field::Value(v) => Some(v),
            Field::Absent | Field::Garbage(_) => None,
        }
    }
}

/// The review's `apiVersion` and `kind`.
#[derive(Clone, Debug)]
pub enum Envelope {
    /// `admission.k8s.io/v1` `AdmissionReview` (nine times in ten).
    V1,
    /// Any other pair.
    Other {
        /// The `apiVersion`.
        api_version: String,
        /// The `kind`.
        kind: String,
    },
}

impl<'a> Arbitrary<'a> for Envelope {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match rarely::<(String, String)>(u)? {
            None => Envelope::V1,
            Some((api_version, kind)) => Envelope::Other { api_version, kind },
        })
    }
}

/// The request's `operation`: create and update most often, any other string one time in ten.
#[derive(Clone, Debug)]
pub enum Operation {
    /// `CREATE`.
    Create,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
    /// `CONNECT`.
    Connect,
    /// Any other string.
    Other(String),
}

impl<'a> Arbitrary<'a> for Operation {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match u.int_in_range(0..=9u8)? {
            0..=2 => Operation::Create,
            3..=5 => Operation::Update,
            6 | 7 => Operation::Delete,
            8 => Operation::Connect,
            _ => Operation::Other(u.arbitrary()?),
        })
    }
}

impl Operation {
    fn json(&self) -> Json {
        Json::str(match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
            Operation::Other(s) => s,
        })
    }
}

/// The group and kind of the request: a Tier, or something else.
#[derive(Arbitrary, Clone, Debug)]
pub enum Kind {
    /// `crd.antrea.io` `Tier`.
    Tier,
    /// Any other group and kind.
    Other {
        /// The group.
        group: String,
        /// The kind.
        kind: String,
    },
}

impl Kind {
    fn is_tier(&self) -> bool {
        match self {
            Kind::Tier => true,
            Kind::Other { group, kind } => group == "crd.antrea.io" && kind == "Tier",
        }
    }
}

/// A Tier name: one of the cached system Tiers (to hit overlaps and deletions), a valid user
/// name, or any string (most are not DNS-1123 subdomains, which the webhook refuses).
#[derive(Clone, Debug)]
pub enum Name {
    /// The system Tier at this index (modulo six).
    System(u8),
    /// A valid name, `tier-<n>`.
    Valid(String),
    /// Any string.
    Any(String),
}

impl<'a> Arbitrary<'a> for Name {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match u.int_in_range(0..=3u8)? {
            0 | 1 => Name::System(u.arbitrary()?),
            2 => Name::Valid(format!("tier-{}", u.arbitrary::<u16>()?)),
            _ => Name::Any(u.arbitrary()?),
        })
    }
}

impl Name {
    fn text(&self) -> &str {
        match self {
            Name::System(i) => SYSTEM[usize::from(*i) % SYSTEM.len()].0,
            Name::Valid(s) | Name::Any(s) => s,
        }
    }

    fn json(&self) -> Json {
        Json::str(self.text())
    }
}

/// The request's `userInfo`.
#[derive(Arbitrary, Clone, Debug)]
pub struct User {
    /// Whether the user is [`CONTROLLER`] (then `name` is ignored).
    pub controller: bool,
    /// The `username`, or none (the key left out).
    pub name: Option<String>,
    /// The `groups`.
    pub groups: Vec<String>,
}

impl User {
    fn username(&self) -> Option<&str> {
        if self.controller {
            Some(CONTROLLER)
        } else {
            self.name.as_deref()
        }
    }
}

/// `spec.priority`: in range, a system Tier's, a reserved one, any integer, or any JSON value.
#[derive(Arbitrary, Clone, Debug)]
pub enum Priority {
    /// 0 to 255.
    InRange(u8),
    /// The system Tier priority at this index (modulo six): an overlap on create.
    System(u8),
    /// The reserved priority at this index (modulo four).
    Reserved(u8),
    /// Any integer.
    Int(i64),
    /// Any JSON value.
    Any(Json),
}

impl Priority {
    fn json(&self) -> Json {
        match self {
            Priority::InRange(p) => Json::Int(i64::from(*p)),
            Priority::System(i) => Json::Int(SYSTEM[usize::from(*i) % SYSTEM.len()].1),
            Priority::Reserved(i) => Json::Int(RESERVED[usize::from(*i) % RESERVED.len()]),
            Priority::Int(p) => Json::Int(*p),
            Priority::Any(j) => j.clone(),
        }
    }
}

/// `metadata.creationTimestamp`: RFC 3339 text, or any string one time in ten.
#[derive(Clone, Debug)]
pub enum Timestamp {
    /// Valid RFC 3339 text made from these seconds.
    Valid(u32),
    /// Any string.
    Any(String),
}

impl<'a> Arbitrary<'a> for Timestamp {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match rarely::<String>(u)? {
            None => Timestamp::Valid(u.arbitrary()?),
            Some(any) => Timestamp::Any(any),
        })
    }
}

/// A Tier's `spec`.
#[derive(Clone, Debug)]
pub enum Spec {
    /// An object of `priority`, `description` and extra keys (eight times in ten).
    Fields,
    /// No `spec` key.
    Absent,
    /// The whole spec replaced by this value.
    Replaced(Json),
}

impl<'a> Arbitrary<'a> for Spec {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match u.int_in_range(0..=9u8)? {
            8 => Spec::Absent,
            9 => Spec::Replaced(u.arbitrary()?),
            _ => Spec::Fields,
        })
    }
}

/// A Tier object (`object` or `oldObject`).
#[derive(Arbitrary, Clone, Debug)]
pub struct Object {
    /// `metadata.name`.
    pub name: Field<Name>,
    /// `spec.priority`.
    pub priority: Field<Priority>,
    /// `spec.description`.
    pub description: Field<String>,
    /// `metadata.creationTimestamp`.
    pub creation_timestamp: Option<Timestamp>,
    /// Extra `metadata` keys, prefixed `x-` so that they are not ObjectMeta's.
    pub metadata_extra: Vec<(String, Json)>,
    /// Extra `spec` keys, as they come (a `priority` among them overrides the first).
    pub spec_extra: Vec<(String, Json)>,
    /// Extra top-level keys, prefixed `x-`.
    pub top_extra: Vec<(String, Json)>,
    /// The shape of `spec`.
    pub spec: Spec,
}

impl Object {
    fn json(&self) -> Json {
        let mut metadata = Vec::new();
        self.name.put(&mut metadata, "name", Name::json);
        metadata.push(("resourceVersion".to_owned(), Json::str("7")));
        if let Some(t) = &self.creation_timestamp {
            let text = match t {
                Timestamp::Valid(secs) => {
                    let (d, s) = (secs / 86_400, secs % 86_400);
                    format!(
                        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
                        1970 + d / 366,
                        1 + (d / 28) % 12,
                        1 + d % 28,
                        s / 3600,
                        (s / 60) % 60,
                        s % 60
                    )
                }
                Timestamp::Any(s) => s.clone(),
            };
            metadata.push(("creationTimestamp".to_owned(), Json::Str(text)));
        }
        metadata.extend(
            self.metadata_extra
                .iter()
                .map(|(k, v)| (format!("x-{k}"), v.clone())),
        );
        let mut fields = vec![
            ("apiVersion".to_owned(), Json::str("crd.antrea.io/v1beta1")),
            ("kind".to_owned(), Json::str("Tier")),
            ("metadata".to_owned(), Json::Object(metadata)),
        ];
        match &self.spec {
            Spec::Absent => {}
            Spec::Replaced(garbage) => fields.push(("spec".to_owned(), garbage.clone())),
            Spec::Fields => {
                let mut spec = Vec::new();
                self.priority.put(&mut spec, "priority", Priority::json);
                self.description
                    .put(&mut spec, "description", |d| Json::str(d));
                spec.extend(self.spec_extra.iter().cloned());
                fields.push(("spec".to_owned(), Json::Object(spec)));
            }
        }
        // Keys already present would make the object invalid JSON for a struct (duplicates).
        fields.extend(
            self.top_extra
                .iter()
                .map(|(k, v)| (format!("x-{k}"), v.clone())),
        );
        Json::Object(fields)
    }

    fn fits(&self) -> bool {
        self.name.fits(true, |_| true)
            && match &self.creation_timestamp {
                None | Some(Timestamp::Valid(_)) => true,
                Some(Timestamp::Any(_)) => false,
            }
            && !has_duplicate_keys(&self.metadata_extra)
            && !has_duplicate_keys(&self.top_extra)
            && self.json().numbers_fit()
    }

    /// `spec.priority` as the webhook reads it (serde_json's `as_i64` of the last one).
    pub fn priority(&self) -> Option<i64> {
        self.json()
            .get("spec")
            .and_then(|spec| spec.get("priority"))
            .and_then(Json::as_i64)
    }
}

fn has_duplicate_keys(fields: &[(String, Json)]) -> bool {
    let mut keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    keys.windows(2).any(|w| w[0] == w[1])
}

/// An AdmissionReview as kube-apiserver would send it for a Tier, any part of it replaced.
#[derive(Arbitrary, Clone, Debug)]
pub struct Review {
    /// `apiVersion` and `kind`.
    pub envelope: Envelope,
    /// `request.uid`.
    pub uid: Field<String>,
    /// `request.kind` (and `request.requestKind`, the same, when a value).
    pub kind: Field<Kind>,
    /// `request.name`.
    pub name: Field<Name>,
    /// `request.operation`.
    pub operation: Field<Operation>,
    /// `request.userInfo`.
    pub user: Field<User>,
    /// `request.object` (`null` counts as absent).
    pub object: Field<Object>,
    /// `request.oldObject` (`null` counts as absent).
    pub old_object: Field<Object>,
    /// `request.dryRun`.
    pub dry_run: Field<bool>,
    /// Extra keys in `request`, prefixed `x-` so that they are not AdmissionRequest's.
    pub request_extra: Vec<(String, Json)>,
    /// The whole request replaced by this value (one time in ten).
    #[arbitrary(with = rarely)]
    pub request_garbage: Option<Json>,
}

/// What the webhook must answer a well-formed [`Review`].
#[derive(Debug, PartialEq, Eq)]
pub enum Expected {
    /// Allowed.
    Allowed,
    /// A rule denial: Antrea's message, no code.
    Rule(String),
    /// The request lacks a priority: code 400, the message naming this field
    /// (`object` or `oldObject`).
    BadRequest(&'static str),
    /// The Tier's name is not a DNS-1123 subdomain: code 400.
    InvalidName,
}

impl Review {
    /// The review as a JSON value.
    pub fn json(&self) -> Json {
        let (api_version, kind) = match &self.envelope {
            Envelope::V1 => ("admission.k8s.io/v1", "AdmissionReview"),
            Envelope::Other { api_version, kind } => (api_version.as_str(), kind.as_str()),
        };
        let request = match &self.request_garbage {
            Some(garbage) => garbage.clone(),
            None => Json::Object(self.request_fields()),
        };
        Json::object([
            ("apiVersion", Json::str(api_version)),
            ("kind", Json::str(kind)),
            ("request", request),
        ])
    }

    fn request_fields(&self) -> Vec<(String, Json)> {
        let mut request = Vec::new();
        self.uid.put(&mut request, "uid", |u| Json::str(u));
        let gvk = |k: &Kind| {
            let (group, kind) = match k {
                Kind::Tier => ("crd.antrea.io", "Tier"),
                Kind::Other { group, kind } => (group.as_str(), kind.as_str()),
            };
            Json::object([
                ("group", Json::str(group)),
                ("version", Json::str("v1beta1")),
                ("kind", Json::str(kind)),
            ])
        };
        self.kind.put(&mut request, "kind", gvk);
        request.push((
            "resource".to_owned(),
            Json::object([
                ("group", Json::str("crd.antrea.io")),
                ("version", Json::str("v1beta1")),
                ("resource", Json::str("tiers")),
            ]),
        ));
        if let Field::Value(kind) = &self.kind {
            request.push(("requestKind".to_owned(), gvk(kind)));
        }
        self.name.put(&mut request, "name", Name::json);
        self.operation
            .put(&mut request, "operation", Operation::json);
        self.user.put(&mut request, "userInfo", |u| {
            let mut user = vec![(
                "groups".to_owned(),
                Json::Array(u.groups.iter().map(|g| Json::str(g)).collect()),
            )];
            if let Some(name) = u.username() {
                user.push(("username".to_owned(), Json::str(name)));
            }
            Json::Object(user)
        });
        self.object.put(&mut request, "object", Object::json);
        self.old_object.put(&mut request, "oldObject", Object::json);
        self.dry_run.put(&mut request, "dryRun", |d| Json::Bool(*d));
        request.extend(
            self.request_extra
                .iter()
                .map(|(k, v)| (format!("x-{k}"), v.clone())),
        );
        request
    }

    /// Whether this review must be accepted (answered with a response review, not an error).
    ///
    /// serde_json refuses documents nested deeper than 128 arrays and objects, so deeper ones
    /// are not well-formed.
    pub fn is_well_formed(&self) -> bool {
        let object_fits = |o: &Field<Object>| {
            o.fits(true, Object::fits) || matches!(o, Field::Garbage(Json::Null))
        };
        self.json().depth() <= 100
            && matches!(self.envelope, Envelope::V1)
            && self.request_garbage.is_none()
            && self.uid.fits(false, |uid| uid.len() <= MAX_UID_BYTES)
            && self.kind.fits(false, |_| true)
            && self.name.fits(true, |_| true)
            && self
                .operation
                .fits(false, |o| !matches!(o, Operation::Other(_)))
            && self.user.fits(false, |_| true)
            && object_fits(&self.object)
            && object_fits(&self.old_object)
            && self.dry_run.fits(true, |_| true)
            && !has_duplicate_keys(&self.request_extra)
            && self.request_extra.iter().all(|(_, v)| v.numbers_fit())
    }

    /// Antrea's verdict on this review, computed independently of the webhook. Meaningful only
    /// for a well-formed review ([`Review::is_well_formed`]).
    pub fn expected(&self) -> Expected {
        if !self.kind.value().is_some_and(Kind::is_tier) {
            return Expected::Allowed;
        }
        let object = self.object.value();
        let old_object = self.old_object.value();
        let name = match self.name.value().map(Name::text) {
            Some(name) if !name.is_empty() => name,
            // The request's name is empty on create: the object's.
            _ => object
                .or(old_object)
                .and_then(|o| o.name.value())
                .map_or("", Name::text),
        };
        if matches!(self.operation.value(), Some(Operation::Connect)) {
            return Expected::Allowed;
        }
        if !is_dns1123_subdomain(name) {
            return Expected::InvalidName;
        }
        let user = self
            .user
            .value()
            .and_then(User::username)
            .unwrap_or_default();
        let priority = |tier: Option<&Object>, field| {
            tier.and_then(Object::priority)
                .ok_or(Expected::BadRequest(field))
        };
        let outcome = match self.operation.value() {
            Some(Operation::Create) => priority(object, "object").map(|p| {
                if RESERVED.contains(&p) {
                    Expected::Rule(format!("tier {name} priority {p} is reserved"))
                } else if SYSTEM.iter().any(|(_, s)| *s == p) {
                    Expected::Rule(format!(
                        "tier {name} priority {p} overlaps with existing Tier"
                    ))
                } else {
                    Expected::Allowed
                }
            }),
            Some(Operation::Update) => priority(old_object, "oldObject").and_then(|old| {
                let new = priority(object, "object")?;
                Ok(if old != new && user != CONTROLLER {
                    Expected::Rule("update to Tier priority is not allowed".to_owned())
                } else {
                    Expected::Allowed
                })
            }),
            Some(Operation::Delete) if SYSTEM.iter().any(|(s, _)| *s == name) => Ok(
                Expected::Rule(format!("cannot delete reserved tier {name}")),
            ),
            _ => Ok(Expected::Allowed),
        };
        outcome.unwrap_or_else(|bad| bad)
    }
}

/// A change to a rendered review, anywhere in it.
#[derive(Arbitrary, Clone, Debug)]
pub enum Mutation {
    /// Replace the node.
    Replace(Json),
    /// Remove the node (from its array or object; a root becomes `null`).
    Remove,
    /// Insert this key and value into an object (push the value onto an array; replace any
    /// other node).
    Insert(Key, Json),
}

/// A key to insert: one the review model uses (to make duplicates), or any string.
#[derive(Arbitrary, Clone, Debug)]
pub enum Key {
    /// The known key at this index (modulo their number).
    Known(u8),
    /// Any string.
    Any(String),
}

impl Key {
    fn text(&self) -> &str {
        const KNOWN: [&str; 12] = [
            "apiVersion",
            "kind",
            "request",
            "uid",
            "operation",
            "object",
            "oldObject",
            "spec",
            "priority",
            "metadata",
            "name",
            "userInfo",
        ];
        match self {
            Key::Known(i) => KNOWN[usize::from(*i) % KNOWN.len()],
            Key::Any(s) => s,
        }
    }
}

impl Mutation {
    /// Applies this mutation at the node `path` leads to (indices taken modulo the children; a
    /// path through a scalar or an empty node stops there).
    pub fn apply(&self, node: &mut Json, path: &[usize]) {
        if let Some((&i, rest)) = path.split_first() {
            let child = match node {
                Json::Array(items) if !items.is_empty() => {
                    let n = items.len();
                    if rest.is_empty() && matches!(self, Mutation::Remove) {
                        items.remove(i % n);
                        return;
                    }
                    &mut items[i % n]
                }
                Json::Object(fields) if !fields.is_empty() => {
                    let n = fields.len();
                    if rest.is_empty() && matches!(self, Mutation::Remove) {
                        fields.remove(i % n);
                        return;
                    }
                    &mut fields[i % n].1
                }
                _ => return self.apply_here(node),
            };
            return self.apply(child, rest);
        }
        self.apply_here(node);
    }

    fn apply_here(&self, node: &mut Json) {
        match (self, node) {
            (Mutation::Insert(key, value), Json::Object(fields)) => {
                fields.push((key.text().to_owned(), value.clone()));
            }
            (Mutation::Insert(_, value), Json::Array(items)) => items.push(value.clone()),
            (Mutation::Replace(value) | Mutation::Insert(_, value), node) => *node = value.clone(),
            (Mutation::Remove, node) => *node = Json::Null,
        }
    }
}
