//! Validating admission of Tier writes: none, Antrea's rules in process, or a call to a real
//! HTTPS webhook with kube-apiserver's request format, failure policy and error messages.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde_json::{Value, json};

use crate::antrea::{self, Operation, WEBHOOK_NAME};
use crate::config::{AdmissionMode, FailurePolicy, WebhookConfig};
use crate::error::Error;
use crate::status::StatusError;
use crate::store::Store;
use crate::tier::{GROUP, KIND, PLURAL, VERSION};
use crate::util::new_uid;

/// Largest webhook response read (a larger one fails the call, as a garbled one does).
const WEBHOOK_RESPONSE_LIMIT: usize = 3 * 1024 * 1024;

/// One write under review.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdmissionInput<'a> {
    pub(crate) operation: Operation,
    pub(crate) name: &'a str,
    pub(crate) user: &'a str,
    pub(crate) object: Option<&'a Value>,
    pub(crate) old_object: Option<&'a Value>,
    pub(crate) dry_run: bool,
    /// `CreateOptions`, `UpdateOptions`, `PatchOptions` or `DeleteOptions`.
    pub(crate) options_kind: &'static str,
}

/// The active admission mode, with its webhook client built once.
pub(crate) struct Admission {
    mode: AdmissionMode,
    webhook: Option<WebhookClient>,
    /// Antrea's `ClusterNetworkPolicy` feature gate, for the built-in rules.
    cluster_network_policy: bool,
}

impl Admission {
    /// Prepares `mode` (builds the TLS client of a webhook mode).
    pub(crate) fn new(mode: AdmissionMode, cluster_network_policy: bool) -> Result<Self, Error> {
        let webhook = match &mode {
            AdmissionMode::Webhook(config) => Some(WebhookClient::new(config.clone())?),
            _ => None,
        };
        Ok(Self {
            mode,
            webhook,
            cluster_network_policy,
        })
    }

    pub(crate) fn mode(&self) -> &AdmissionMode {
        &self.mode
    }

    /// Admits or rejects one write. Denials are 400 with an empty reason; unreachable
    /// webhooks with policy Fail are 500 InternalError.
    pub(crate) async fn review(
        &self,
        store: &Store,
        input: AdmissionInput<'_>,
    ) -> Result<(), StatusError> {
        match (&self.mode, &self.webhook) {
            (AdmissionMode::None, _) => Ok(()),
            (AdmissionMode::BuiltinAntrea { controller_user }, _) => antrea::review(
                &antrea::Review {
                    operation: input.operation,
                    object: input.object,
                    old_object: input.old_object,
                    username: input.user,
                    controller_user,
                    cluster_network_policy: self.cluster_network_policy,
                    references: store.policies().references(input.name),
                },
                &store.list(),
            )
            .map_err(|message| StatusError::admission_denied(WEBHOOK_NAME, 400, "", &message)),
            (AdmissionMode::Webhook(_), Some(client)) => client.review(input).await,
            (AdmissionMode::Webhook(config), None) => Err(StatusError::internal(&format!(
                "failed calling webhook \"{}\": webhook client not configured",
                config.name
            ))),
        }
    }
}

type HttpsClient<B> = Client<HttpsConnector<HttpConnector>, B>;

/// Calls one webhook like kube-apiserver's dispatcher.
struct WebhookClient {
    config: WebhookConfig,
    post: HttpsClient<Full<Bytes>>,
    get: HttpsClient<Empty<Bytes>>,
}

/// Why a call did not produce a usable verdict (subject to the failure policy).
struct CallFailure(String);

impl WebhookClient {
    fn new(config: WebhookConfig) -> Result<Self, Error> {
        let tls = tls_client_config(config.ca_pem.as_deref(), config.insecure)?;
        let connector = || {
            HttpsConnectorBuilder::new()
                .with_tls_config(tls.clone())
                .https_or_http()
                .enable_http1()
                .build()
        };
        Ok(Self {
            post: Client::builder(TokioExecutor::new()).build(connector()),
            get: Client::builder(TokioExecutor::new()).build(connector()),
            config,
        })
    }

    async fn review(&self, input: AdmissionInput<'_>) -> Result<(), StatusError> {
        match self.call(input).await {
            Ok(verdict) => verdict,
            Err(CallFailure(why)) => match self.config.failure_policy {
                FailurePolicy::Fail => {
                    tracing::warn!(webhook = %self.config.name, error = %why, "failed calling webhook, failing closed");
                    Err(StatusError::internal(&format!(
                        "failed calling webhook \"{}\": {why}",
                        self.config.name
                    )))
                }
                FailurePolicy::Ignore => {
                    tracing::warn!(webhook = %self.config.name, error = %why, "failed calling webhook, failing open");
                    Ok(())
                }
            },
        }
    }

