//! Configuration: users, admission mode, and watch tuning.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::antrea::WEBHOOK_NAME;
use crate::calico::CalicoApi;

/// How Tier writes are admitted after schema validation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AdmissionMode {
    /// Every write is admitted.
    #[default]
    None,
    /// Antrea's Tier webhook rules evaluated in process against the stored Tiers (a webhook
    /// whose cache is always in sync). Priority updates are allowed for `controller_user`.
    BuiltinAntrea {
        /// The user allowed to change Tier priorities (Antrea's controller service account).
        controller_user: String,
    },
    /// A real HTTPS validating webhook, called with an `admission.k8s.io/v1` AdmissionReview.
    Webhook(WebhookConfig),
}

/// What kube-apiserver does when a webhook cannot be called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// The request fails with 500 InternalError (Antrea's setting and the default).
    #[default]
    Fail,
    /// The request is admitted.
    Ignore,
}

/// A validating webhook registration, as in a `ValidatingWebhookConfiguration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Webhook name used in messages.
    pub name: String,
    /// HTTPS (or HTTP) URL of the webhook endpoint; `?timeout=<n>s` is appended like
    /// kube-apiserver does.
    pub url: String,
    /// PEM CA bundle trusted for the webhook's certificate.
    pub ca_pem: Option<String>,
    /// Skip certificate verification (when no CA is at hand).
    pub insecure: bool,
    /// Per-call timeout (`timeoutSeconds`).
    pub timeout: Duration,
    /// What to do when the call fails.
    pub failure_policy: FailurePolicy,
    /// When set, the webhook's Service has endpoints only while this URL answers 200
    /// (a pod's readiness probe); otherwise calls fail with "no endpoints available".
    pub ready_url: Option<String>,
    /// Name of the Service fronting the webhook, used in "no endpoints" messages.
    pub service: String,
}

impl WebhookConfig {
    /// Antrea's Tier webhook at `url`: 5 s timeout, failure policy Fail, Service `antrea`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            name: WEBHOOK_NAME.to_owned(),
            url: url.into(),
            ca_pem: None,
            insecure: false,
            timeout: Duration::from_secs(5),
            failure_policy: FailurePolicy::Fail,
            ready_url: None,
            service: "antrea".to_owned(),
        }
    }

    /// Trusts `ca_pem` for the webhook's certificate.
    #[must_use]
    pub fn ca_pem(mut self, ca_pem: impl Into<String>) -> Self {
        self.ca_pem = Some(ca_pem.into());
        self
    }

    /// Skips certificate verification.
    #[must_use]
    pub fn insecure(mut self) -> Self {
        self.insecure = true;
        self
    }

    /// Sets the call timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the failure policy.
    #[must_use]
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.failure_policy = policy;
        self
    }

    /// Gates calls on `ready_url` answering 200 (Service endpoints hold only Ready pods).
    #[must_use]
    pub fn ready_url(mut self, ready_url: impl Into<String>) -> Self {
        self.ready_url = Some(ready_url.into());
        self
    }
}

/// Configuration of a [`TestApiServer`](crate::TestApiServer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Bearer token -> user name. Requests without a known token get 401.
    pub users: BTreeMap<String, String>,
    /// Initial admission mode (switchable at run time).
    pub admission: AdmissionMode,
    /// How many Tier changes are retained for watches and continue tokens; older
    /// resourceVersions get 410 Expired.
    pub watch_window: usize,
    /// Interval of BOOKMARK events on watches that allow them (`None`: only at timeout).
    pub bookmark_interval: Option<Duration>,
    /// Watch duration when the request has no `timeoutSeconds`.
    pub default_watch_timeout: Duration,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Antrea's `ClusterNetworkPolicy` feature gate, for [`AdmissionMode::BuiltinAntrea`]: new
    /// Tiers may not take priority 220.
    pub cluster_network_policy: bool,
    /// The port to listen on, on 127.0.0.1 (0, the default: any free port).
    pub port: u16,
    /// Whether `authentication.k8s.io/v1` `selfsubjectreviews` is served (Kubernetes 1.28+;
    /// off: 404, as an older server answers).
    pub self_subject_review: bool,
    /// The API Calico's Tier is served at (default `projectcalico.org/v3`).
    pub calico_api: CalicoApi,
    /// Whether Calico's Tier CRD is installed at start (off by default: every request for it
    /// answers 404 until [`CalicoTiers::install`](crate::CalicoTiers::install)).
    pub calico_installed: bool,
    /// Bounds on what clients can make the server hold.
    pub limits: Limits,
}

