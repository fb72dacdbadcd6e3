//! [`KubeWriter`]: the [`TierWriter`] port on the Kubernetes API.
//!
//! - **create** is a POST of a fresh object (name and spec only).
//! - **update** is a replace (PUT) carrying `metadata.resourceVersion` as its precondition. The
//!   body is the object cached by the reflector the core observes (labels, annotations, owner
//!   references and every other field preserved) with the spec set and the resourceVersion set
//!   to the one the core decided on; a stale one gets 409 `Conflict`. A writer cannot exist
//!   without that store ([`KubeWriter::new`] takes it, [`KubeLister::writer`] passes its own),
//!   and a Tier that is not in it (deleted since it was observed) is answered
//!   [`Stale`](tier_core::ErrorClass::Stale) without a request: no update can ever replace a
//!   Tier with a minimal object and drop its labels and annotations. A JSON merge patch was not
//!   chosen: it would work too, but the PUT is what Antrea itself does.
//!
//! [`KubeLister::writer`]: crate::KubeLister::writer
//!
//! A create answered 404 is [`NotInstalled`](tier_core::ErrorClass::NotInstalled), not stale: Tiers are
//! cluster-scoped, so the only thing that can be missing is the resource itself (the CRD is not
//! installed). A 404 on update stays stale (the Tier was deleted).
//!
//! Every call carries the field manager (default `tierd`) and is cut after the call timeout
//! (default 10 s), reported as [`Transient`](tier_core::ErrorClass::Transient). Requests go
//! through `Client::send` so the writer sees the response headers (`Retry-After`, see
//! [`classify`](mod@crate::classify)). The writer itself never retries: every failure reaches the
//! core, which re-observes first. Give it a client whose kube retry layer is off
//! ([`client::writer_client`](crate::client::writer_client) builds one from the same
//! `kube::Config` as the embedder's shared client, which keeps its retries).
//!
//! ```no_run
//! # async fn example(client: kube::Client, lister: &tier_kube::KubeLister) {
//! use std::time::Duration;
//!
//! use tier_core::{TierSpec, TierWriter};
//! use tier_kube::{KubeWriter, WriterConfig};
//!
//! let config = WriterConfig { call_timeout: Duration::from_secs(5), ..WriterConfig::default() };
//! let writer = lister.writer(client, config);
//! writer.create(&TierSpec::new("emergency", 50, "[READ-ONLY]: System generated Emergency Tier")).await.ok();
//! # }
//! ```
//!
//! The writer is generic over the Tier object ([`KubeTier`]): Antrea's [`Tier`] by default,
//! Calico's with the resource (group/version) its lister watches.

use std::time::Duration;

use async_trait::async_trait;
use http::StatusCode;
use kube::api::PostParams;
use kube::client::Body;
use kube::runtime::reflector::{ObjectRef, Store};
use tier_core::{DesiredTier, ErrorClass, TierWriter, WriteError};

use crate::classify;
use crate::crd::Tier;
use crate::kube_tier::{Desired, KubeTier};

/// The default field manager of tierd's writes.
pub const DEFAULT_FIELD_MANAGER: &str = "tierd";

/// The default per-call timeout.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Configuration of a [`KubeWriter`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriterConfig {
    /// The field manager recorded in `managedFields` (default [`DEFAULT_FIELD_MANAGER`]).
    pub field_manager: String,
    /// The longest one API call may take, response body included (default
    /// [`DEFAULT_CALL_TIMEOUT`], 10 s); a call cut by it counts as transient.
    pub call_timeout: Duration,
}

impl Default for WriterConfig {
    fn default() -> Self {
        Self {
            field_manager: DEFAULT_FIELD_MANAGER.to_owned(),
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }
}

/// The [`TierWriter`] port: creates and replaces Tier objects of one resource (by default
/// Antrea's `tiers.crd.antrea.io`). An update is a PUT of the object cached in the lister's
/// store with the desired fields set, on the decided resourceVersion (every other field kept);
/// a Tier no longer cached is stale without a request. Every call is cut after the call
/// timeout and never retried.
pub struct KubeWriter<T: KubeTier = Tier> {
    client: kube::Client,
    request: kube::core::Request,
    store: Store<T>,
    resource: T::DynamicType,
    config: WriterConfig,
}

impl<T: KubeTier> Clone for KubeWriter<T> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            request: self.request.clone(),
            store: self.store.clone(),
            resource: self.resource.clone(),
            config: self.config.clone(),
        }
    }
}

