//! `--self-signed-cert` as a dependency: the Secret and the webhook configuration's
//! `caBundle` settled in the background, retried with backoff until the API server answers,
//! then kept by [`certs::maintain`]. The [`SERVING_CERTIFICATE`] check names what it waits for.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tier_kube::backoff::{OutageLog, RetryBackoff};
use tier_kube::certs::{self, CertError, Reconciled, SelfSignedConfig};
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
    let round = || certs::reconcile(&client, &config, &cert, &key, SystemTime::now());
    if !settle(round, &object, call_timeout, &state, &stop).await {
        return;
    }
    certs::maintain(client, config, cert, key, SELF_SIGNED_POLL, async move {
        stop.triggered().await;
    })
    .await;
}

/// Runs `round` (the API server's [`certs::reconcile`], or a test's stand-in) until it
/// succeeds, retrying with [`RetryBackoff::STARTUP`] and publishing each failure as the
/// check's reason (the log says the outage once, with a reminder at most every minute:
/// [`OutageLog`]); `true` once settled, `false` when `stop` came first.
async fn settle<F, Fut>(
    mut round: F,
    object: &str,
    call_timeout: Duration,
    state: &watch::Sender<CheckState>,
    stop: &Shutdown,
) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Reconciled, CertError>>,
{
    let mut backoff = RetryBackoff::default();
    let mut attempts: u32 = 0;
    let mut outage = OutageLog::new(format!(
        "settling the self-signed certificate ({object}; the webhook waits for it)"
    ));
    loop {
        let error = match tokio::time::timeout(call_timeout, round()).await {
            Ok(Ok(done)) => {
                outage.answered();
                tracing::info!(
                    secret = %object,
                    action = ?done.secret,
                    ca_bundle_updated = done.ca_bundle_updated,
                    attempts,
                    "self-signed serving certificate in place"
                );
                state.send_replace(CheckState::Ok);
                return true;
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer from the API server within {call_timeout:?}"),
        };
        attempts = attempts.saturating_add(1);
        outage.failed(&error);
        let reason = format!(
            "settling the self-signed certificate ({object}), attempt {attempts}: {error}; retrying with backoff"
        );
        state.send_replace(CheckState::Failed(reason));
        let wait = backoff.next().unwrap_or(RetryBackoff::STARTUP.cap);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.triggered() => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::sync::{Arc, Mutex};

    use tier_kube::certs::{CertBundle, SecretAction};
    use tokio::time::Instant;

    use super::*;

    const OBJECT: &str = "Secret kube-system/tierd-self-signed-cert";
    const CALL_TIMEOUT: Duration = Duration::from_secs(10);

    /// When the stand-in API server was asked.
    type Asked = Arc<Mutex<Vec<Instant>>>;

    /// A stand-in API server, unreachable until `up_at` (refusing with a missing Secret), then
    /// settling the certificate; records when it was asked.
    fn server(
        up_at: Instant,
    ) -> (
        Asked,
        impl FnMut() -> std::future::Ready<Result<Reconciled, CertError>> + Send + 'static,
    ) {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let round = move || {
            let now = Instant::now();
            log.lock().unwrap().push(now);
            std::future::ready(if now >= up_at {
                Ok(Reconciled {
                    secret: SecretAction::Filled,
                    files_written: true,
                    ca_bundle_updated: true,
                    bundle: CertBundle {
                        ca_crt: String::new(),
                        ca_key: String::new(),
                        tls_crt: String::new(),
                        tls_key: String::new(),
                    },
                })
            } else {
                Err(CertError::SecretMissing(OBJECT.to_owned()))
            })
        };
        (asked, round)
    }

    /// The certificate settled in a task on `round`: the check's state, and the task.
    fn spawn<F, Fut>(
        round: F,
        stop: &Shutdown,
    ) -> (watch::Receiver<CheckState>, tokio::task::JoinHandle<bool>)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Reconciled, CertError>> + Send + 'static,
    {
        let (state, check) = watch::channel(CheckState::failed("not asked yet"));
        let stop = stop.clone();
        let task =
            tokio::spawn(async move { settle(round, OBJECT, CALL_TIMEOUT, &state, &stop).await });
        (check, task)
    }

    /// The waits between attempts.
    fn gaps(asked: &Mutex<Vec<Instant>>) -> Vec<Duration> {
        let asked = asked.lock().unwrap();
        asked.windows(2).map(|w| w[1] - w[0]).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn while_the_api_server_fails_attempts_back_off_from_200_ms_capped_at_2_s() {
        let (asked, round) = server(Instant::now() + Duration::from_secs(3600));
        let stop = Shutdown::new();
        let (check, _task) = spawn(round, &stop);
        tokio::time::sleep(Duration::from_secs(60)).await;
        let gaps = gaps(&asked);
        assert!(gaps.len() >= 30, "a minute of retries: {gaps:?}");
        for (n, gap) in gaps.iter().enumerate() {
            // Equal jitter: the n-th wait lies in [d/2, d], d = min(2 s, 200 ms * 2^n).
            let d = Duration::from_millis(200 << n.min(10)).min(RetryBackoff::STARTUP.cap);
            assert!(
                *gap >= d / 2 && *gap <= d,
                "wait {n} was {gap:?}, not in [{:?}, {d:?}]",
                d / 2
            );
        }
        let attempts = asked.lock().unwrap().len();
        let CheckState::Failed(reason) = check.borrow().clone() else {
            panic!("the check passed without a certificate");
        };
        assert!(
            reason.contains(&format!("attempt {attempts}:")) && reason.contains("does not exist"),
            "the reason names the attempt and the API server's answer: {reason}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn once_the_api_server_answers_the_check_passes_within_one_step() {
        let up_at = Instant::now() + Duration::from_secs(10);
        let (asked, round) = server(up_at);
        let stop = Shutdown::new();
        let (mut check, task) = spawn(round, &stop);
        tokio::time::timeout(Duration::from_secs(60), check.wait_for(CheckState::is_ok))
            .await
            .unwrap()
            .unwrap();
        let passed_at = Instant::now();
        assert!(
            passed_at >= up_at && passed_at - up_at <= RetryBackoff::STARTUP.cap,
            "passed {:?} after the API server answered",
            passed_at - up_at
        );
        assert!(task.await.unwrap(), "settled, so the maintenance follows");
        let asked = asked.lock().unwrap();
        assert_eq!(
            asked.iter().filter(|at| **at >= up_at).count(),
            1,
            "no attempt after the settling one"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_retry_ends_at_shutdown() {
        let (asked, round) = server(Instant::now() + Duration::from_secs(3600));
        let stop = Shutdown::new();
        let (check, task) = spawn(round, &stop);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(asked.lock().unwrap().len() >= 5);
        stop.trigger();
        let settled = tokio::time::timeout(Duration::from_millis(1), task)
            .await
            .expect("the retry ends at once at shutdown")
            .unwrap();
        assert!(!settled, "not settled, so no maintenance follows");
        let at_stop = asked.lock().unwrap().len();
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(asked.lock().unwrap().len(), at_stop, "asked after shutdown");
        assert!(!check.borrow().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn the_retry_ends_when_tierds_tasks_are_dropped() {
        let (asked, round) = server(Instant::now() + Duration::from_secs(3600));
        let stop = Shutdown::new();
        let (state, _check) = watch::channel(CheckState::failed("not asked yet"));
        // As `Antrea::serve` spawns it, into the `Tasks` a `Tierd` owns.
        let task = tokio::spawn(async move {
            settle(round, OBJECT, CALL_TIMEOUT, &state, &stop).await;
        });
        let mut tasks = crate::Tasks::default();
        tasks.handles.push(task);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(asked.lock().unwrap().len() >= 5);
        drop(tasks);
        tokio::task::yield_now().await;
        let at_drop = asked.lock().unwrap().len();
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(
            asked.lock().unwrap().len(),
            at_drop,
            "asked after Tierd was dropped"
        );
    }
}