/// Bounds on what clients can make the server hold; beyond them it refuses or forgets, as a
/// real cluster's storage quota, Event TTL and request limits do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most objects per resource (each Tier resource, each policy resource, each plain object
    /// kind): a create beyond gets 500 InternalError, as a full etcd answers.
    pub max_objects: usize,
    /// Largest object stored, serialized (etcd's default request limit, 1.5 MiB): a write
    /// that would store a larger one (e.g. labels grown patch by patch) gets 413.
    pub max_object_bytes: usize,
    /// Most Events kept: the oldest is forgotten for a new one (Events expire in a cluster).
    pub max_events: usize,
    /// Most request-log records kept: the oldest is forgotten (`seq` keeps counting).
    pub max_log_records: usize,
    /// Most watches open at once: one more gets 429 TooManyRequests with `Retry-After: 1`.
    pub max_watches: usize,
    /// Most connections served at once: further clients wait in the listen backlog. One that
    /// sends no request for [`IDLE_TIMEOUT`](crate::IDLE_TIMEOUT) is closed and frees its place.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_objects: 10_000,
            max_object_bytes: 1_572_864,
            max_events: 10_000,
            max_log_records: 100_000,
            max_watches: 1_000,
            max_connections: 1_024,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            users: BTreeMap::new(),
            admission: AdmissionMode::None,
            watch_window: 1000,
            bookmark_interval: Some(Duration::from_secs(1)),
            default_watch_timeout: Duration::from_secs(1800),
            max_body_bytes: 3 * 1024 * 1024,
            cluster_network_policy: false,
            port: 0,
            self_subject_review: true,
            calico_api: CalicoApi::V3,
            calico_installed: false,
            limits: Limits::default(),
        }
    }
}

impl ServerConfig {
    /// Adds a user authenticated by bearer `token`.
    #[must_use]
    pub fn user(mut self, token: impl Into<String>, name: impl Into<String>) -> Self {
        self.users.insert(token.into(), name.into());
        self
    }

    /// Sets the admission mode.
    #[must_use]
    pub fn admission(mut self, mode: AdmissionMode) -> Self {
        self.admission = mode;
        self
    }

    /// Turns Antrea's `ClusterNetworkPolicy` feature gate on or off for the built-in admission.
    #[must_use]
    pub fn cluster_network_policy(mut self, enabled: bool) -> Self {
        self.cluster_network_policy = enabled;
        self
    }

    /// Sets the retained watch history length.
    #[must_use]
    pub fn watch_window(mut self, changes: usize) -> Self {
        self.watch_window = changes;
        self
    }

    /// Listens on 127.0.0.1:`port` instead of any free port.
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Serves no `selfsubjectreviews`, like a server older than Kubernetes 1.28.
    #[must_use]
    pub fn without_self_subject_review(mut self) -> Self {
        self.self_subject_review = false;
        self
    }

    /// Serves Calico's Tier at `api`, its CRD installed (a Calico cluster).
    #[must_use]
    pub fn calico(mut self, api: CalicoApi) -> Self {
        self.calico_api = api;
        self.calico_installed = true;
        self
    }

    /// Serves Calico's Tier at `api` once its CRD is installed
    /// ([`CalicoTiers::install`](crate::CalicoTiers::install)); until then it answers 404.
    #[must_use]
    pub fn calico_not_installed(mut self, api: CalicoApi) -> Self {
        self.calico_api = api;
        self.calico_installed = false;
        self
    }

    /// Sets the bounds on what clients can make the server hold.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the bookmark interval.
    #[must_use]
    pub fn bookmark_interval(mut self, interval: Option<Duration>) -> Self {
        self.bookmark_interval = interval;
        self
    }
}