    async fn call(
        &self,
        input: AdmissionInput<'_>,
    ) -> Result<Result<(), StatusError>, CallFailure> {
        let url = url_with_timeout(&self.config.url, self.config.timeout);
        if let Some(ready_url) = &self.config.ready_url
            && !self.ready(ready_url).await
        {
            return Err(CallFailure(format!(
                "failed to call webhook: Post {url:?}: no endpoints available for service {:?}",
                self.config.service
            )));
        }
        let uid = new_uid();
        let body = review_request(&uid, input);
        let request = Request::post(url.as_str())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, */*")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| CallFailure(format!("failed to call webhook: {e}")))?;
        let exchange = async {
            let response = self.post.request(request).await.map_err(boxed)?;
            let status = response.status();
            let bytes = Limited::new(response.into_body(), WEBHOOK_RESPONSE_LIMIT)
                .collect()
                .await?
                .to_bytes();
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, bytes))
        };
        let (status, bytes) = match tokio::time::timeout(self.config.timeout, exchange).await {
            Err(_) => {
                return Err(CallFailure(format!(
                    "failed to call webhook: Post {url:?}: context deadline exceeded"
                )));
            }
            Ok(Err(e)) => {
                return Err(CallFailure(format!(
                    "failed to call webhook: Post {url:?}: {}",
                    error_chain(e.as_ref())
                )));
            }
            Ok(Ok(pair)) => pair,
        };
        if !status.is_success() {
            return Err(CallFailure(format!(
                "failed to call webhook: an error on the server ({:?}) has prevented the request from succeeding",
                String::from_utf8_lossy(&bytes)
            )));
        }
        let review: Value = serde_json::from_slice(&bytes)
            .map_err(|e| CallFailure(format!("received invalid webhook response: {e}")))?;
        let Some(response) = review.get("response").filter(|r| r.is_object()) else {
            return Err(CallFailure(
                "received invalid webhook response: response is missing".to_owned(),
            ));
        };
        let got_uid = response
            .get("uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if got_uid != uid {
            return Err(CallFailure(format!(
                "expected response.uid={uid:?}, got {got_uid:?}"
            )));
        }
        if response.get("allowed").and_then(Value::as_bool) == Some(true) {
            return Ok(Ok(()));
        }
        let status = response.get("status").cloned().unwrap_or(Value::Null);
        let code = status
            .get("code")
            .and_then(Value::as_u64)
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(0);
        let text = |field: &str| {
            status
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        Ok(Err(StatusError::admission_denied(
            &self.config.name,
            code,
            text("reason"),
            text("message"),
        )))
    }

    /// Whether the readiness URL answers 200 within the call timeout.
    async fn ready(&self, ready_url: &str) -> bool {
        let Ok(request) = Request::get(ready_url).body(Empty::<Bytes>::new()) else {
            return false;
        };
        let probe = async {
            match self.get.request(request).await {
                Ok(response) => {
                    let ok = response.status() == StatusCode::OK;
                    // Drain so the connection can be reused.
                    let _ = response.into_body().collect().await;
                    ok
                }
                Err(_) => false,
            }
        };
        tokio::time::timeout(self.config.timeout, probe)
            .await
            .unwrap_or(false)
    }
}

fn boxed<E: std::error::Error + Send + Sync + 'static>(
    e: E,
) -> Box<dyn std::error::Error + Send + Sync> {
    Box::new(e)
}

/// An error and its sources joined with ": ".
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// Appends `timeout=<n>s` to the query, as kube-apiserver does.
fn url_with_timeout(url: &str, timeout: Duration) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}timeout={}s", timeout.as_secs().max(1))
}

/// The `admission.k8s.io/v1` AdmissionReview kube-apiserver sends for a Tier write.
pub(crate) fn review_request(uid: &str, input: AdmissionInput<'_>) -> Value {
    let kind = json!({"group": GROUP, "version": VERSION, "kind": KIND});
    let resource = json!({"group": GROUP, "version": VERSION, "resource": PLURAL});
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": kind,
            "resource": resource,
            "requestKind": kind,
            "requestResource": resource,
            "name": input.name,
            "operation": input.operation.as_str(),
            "userInfo": {"username": input.user, "groups": ["system:authenticated"]},
            "object": input.object.cloned().unwrap_or(Value::Null),
            "oldObject": input.old_object.cloned().unwrap_or(Value::Null),
            "dryRun": input.dry_run,
            "options": {"kind": input.options_kind, "apiVersion": "meta.k8s.io/v1"},
        }
    })
}

/// A rustls client configuration trusting `ca_pem` (or nothing at all when `insecure`).
fn tls_client_config(ca_pem: Option<&str>, insecure: bool) -> Result<rustls::ClientConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?;
    if insecure {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth());
    }
    let mut roots = RootCertStore::empty();
    if let Some(pem) = ca_pem {
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(|e| Error::InvalidCa(e.to_string()))?;
            roots
                .add(cert)
                .map_err(|e| Error::InvalidCa(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(Error::InvalidCa("no certificate found".to_owned()));
        }
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// Certificate verifier for `insecure` mode: checks handshake signatures, trusts any chain.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_the_timeout_parameter() {
        assert_eq!(
            url_with_timeout("https://a/validate/tier", Duration::from_secs(5)),
            "https://a/validate/tier?timeout=5s"
        );
        assert_eq!(
            url_with_timeout("https://a/v?x=1", Duration::from_millis(10)),
            "https://a/v?x=1&timeout=1s"
        );
    }

    #[test]
    fn review_request_has_the_admission_v1_shape() {
        let obj = json!({"metadata": {"name": "t"}});
        let review = review_request(
            "u1",
            AdmissionInput {
                operation: Operation::Delete,
                name: "t",
                user: "alice",
                object: None,
                old_object: Some(&obj),
                dry_run: false,
                options_kind: "DeleteOptions",
            },
        );
        assert_eq!(review["request"]["operation"], "DELETE");
        assert_eq!(review["request"]["userInfo"]["username"], "alice");
        assert_eq!(review["request"]["object"], Value::Null);
        assert_eq!(review["request"]["oldObject"], obj);
        assert_eq!(review["request"]["resource"]["resource"], "tiers");
    }

    #[test]
    fn rejects_a_ca_bundle_without_certificates() {
        assert!(matches!(
            tls_client_config(Some("not a pem"), false),
            Err(Error::InvalidCa(_))
        ));
        assert!(tls_client_config(None, true).is_ok());
    }
}
