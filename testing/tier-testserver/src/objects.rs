//! The plain objects stored beside Tiers and Events (core/v1 Secrets and
//! `admissionregistration.k8s.io/v1` ValidatingWebhookConfigurations): their kinds, the paths
//! that name them, and the metadata the server stamps on every write.

use serde_json::{Value, json};

use crate::status::ResourceName;
use crate::util::{metadata_mut, new_uid, now_rfc3339};

/// A kind of plain object the server stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    /// core/v1 Secret, namespaced.
    Secret,
    /// `admissionregistration.k8s.io/v1` ValidatingWebhookConfiguration, cluster-scoped.
    ValidatingWebhookConfiguration,
}

impl ObjectKind {
    /// The resource as named in Status messages.
    pub fn resource(self) -> ResourceName {
        match self {
            Self::Secret => ResourceName {
                group: "",
                plural: "secrets",
                kind: "Secret",
            },
            Self::ValidatingWebhookConfiguration => ResourceName {
                group: "admissionregistration.k8s.io",
                plural: "validatingwebhookconfigurations",
                kind: "ValidatingWebhookConfiguration",
            },
        }
    }

    /// The `apiVersion` of its objects.
    pub fn api_version(self) -> &'static str {
        match self {
            Self::Secret => "v1",
            Self::ValidatingWebhookConfiguration => "admissionregistration.k8s.io/v1",
        }
    }

    /// Whether its objects live in a namespace.
    pub fn namespaced(self) -> bool {
        matches!(self, Self::Secret)
    }

    /// The kind and, for a namespaced kind, the namespace and the optional name a path names.
    pub(crate) fn route(segments: &[&str]) -> Option<(Self, String, Option<String>)> {
        let owned = |s: &&str| (*s).to_owned();
        match segments {
            ["api", "v1", "namespaces", ns, "secrets", rest @ ..] if rest.len() <= 1 => {
                Some((Self::Secret, owned(ns), rest.first().map(owned)))
            }
            [
                "apis",
                "admissionregistration.k8s.io",
                "v1",
                "validatingwebhookconfigurations",
                rest @ ..,
            ] if rest.len() <= 1 => Some((
                Self::ValidatingWebhookConfiguration,
                String::new(),
                rest.first().map(owned),
            )),
            _ => None,
        }
    }
}

/// Where an object is stored: kind, namespace (empty when cluster-scoped), name.
pub(crate) type ObjectKey = (ObjectKind, String, String);

pub(crate) fn key(kind: ObjectKind, namespace: &str, name: &str) -> ObjectKey {
    let namespace = if kind.namespaced() { namespace } else { "" };
    (kind, namespace.to_owned(), name.to_owned())
}

/// Server-managed fields: type meta, name, namespace, uid and creationTimestamp (kept from
/// `existing`), a new resourceVersion.
pub(crate) fn stamp(
    kind: ObjectKind,
    (_, namespace, name): &ObjectKey,
    mut obj: Value,
    existing: Option<&Value>,
    rv: &mut u64,
) -> Value {
    *rv += 1;
    if let Some(map) = obj.as_object_mut() {
        map.insert("apiVersion".into(), json!(kind.api_version()));
        map.insert("kind".into(), json!(kind.resource().kind));
    }
    if let Some(meta) = metadata_mut(&mut obj) {
        meta.insert("name".into(), json!(name));
        if kind.namespaced() {
            meta.insert("namespace".into(), json!(namespace));
        } else {
            meta.remove("namespace");
        }
        for field in ["uid", "creationTimestamp"] {
            match existing.and_then(|e| e.pointer(&format!("/metadata/{field}"))) {
                Some(value) => meta.insert(field.into(), value.clone()),
                None => meta.insert(
                    field.into(),
                    json!(if field == "uid" {
                        new_uid()
                    } else {
                        now_rfc3339()
                    }),
                ),
            };
        }
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_secrets_and_webhook_configurations() {
        assert_eq!(
            ObjectKind::route(&["api", "v1", "namespaces", "ns", "secrets", "s"]),
            Some((ObjectKind::Secret, "ns".into(), Some("s".into())))
        );
        assert_eq!(
            ObjectKind::route(&[
                "apis",
                "admissionregistration.k8s.io",
                "v1",
                "validatingwebhookconfigurations"
            ]),
            Some((
                ObjectKind::ValidatingWebhookConfiguration,
                String::new(),
                None
            ))
        );
        assert_eq!(
            ObjectKind::route(&["api", "v1", "namespaces", "ns", "secrets", "s", "x"]),
            None
        );
    }
}
