//! Watch and client failures in words, for people: what failed, the answer the API server gave
//! (HTTP code, reason, message) or the network error underneath, and what to do about it.
//!
//! kube's own `Display` of an API error embeds the Rust `Debug` of the `Status`, and that of a
//! connection failure stops at "client error (Connect)", hiding "connection refused" in the source
//! chain. This module is the one place kube errors become words: [`watch_error`] is what the
//! [`KubeLister`](crate::lister::KubeLister) keeps as its last error and logs, and what `tierd`
//! prints when the Tier cache does not sync; the same words serve the policy caches' failures
//! and any other call's (the controller identity's SelfSubjectReview, the certificate's
//! Secret): the server's code, reason and message, or the network cause.
//!
//! ```
//! use kube::core::Status;
//! use kube::runtime::watcher;
//!
//! let forbidden = Status::failure("tiers.crd.antrea.io is forbidden", "Forbidden").with_code(403);
//! let error = watcher::Error::InitialListFailed(kube::Error::Api(forbidden.boxed()));
//! assert_eq!(
//!     tier_kube::explain::watch_error(&error),
//!     "listing Tiers failed: 403 Forbidden: tiers.crd.antrea.io is forbidden; grant tierd's \
//!      user get, list and watch on tiers.crd.antrea.io (see deploy/base/rbac.yaml)"
//! );
//! ```

use std::error::Error as StdError;
use std::io;

use kube::core::Status;
use kube::runtime::watcher;

/// What the words of a failure say about the Tier resource involved: its name, where its RBAC
/// is, and how to install it ([`ResourceHints::antrea`] unless a lister says otherwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceHints {
    /// The resource as RBAC names it: `tiers.crd.antrea.io`.
    pub resource: String,
    /// The install file granting tierd access to it: `deploy/base/rbac.yaml`.
    pub rbac: &'static str,
    /// What to do when it is not installed.
    pub install: &'static str,
}

impl ResourceHints {
    /// Antrea's Tier CRD.
    pub fn antrea() -> Self {
        Self {
            resource: crate::crd::CRD_NAME.to_owned(),
            rbac: "deploy/base/rbac.yaml",
            install: "install Antrea, or run `tierd crd | kubectl apply -f -`",
        }
    }
}

/// A watcher failure in words: the step that failed and why (about Antrea's Tiers).
pub fn watch_error(error: &watcher::Error) -> String {
    watch_error_about(error, &ResourceHints::antrea())
}

/// A watcher failure on the Tier resource of `hints`, in words.
pub fn watch_error_about(error: &watcher::Error, hints: &ResourceHints) -> String {
    watch_error_of(error, "Tiers", "Tier watch", hints)
}

/// A watcher failure in words for any watched resource: `listing {plural} failed: ...`,
/// `starting the {watch} failed: ...`, with what to do about `hints`' resource (the policy
/// caches say `Antrea ClusterNetworkPolicies` and `ClusterNetworkPolicy watch`).
pub(crate) fn watch_error_of(
    error: &watcher::Error,
    plural: &str,
    watch: &str,
    hints: &ResourceHints,
) -> String {
    let (step, error) = match error {
        watcher::Error::InitialListFailed(e) => (format!("listing {plural}"), e),
        watcher::Error::WatchStartFailed(e) => (format!("starting the {watch}"), e),
        watcher::Error::WatchFailed(e) => (format!("watching {plural}"), e),
        watcher::Error::WatchError(status) => {
            return format!("the {watch} failed: {}", status_words_about(status, hints));
        }
        watcher::Error::NoResourceVersion => {
            return format!(
                "the API server answered a list of {plural} without a resourceVersion; is {} \
                 served by a real API server?",
                hints.resource
            );
        }
    };
    format!("{step} failed: {}", client_error_about(error, hints))
}

/// Whether a watcher failure is the routine end of a watch whose resourceVersion is too old
/// (410 Gone / Expired): the watcher lists again, nothing is down.
pub(crate) fn is_expired(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::WatchError(status) if status.code == 410)
}

/// A kube client failure in words: the API server's answer, or the network error underneath.
pub fn client_error(error: &kube::Error) -> String {
    client_error_about(error, &ResourceHints::antrea())
}

/// [`client_error`] about the Tier resource of `hints`.
pub fn client_error_about(error: &kube::Error, hints: &ResourceHints) -> String {
    match error {
        kube::Error::Api(status) => status_words_about(status, hints),
        other => transport_words(other),
    }
}

/// Any kube client failure in words, about no resource in particular (a SelfSubjectReview, a
/// Secret): `403 Forbidden: <message>` as the server said it, or the network error underneath
/// (`connection refused: ...`). Never Rust `Debug` text.
pub(crate) fn error_words(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status_words_plain(status),
        other => transport_words(other),
    }
}

