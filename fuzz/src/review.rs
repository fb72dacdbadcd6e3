//! An `Arbitrary` model of AdmissionReviews for the Tier webhook: mostly the shape
//! kube-apiserver sends, with any field absent, of another JSON type, or garbage, priorities of
//! every JSON type (numbers beyond any machine type included) and extra keys everywhere.

use std::fmt::Write as _;

use arbitrary::Arbitrary;

/// Any JSON value, numbers written digit by digit included.
#[derive(Arbitrary, Clone, Debug)]
pub enum Json {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    /// `-?digits(.fraction)?(e exponent)?`, beyond any machine type.
    BigNumber {
        negative: bool,
        digits: Vec<u8>,
        fraction: Vec<u8>,
        exponent: Option<i32>,
    },
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn str(s: &str) -> Self {
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

/// A field of the review: the expected type, absent, or any other JSON value.
#[derive(Arbitrary, Clone, Debug)]
pub enum Field<T> {
    Value(T),
    Absent,
    Garbage(Json),
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
}

#[derive(Arbitrary, Clone, Debug)]
pub enum Envelope {
    V1,
    Other { api_version: String, kind: String },
}

#[derive(Arbitrary, Clone, Debug)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
    Other(String),
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
    Tier,
    Other { group: String, kind: String },
}

/// A Tier name: one of the cached system Tiers (to hit overlaps and deletions), or any string.
#[derive(Arbitrary, Clone, Debug)]
pub enum Name {
    System(u8),
    Any(String),
}

impl Name {
    fn json(&self) -> Json {
        const SYSTEM: [&str; 6] = [
            "baseline",
            "application",
            "platform",
            "networkops",
            "securityops",
            "emergency",
        ];
        match self {
            Name::System(i) => Json::str(SYSTEM[usize::from(*i) % SYSTEM.len()]),
            Name::Any(s) => Json::str(s),
        }
    }
}

#[derive(Arbitrary, Clone, Debug)]
pub struct User {
    pub controller: bool,
    pub name: String,
    pub groups: Vec<String>,
}

/// `spec.priority`: in range, any integer, or any JSON value.
#[derive(Arbitrary, Clone, Debug)]
pub enum Priority {
    InRange(u8),
    Int(i64),
    Any(Json),
}

/// `metadata.creationTimestamp`: RFC 3339 text or any string.
#[derive(Arbitrary, Clone, Debug)]
pub enum Timestamp {
    Valid(u32),
    Any(String),
}

#[derive(Arbitrary, Clone, Debug)]
pub struct Object {
    pub name: Field<Name>,
    pub priority: Field<Priority>,
    pub description: Field<String>,
    pub creation_timestamp: Option<Timestamp>,
    /// Extra `metadata` keys, prefixed `x-` so that they are not ObjectMeta's.
    pub metadata_extra: Vec<(String, Json)>,
    pub spec_extra: Vec<(String, Json)>,
    pub top_extra: Vec<(String, Json)>,
    /// The whole spec replaced by this value.
    pub spec_garbage: Option<Json>,
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
        let spec = match &self.spec_garbage {
            Some(garbage) => garbage.clone(),
            None => {
                let mut spec = Vec::new();
                self.priority.put(&mut spec, "priority", |p| match p {
                    Priority::InRange(p) => Json::Int(i64::from(*p)),
                    Priority::Int(p) => Json::Int(*p),
                    Priority::Any(j) => j.clone(),
                });
                self.description
                    .put(&mut spec, "description", |d| Json::str(d));
                spec.extend(self.spec_extra.iter().cloned());
                Json::Object(spec)
            }
        };
        let mut fields = vec![
            ("apiVersion".to_owned(), Json::str("crd.antrea.io/v1beta1")),
            ("kind".to_owned(), Json::str("Tier")),
            ("metadata".to_owned(), Json::Object(metadata)),
            ("spec".to_owned(), spec),
        ];
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
}

fn has_duplicate_keys(fields: &[(String, Json)]) -> bool {
    let mut keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    keys.windows(2).any(|w| w[0] == w[1])
}

/// An AdmissionReview as kube-apiserver would send it for a Tier, any part of it replaced.
#[derive(Arbitrary, Clone, Debug)]
pub struct Review {
    pub envelope: Envelope,
    pub uid: Field<String>,
    pub kind: Field<Kind>,
    pub name: Field<Name>,
    pub operation: Field<Operation>,
    pub user: Field<User>,
    pub object: Field<Object>,
    pub old_object: Field<Object>,
    pub dry_run: Field<bool>,
    /// Extra keys in `request`, prefixed `x-` so that they are not AdmissionRequest's.
    pub request_extra: Vec<(String, Json)>,
    /// The whole request replaced by this value.
    pub request_garbage: Option<Json>,
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
        self.kind.put(&mut request, "kind", |k| {
            let (group, kind) = match k {
                Kind::Tier => ("crd.antrea.io", "Tier"),
                Kind::Other { group, kind } => (group.as_str(), kind.as_str()),
            };
            Json::object([
                ("group", Json::str(group)),
                ("version", Json::str("v1beta1")),
                ("kind", Json::str(kind)),
            ])
        });
        request.push((
            "resource".to_owned(),
            Json::object([
                ("group", Json::str("crd.antrea.io")),
                ("version", Json::str("v1beta1")),
                ("resource", Json::str("tiers")),
            ]),
        ));
        self.name.put(&mut request, "name", Name::json);
        self.operation
            .put(&mut request, "operation", Operation::json);
        self.user.put(&mut request, "userInfo", |u| {
            let name = if u.controller {
                super::CONTROLLER
            } else {
                &u.name
            };
            Json::object([
                ("username", Json::str(name)),
                (
                    "groups",
                    Json::Array(u.groups.iter().map(|g| Json::str(g)).collect()),
                ),
            ])
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
        self.json().depth() <= 100
            && matches!(self.envelope, Envelope::V1)
            && self.request_garbage.is_none()
            && self.uid.fits(false, |_| true)
            && self.kind.fits(false, |_| true)
            && self.name.fits(true, |_| true)
            && self
                .operation
                .fits(false, |o| !matches!(o, Operation::Other(_)))
            && self.user.fits(false, |_| true)
            && self.object.fits(true, Object::fits)
            && self.old_object.fits(true, Object::fits)
            && self.dry_run.fits(true, |_| true)
            && !has_duplicate_keys(&self.request_extra)
            && self.request_extra.iter().all(|(_, v)| v.numbers_fit())
    }
}