impl<T: KubeTier> std::fmt::Debug for KubeWriter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeWriter")
            .field("resource", &self.resource)
            .field("cached", &self.store.state().len())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl KubeWriter<Tier> {
    /// An Antrea Tier writer on `client` whose updates start from the objects in `store`: the reflector
    /// store the core observes through (the lister's, see
    /// [`KubeLister::store`](crate::KubeLister::store), or simply use
    /// [`KubeLister::writer`](crate::KubeLister::writer)). `client` should have kube's retry
    /// layer off ([`client::writer_client`](crate::client::writer_client)).
    pub fn new(client: kube::Client, store: Store<Tier>, config: WriterConfig) -> Self {
        Self::new_with(client, (), store, config)
    }
}

impl<T: KubeTier> KubeWriter<T> {
    /// [`new`](KubeWriter::new) for `resource` (a Calico group/version, say): `store` must be
    /// a store of the same resource ([`KubeLister::writer`](crate::KubeLister::writer) passes
    /// its own).
    pub fn new_with(
        client: kube::Client,
        resource: T::DynamicType,
        store: Store<T>,
        config: WriterConfig,
    ) -> Self {
        Self {
            client,
            request: kube::core::Request::new(T::url_path(&resource, None)),
            store,
            resource,
            config,
        }
    }

    /// The writer's configuration.
    pub fn config(&self) -> &WriterConfig {
        &self.config
    }

    fn params(&self) -> PostParams {
        PostParams {
            dry_run: false,
            field_manager: Some(self.config.field_manager.clone()),
        }
    }

    /// The body of an update: the cached object with the desired fields, on
    /// `resource_version`.
    ///
    /// # Errors
    ///
    /// Stale when the Tier is not cached: it was deleted since the core observed it.
    fn replacement(&self, desired: &Desired<T>, resource_version: &str) -> Result<T, WriteError> {
        let name = desired.name();
        let key = ObjectRef::new_with(name, self.resource.clone());
        let Some(cached) = self.store.get(&key) else {
            return Err(WriteError::stale(format!(
                "Tier {name} is no longer in the Tier cache (deleted since it was observed); \
                 not updating it from scratch"
            )));
        };
        let mut object = (*cached).clone();
        object.set_desired(desired);
        object.meta_mut().resource_version = Some(resource_version.to_owned());
        Ok(object)
    }

    /// POSTs a fresh object for `desired`.
    async fn create_object(&self, desired: &Desired<T>) -> Result<(), WriteError> {
        let body = to_json(&T::object(desired, &self.resource))?;
        let request = self.request.create(&self.params(), body);
        self.send("create", desired.name(), request).await
    }

    /// PUTs the cached object with `desired`'s fields, on `resource_version`.
    async fn update_object(
        &self,
        desired: &Desired<T>,
        resource_version: &str,
    ) -> Result<(), WriteError> {
        let body = to_json(&self.replacement(desired, resource_version)?)?;
        let name = desired.name();
        let request = self.request.replace(name, &self.params(), body);
        self.send("replace", name, request).await
    }

    /// Sends one request, bounded by the call timeout, and classifies the answer.
    async fn send(
        &self,
        verb: &'static str,
        name: &str,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<(), WriteError> {
        let mut request =
            request.map_err(|error| classify::classify(&kube::Error::BuildRequest(error)))?;
        request.extensions_mut().insert(verb);
        let call = async {
            let response = self
                .client
                .send(request.map(Body::from))
                .await
                .map_err(|error| classify::classify(&error))?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect_bytes()
                .await
                .map_err(|error| classify::classify(&error))?;
            match classify::classify_response(parts.status, &parts.headers, &body) {
                None => Ok(()),
                Some(error) if verb == "create" && parts.status == StatusCode::NOT_FOUND => {
                    Err(missing_resource(error, &T::resource_name(&self.resource)))
                }
                Some(error) => Err(error),
            }
        };
        let timeout = self.config.call_timeout;
        match tokio::time::timeout(timeout, call).await {
            Ok(outcome) => outcome,
            Err(_) => Err(WriteError::transient(format!(
                "{verb} of Tier {name} did not complete within {timeout:?}; \
                 it may still have been applied"
            ))),
        }
    }
}

#[async_trait]
impl<T: KubeTier> TierWriter<T::Controller> for KubeWriter<T> {
    async fn create(&self, tier: &Desired<T>) -> Result<(), WriteError> {
        self.create_object(tier).await
    }

