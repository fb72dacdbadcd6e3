//! An in-process Kubernetes API server for tests, serving Antrea's cluster-scoped Tier custom
//! resource (`tiers.crd.antrea.io/v1beta1`) and, when configured, Calico's
//! (`tiers.projectcalico.org/v3` or `crd.projectcalico.org/v1`, [`calico`]) over plain HTTP on
//! 127.0.0.1 to the real kube client.
//!
//! It is an independent peer of kube-rs (it knows no kube or k8s-openapi types and works on
//! `serde_json::Value`) and follows kube-apiserver's protocol: list with paging and a list
//! resourceVersion, chunked watches with bookmarks and 410 Expired, optimistic concurrency,
//! `Status` errors with the reasons and codes kube-apiserver uses, CRD schema validation
//! (422 with causes), and validating admission in kube-apiserver's order (validation,
//! admission, storage for a create; resourceVersion check first for an update).
//!
//! It also answers `authentication.k8s.io/v1` `selfsubjectreviews` with the user of the
//! request's token (off with [`ServerConfig::without_self_subject_review`]), and serves
//! discovery, so `kubectl` works against it. Label and field selectors, JSON patch and
//! server-side apply are not implemented (nothing here sends them) and are refused with 400 or
//! 415, never answered wrongly. The `tier-testserver` binary runs it on its own: a port, a
//! kubeconfig written, optional Antrea admission (see README).
//!
//! Tests steer it at run time: admission modes ([`AdmissionMode`], including a real HTTPS
//! webhook such as [`TestWebhook`]), [`Fault`]s per verb, name and resource, [`drop_watches`],
//! [`expire_next_watch`], and "other actor" writes through [`Store`] (Calico's Tiers and their
//! CRD through [`Store::calico`]). Every request is recorded in a [`RequestLog`].
//!
//! A Calico world: [`ServerConfig::calico`] (or [`ServerConfig::calico_not_installed`] and
//! [`CalicoTiers::install`] later), seeded with [`CalicoTiers::create_builtins`] or
//! [`CalicoTiers::put_raw`] (a built-in with wrong values), RBAC per verb with
//! [`Fault::forbidden_on`], requests counted with [`RequestLog::count_at`] at
//! [`Endpoint::CalicoTiers`].
//!
//! # Layers
//!
//! The modules form layers, listed bottom first. A module uses only modules of its own layer
//! or of lower ones, and the uses form no cycle (`tests/layers.rs` reads this list and the
//! sources and fails otherwise). Shared types live in the lowest layer that needs them.
//!
//! 1. **base**, the protocol's vocabulary, knowing no resource: `util`, `patch`, `paging`,
//!    `status`, `reply`, `error`, `kubeconfig`.
//! 2. **model**, the resources and their rules, without state: `crd` (what every custom
//!    resource gets: metadata pruning, names, the schema trait), `tier` (Antrea's Tier CRD
//!    schema), `antrea` (Antrea's system Tiers and webhook rules), `calico` (Calico's Tier
//!    CRD, built-in Tiers and admission policy), `objects` (Secrets and webhook
//!    configurations), `config`.
//! 3. **steering**, what tests steer and observe: `faults` (per verb, name and resource),
//!    `log` (the request log).
//! 4. **store**, state and history: `history` (changes and the watch feed), `table` (one
//!    Tier resource's objects, history and storage rules), `policies` (Antrea's policy
//!    resources), `store` (both Tier tables, Events, objects, the resourceVersion).
//! 5. **context**, what every handler is given: `admission` (admission modes and the webhook
//!    client), `context` (shared state, the decoded request), `tier_api` (each Tier resource
//!    as the Tier verbs see it).
//! 6. **handlers**, one per endpoint family: `watch`, `tiers`, `policy_api`, `resources`,
//!    `events`, `auth`, `discovery`.
//! 7. **routing**: `api` (routes, authentication, faults, the request log).
//! 8. **servers**: `server` ([`TestApiServer`], listener, connections), `test_webhook`,
//!    `install`.
//!
//! ```no_run
//! use tier_testserver::{AdmissionMode, Fault, ServerConfig, TestApiServer, Verb};
//!
//! # async fn example() -> Result<(), tier_testserver::Error> {
//! let server = TestApiServer::start(
//!     ServerConfig::default()
//!         .user("controller-token", "system:serviceaccount:kube-system:antrea-controller")
//!         .admission(AdmissionMode::BuiltinAntrea {
//!             controller_user: "system:serviceaccount:kube-system:antrea-controller".into(),
//!         }),
//! )
//! .await?;
//! let kubeconfig = server.kubeconfig_yaml("system:serviceaccount:kube-system:antrea-controller", "test")?;
//! // ... build a kube::Client from `kubeconfig` and run the code under test ...
//! server.inject(Fault::lose_response(Verb::Create).named("baseline"));
//! assert_eq!(server.requests().count(Verb::Create, Some("baseline")), 0);
//! # let _ = kubeconfig;
//! # Ok(())
//! # }
//! ```
//!
//! [`drop_watches`]: TestApiServer::drop_watches
//! [`expire_next_watch`]: TestApiServer::expire_next_watch

mod admission;
pub mod antrea;
mod api;
mod auth;
pub mod calico;
mod config;
mod context;
mod crd;
mod discovery;
mod error;
mod events;
mod faults;
mod history;
mod install;
mod kubeconfig;
mod log;
mod objects;
mod paging;
mod patch;
pub mod policies;
mod policy_api;
mod reply;
mod resources;
mod server;
mod status;
mod store;
mod table;
mod test_webhook;
pub mod tier;
mod tier_api;
mod tiers;
mod util;
mod watch;

pub use calico::CalicoApi;
pub use config::{AdmissionMode, FailurePolicy, Limits, ServerConfig, WebhookConfig};
pub use error::Error;
pub use faults::{Fault, FaultAction, FaultId, FaultKind, Verb};
pub use install::{InstallError, install_shipped_secret};
pub use kubeconfig::render as kubeconfig_for;
pub use log::{Endpoint, RequestLog, RequestRecord};
pub use objects::ObjectKind;
pub use policies::{Policies, PolicyResource};
pub use server::{IDLE_TIMEOUT, TestApiServer};
pub use status::{Cause, ResourceName, StatusError};
pub use store::{CalicoTiers, EventsApi, Store};
pub use test_webhook::{TestWebhook, WebhookBehaviour};
