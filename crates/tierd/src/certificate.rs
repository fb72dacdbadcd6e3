//! `--self-signed-cert` as a dependency: the Secret and the webhook configuration's
//! `caBundle` settled in the background, retried with backoff until the API server answers,
//! then kept by [`certs::maintain`]. The [`SERVING_CERTIFICATE`] check names what it waits for.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tier_kube::backoff::RetryBackoff;
use tier_kube::certs::{self, SelfSignedConfig};
use tier_server::readiness::{CheckState, Shutdown};
use tokio::sync::watch;

/// The readiness check that passes once the self-signed certificate is settled (the webhook
/// cannot serve before it; required by `/readyz`).
pub const SERVING_CERTIFICATE: &str = "serving-certificate";

/// How often the Secret, the files and the caBundle are checked once settled.
pub(crate) const SELF_SIGNED_POLL: Duration = Duration::from_secs(60);

/// What to keep and the files to write the serving certificate to.
#[derive(Clone, Debug)]
pub struct SelfSigned {
    /// The Secret, the Service's names, the webhook configuration.
    pub config: SelfSignedConfig,
    /// The certificate file the webhook serves (PEM).
    pub cert: PathBuf,
    /// Its key file (PEM).
    pub key: PathBuf,
}

/// Settles the certificate (each round cut after `call_timeout`), publishing the check's
/// state, then maintains it until `stop`.
pub(crate) async fn settle_then_maintain(
    client: kube::Client,
    wanted: SelfSigned,
    call_timeout: Duration,
    state: watch::Sender<CheckState>,
    stop: Shutdown,
) {
    let SelfSigned { config, cert, key } = wanted;
    let object = format!("Secret {}/{}", config.namespace, config.secret);
    let mut backoff = RetryBackoff::default();
    let mut attempts: u32 = 0;
    loop {
        let round = certs::reconcile(&client, &config, &cert, &key, SystemTime::now());
        let error = match tokio::time::timeout(call_timeout, round).await {
            Ok(Ok(done)) => {
                tracing::info!(
                    secret = %object,
                    action = ?done.secret,
                    ca_bundle_updated = done.ca_bundle_updated,
                    attempts,
                    "self-signed serving certificate in place"
                );
                state.send_replace(CheckState::Ok);
                break;
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer from the API server within {call_timeout:?}"),
        };
        attempts = attempts.saturating_add(1);
        let reason = format!(
            "settling the self-signed certificate ({object}), attempt {attempts}: {error}; retrying with backoff"
        );
        if attempts == 1 {
            tracing::warn!(%reason, "the webhook waits for its certificate");
        } else {
            tracing::debug!(%reason, "the webhook waits for its certificate");
        }
        state.send_replace(CheckState::Failed(reason));
        let wait = backoff.next().unwrap_or(RetryBackoff::STARTUP.cap);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.triggered() => return,
        }
    }
    certs::maintain(client, config, cert, key, SELF_SIGNED_POLL, async move {
        stop.triggered().await;
    })
    .await;
}