/// A failure that is not the API server's answer: the network, TLS or the client's own, from
/// its source chain.
fn transport_words(error: &kube::Error) -> String {
    // kube's wrappers (`ServiceError: ...`) repeat their source: keep the distinct causes.
    let mut causes: Vec<String> = Vec::new();
    let mut io_kind = None;
    let mut next: Option<&(dyn StdError + 'static)> = error.source();
    while let Some(cause) = next {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            io_kind = Some(io.kind());
        }
        let text = cause.to_string();
        if !causes.iter().any(|c| c.contains(&text)) {
            causes.push(text);
        }
        next = cause.source();
    }
    let words = match io_kind {
        Some(io::ErrorKind::ConnectionRefused) => {
            Some("connection refused: is the API server running, and is the address right?")
        }
        Some(io::ErrorKind::TimedOut) => Some("connection timed out: is the API server reachable?"),
        Some(io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted) => {
            Some("the connection was reset by the API server or a proxy")
        }
        _ => None,
    };
    match (words, causes.last()) {
        (Some(words), _) => words.to_owned(),
        (None, Some(_)) => causes.join(": "),
        (None, None) => error.to_string(),
    }
}

/// `{code} {reason}: {message}`, as the server said it (its reason and message, or words for
/// their absence).
fn said(status: &Status) -> String {
    let reason = if status.reason.is_empty() {
        "Failure"
    } else {
        &status.reason
    };
    let message = if status.message.is_empty() {
        "no message"
    } else {
        &status.message
    };
    format!("{} {reason}: {message}", status.code)
}

/// What the server said, with the one hint that holds whatever the resource: credentials on 401.
fn status_words_plain(status: &Status) -> String {
    match (status.code, status.reason.as_str()) {
        (401, _) | (_, "Unauthorized") => {
            format!(
                "{}; check the kubeconfig's credentials or token",
                said(status)
            )
        }
        _ => said(status),
    }
}

/// An API `Status` in words: `403 Forbidden: <message>; <what to do>` (about Antrea's Tiers).
pub fn status_words(status: &Status) -> String {
    status_words_about(status, &ResourceHints::antrea())
}

/// [`status_words`] about the Tier resource of `hints`.
pub fn status_words_about(status: &Status, hints: &ResourceHints) -> String {
    let ResourceHints {
        resource,
        rbac,
        install,
    } = hints;
    match (status.code, status.reason.as_str()) {
        (403, _) | (_, "Forbidden") => format!(
            "{}; grant tierd's user get, list and watch on {resource} (see {rbac})",
            said(status)
        ),
        (404, _) | (_, "NotFound") => format!(
            "{}; the Tier CRD ({resource}) is not installed: {install}",
            said(status)
        ),
        _ => status_words_plain(status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_crd_is_named() {
        let status = Status::failure(
            "the server could not find the requested resource",
            "NotFound",
        )
        .with_code(404);
        let error = watcher::Error::InitialListFailed(kube::Error::Api(status.boxed()));
        assert_eq!(
            watch_error(&error),
            "listing Tiers failed: 404 NotFound: the server could not find the requested \
             resource; the Tier CRD (tiers.crd.antrea.io) is not installed: install Antrea, or \
             run `tierd crd | kubectl apply -f -`"
        );
    }

    #[test]
    fn a_watch_error_keeps_the_server_message_without_debug() {
        let status = Status::failure("too old resource version: 1 (5)", "Expired").with_code(410);
        let text = watch_error(&watcher::Error::WatchError(status.boxed()));
        assert_eq!(
            text,
            "the Tier watch failed: 410 Expired: too old resource version: 1 (5)"
        );
        assert!(!text.contains("Status {"), "{text}");
    }

    #[test]
    fn any_call_is_said_in_the_servers_words_without_tier_hints() {
        let status = Status::failure(
            "selfsubjectreviews.authentication.k8s.io is forbidden",
            "Forbidden",
        )
        .with_code(403);
        let text = error_words(&kube::Error::Api(status.boxed()));
        assert_eq!(
            text,
            "403 Forbidden: selfsubjectreviews.authentication.k8s.io is forbidden"
        );
        let unauthorized = Status::failure("Unauthorized", "Unauthorized").with_code(401);
        assert!(
            error_words(&kube::Error::Api(unauthorized.boxed())).ends_with("credentials or token")
        );
        // A policy watch names its own resource and noun.
        let hints = ResourceHints {
            resource: "networkpolicies.crd.antrea.io".into(),
            rbac: "deploy/base/rbac.yaml",
            install: "install Antrea",
        };
        let forbidden = Status::failure("no", "Forbidden").with_code(403);
        let error = watcher::Error::WatchStartFailed(kube::Error::Api(forbidden.boxed()));
        assert_eq!(
            watch_error_of(
                &error,
                "Antrea NetworkPolicies",
                "NetworkPolicy watch",
                &hints
            ),
            "starting the NetworkPolicy watch failed: 403 Forbidden: no; grant tierd's user get, \
             list and watch on networkpolicies.crd.antrea.io (see deploy/base/rbac.yaml)"
        );
        assert!(is_expired(&watcher::Error::WatchError(
            Status::failure("too old", "Expired").with_code(410).boxed()
        )));
    }

    #[tokio::test]
    async fn connection_refused_is_said_in_words() {
        // A port nothing listens on: bind, note the address, close.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let api: kube::Api<crate::crd::Tier> = kube::Api::all(client);
        let error = api.list(&Default::default()).await.unwrap_err();
        let text = watch_error(&watcher::Error::InitialListFailed(error));
        assert_eq!(
            text,
            "listing Tiers failed: connection refused: is the API server running, and is the \
             address right?"
        );
    }
}