    async fn update(&self, tier: &Desired<T>, resource_version: &str) -> Result<(), WriteError> {
        self.update_object(tier, resource_version).await
    }
}

/// A create answered 404: no object is involved (Tiers are cluster-scoped), so the resource
/// itself is missing. That is not stale: the Tier type is not installed until someone installs
/// the CRD (`resource`, `tiers.crd.antrea.io` say).
fn missing_resource(error: WriteError, resource: &str) -> WriteError {
    WriteError {
        class: ErrorClass::NotInstalled,
        message: format!("{}; is the Tier CRD ({resource}) installed?", error.message),
        retry_after: error.retry_after,
        permission: None,
    }
}

fn to_json<T: serde::Serialize>(tier: &T) -> Result<Vec<u8>, WriteError> {
    serde_json::to_vec(tier).map_err(|error| {
        WriteError::denied(format!(
            "cannot serialize Tier (a bug, please report it): {error}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kube::runtime::reflector;
    use kube::runtime::watcher;

    use super::*;

    fn client() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    #[tokio::test]
    async fn replacement_keeps_cached_fields() {
        let (store, mut writer) = reflector::store();
        let mut cached = Tier::new(
            "platform",
            crate::crd::TierSpec {
                priority: 7,
                description: Some("drifted".into()),
            },
        );
        cached.metadata.resource_version = Some("9".into());
        cached.metadata.labels = Some(BTreeMap::from([("team".into(), "net".into())]));
        cached.metadata.annotations = Some(BTreeMap::from([("note".into(), "keep".into())]));
        writer.apply_watcher_event(&watcher::Event::Apply(cached.clone()));

        let kube_writer = KubeWriter::new(client(), store, WriterConfig::default());
        let desired = tier_core::TierSpec::new("platform", 200, "");
        let object = kube_writer.replacement(&desired, "8").unwrap();
        assert_eq!(object.metadata.resource_version.as_deref(), Some("8"));
        assert_eq!(object.metadata.labels, cached.metadata.labels);
        assert_eq!(object.metadata.annotations, cached.metadata.annotations);
        assert_eq!(
            object.spec,
            crate::crd::TierSpec {
                priority: 200,
                description: None
            }
        );
    }

    #[tokio::test]
    async fn an_uncached_tier_is_stale_never_a_minimal_object() {
        // The trap this type makes impossible: a PUT of a bare object would null the labels.
        let (store, _feed) = reflector::store::<Tier>();
        let kube_writer = KubeWriter::new(client(), store, WriterConfig::default());
        let desired = tier_core::TierSpec::new("platform", 200, "d");
        let error = kube_writer.replacement(&desired, "3").unwrap_err();
        assert_eq!(error.class, ErrorClass::Stale);
        assert!(
            error.message.contains("no longer in the Tier cache"),
            "{error}"
        );
        // And through the port: no request is sent (the client points at a closed port, so a
        // request would have been transient, not stale).
        let error = kube_writer.update(&desired, "3").await.unwrap_err();
        assert_eq!(error.class, ErrorClass::Stale, "{error}");
    }

    #[test]
    fn defaults() {
        let config = WriterConfig::default();
        assert_eq!(config.field_manager, "tierd");
        assert_eq!(config.call_timeout, Duration::from_secs(10));
    }

    #[tokio::test]
    async fn a_calico_writer_writes_its_resource_from_the_cached_object() {
        use crate::calico::{CalicoApi, CalicoTier, DefaultAction};
        let resource = CalicoApi::V3.resource();
        let mut feed = reflector::store::Writer::new(resource.clone());
        let store = feed.as_reader();
        let cached: CalicoTier = serde_json::from_value(serde_json::json!({
            "apiVersion": "projectcalico.org/v3", "kind": "Tier",
            "metadata": {"name": "default", "resourceVersion": "9", "labels": {"team": "net"}},
            "spec": {"order": 5, "futureField": 1}
        }))
        .unwrap();
        feed.apply_watcher_event(&watcher::Event::Apply(cached.clone()));
        let writer = KubeWriter::new_with(client(), resource, store, WriterConfig::default());
        let desired = tier_core::calico::TierSpec::new(
            "default",
            Some(tier_core::calico::DEFAULT_ORDER),
            DefaultAction::Deny,
        );
        let object = writer.replacement(&desired, "8").unwrap();
        assert_eq!(object.metadata.resource_version.as_deref(), Some("8"));
        assert_eq!(object.metadata.labels, cached.metadata.labels);
        assert_eq!(object.spec.order, Some(1_000_000.0));
        assert_eq!(object.spec.default_action, Some(DefaultAction::Deny));
        assert_eq!(object.spec.other, cached.spec.other);
        let create = writer.request.create(&writer.params(), Vec::new()).unwrap();
        assert_eq!(
            create.uri().to_string(),
            "/apis/projectcalico.org/v3/tiers?&fieldManager=tierd"
        );
        let replace = writer
            .request
            .replace("default", &writer.params(), Vec::new())
            .unwrap();
        assert_eq!(
            replace.uri().path(),
            "/apis/projectcalico.org/v3/tiers/default"
        );
        // Uncached: stale, as for Antrea.
        let other = tier_core::calico::TierSpec::new("gone", None, DefaultAction::Pass);
        let error = writer.replacement(&other, "1").unwrap_err();
        assert_eq!(error.class, ErrorClass::Stale);
    }
}
