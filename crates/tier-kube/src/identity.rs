//! Who a client authenticates as, asked of the API server itself.
//!
//! The webhook lets exactly one user change a Tier's priority: the controller that corrects
//! them. Rather than a string every deployment must keep in step with its service account,
//! tierd asks Kubernetes whom its own client is (`authentication.k8s.io/v1`
//! `SelfSubjectReview`, GA since Kubernetes 1.28: a `POST` answered with the request's own
//! user) and lets that user through. An explicit setting (`--controller-user`, or
//! [`AdmissionPolicy::antrea`](tier_core::admission::AdmissionPolicy::antrea) in a library)
//! overrides it.
//!
//! # A dependency, not a precondition
//!
//! Only the webhook's UPDATE review reads the identity, so nothing waits for it at start: a
//! [`ControllerIdentity`] asks in the background ([`ControllerIdentity::discover`]), retrying
//! with a capped, jittered backoff ([`RetryBackoff`]) for as long as it lives, and says
//! meanwhile what it waits for ([`ControllerIdentity::state`]), for a readiness check and for
//! the UPDATE handler's refusal. An API server unreachable at start, too old for the API, or
//! naming no user is never fatal.
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), tier_kube::identity::IdentityError> {
//! let user = tier_kube::identity::whoami(&client).await?;
//! println!("tierd's writes are made as {user}");
//!
//! // Or learned in the background, retried until the API server answers:
//! let identity = tier_kube::identity::ControllerIdentity::discover(client, std::time::Duration::from_secs(10))?;
//! assert!(identity.user().is_none() || identity.user().is_some());
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::backoff::{OutageLog, RetryBackoff};

/// Asking the API server who the client is failed.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The server does not serve `selfsubjectreviews` (Kubernetes before 1.28, or the API
    /// disabled).
    #[error(
        "the API server does not support SelfSubjectReview (authentication.k8s.io/v1, \
         Kubernetes 1.28+); set the controller user explicitly (--controller-user)"
    )]
    Unsupported,
    /// The request failed (unreachable server, credentials refused).
    #[error(
        "cannot ask the API server who this client is: {}; set the controller user explicitly (--controller-user) or check the connection",
        crate::explain::error_words(.0)
    )]
    Request(#[source] kube::Error),
    /// The server answered without a user name.
    #[error(
        "the API server's SelfSubjectReview named no user; set the controller user explicitly \
         (--controller-user)"
    )]
    NoUser,
    /// The API server did not answer within the call timeout.
    #[error(
        "the API server did not say who this client is within {0:?} (SelfSubjectReview); check \
         the connection or set the controller user explicitly (--controller-user)"
    )]
    Timeout(Duration),
    /// [`ControllerIdentity::discover`] was called outside a tokio runtime (a bug in the caller).
    #[error("the controller identity must be discovered from within a tokio runtime: {0}")]
    NoRuntime(#[source] tokio::runtime::TryCurrentError),
}

/// The user name the API server sees for `client`'s requests.
///
/// # Errors
///
/// [`IdentityError::Unsupported`] when the server does not serve the API (404), else the
/// request's error; either way the caller should fall back to an explicit user.
pub async fn whoami(client: &kube::Client) -> Result<String, IdentityError> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = match api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
    {
        Ok(review) => review,
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 405 => {
            return Err(IdentityError::Unsupported);
        }
        Err(error) => return Err(IdentityError::Request(error)),
    };
    review
        .status
        .and_then(|status| status.user_info)
        .and_then(|user| user.username)
        .filter(|name| !name.is_empty())
        .ok_or(IdentityError::NoUser)
}

/// What a [`ControllerIdentity`] knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdentityState {
    /// Still asking: how many answers failed so far and the last failure, in words.
    Pending {
        /// Failed attempts so far (0 before the first answer).
        attempts: u32,
        /// The last failure, with what to do.
        last_error: Option<String>,
    },
    /// The user the API server sees for the client's requests, or the one set explicitly.
    Known(String),
}

/// The controller's identity, known at once ([`known`](Self::known)) or learned in the
/// background ([`discover`](Self::discover)); see the [module docs](self). Cheap to clone; the
/// background task stops when the last clone is dropped, or once it learned the user.
#[derive(Clone, Debug)]
pub struct ControllerIdentity {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: watch::Receiver<IdentityState>,
    task: Option<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl ControllerIdentity {
    /// An identity set explicitly (`--controller-user`): known from the start, no request.
    pub fn known(user: impl Into<String>) -> Self {
        let (_, state) = watch::channel(IdentityState::Known(user.into()));
        Self {
            inner: Arc::new(Inner { state, task: None }),
        }
    }

    /// Asks the API server with [`whoami`] (each attempt cut after `call_timeout`) until it
    /// answers, retrying with [`RetryBackoff::STARTUP`]. Spawns the task at once.
    ///
    /// # Errors
    ///
    /// [`IdentityError::NoRuntime`] outside a tokio runtime; nothing the API server does.
    pub fn discover(client: kube::Client, call_timeout: Duration) -> Result<Self, IdentityError> {
        Self::discover_with(client, call_timeout, RetryBackoff::default())
    }

    /// Like [`discover`](Self::discover), with an explicit retry backoff.
    ///
    /// # Errors
    ///
    /// [`IdentityError::NoRuntime`] outside a tokio runtime.
    pub fn discover_with(
        client: kube::Client,
        call_timeout: Duration,
        backoff: RetryBackoff,
    ) -> Result<Self, IdentityError> {
        Self::spawn(move || whoami_owned(client.clone()), call_timeout, backoff)
    }

    /// The background task on `ask` (the API server, or a test's stand-in).
    fn spawn<F, Fut>(
        ask: F,
        call_timeout: Duration,
        backoff: RetryBackoff,
    ) -> Result<Self, IdentityError>
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<String, IdentityError>> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().map_err(IdentityError::NoRuntime)?;
        let (tx, state) = watch::channel(IdentityState::Pending {
            attempts: 0,
            last_error: None,
        });
        let task = runtime.spawn(ask_until_answered(ask, call_timeout, backoff, tx));
        Ok(Self {
            inner: Arc::new(Inner {
                state,
                task: Some(task),
            }),
        })
    }

    /// What is known now.
    pub fn state(&self) -> IdentityState {
        self.inner.state.borrow().clone()
    }

    /// The user, once known.
    pub fn user(&self) -> Option<String> {
        match &*self.inner.state.borrow() {
            IdentityState::Known(user) => Some(user.clone()),
            IdentityState::Pending { .. } => None,
        }
    }

    /// Resolves with the user once known.
    pub async fn wait(&self) -> String {
        let mut state = self.inner.state.clone();
        loop {
            if let IdentityState::Known(user) = &*state.borrow_and_update() {
                return user.clone();
            }
            if state.changed().await.is_err() {
                // The task is gone without an answer (only when aborted): nothing will change.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// [`whoami`] on an owned client, for the task.
async fn whoami_owned(client: kube::Client) -> Result<String, IdentityError> {
    whoami(&client).await
}

/// Asks until answered; logs the outage once, a reminder at most every
/// [`OUTAGE_REMINDER`](crate::backoff::OUTAGE_REMINDER), and the answer ([`OutageLog`]).
async fn ask_until_answered<F, Fut>(
    mut ask: F,
    call_timeout: Duration,
    mut backoff: RetryBackoff,
    state: watch::Sender<IdentityState>,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<String, IdentityError>>,
{
    let mut attempts: u32 = 0;
    let mut outage = OutageLog::new(
        "asking the API server who tierd is (SelfSubjectReview; UPDATE reviews wait for it)",
    );
    loop {
        let error = match tokio::time::timeout(call_timeout, ask()).await {
            Ok(Ok(user)) => {
                outage.answered();
                tracing::info!(%user, attempts, "the API server says who tierd is (SelfSubjectReview)");
                state.send_replace(IdentityState::Known(user));
                return;
            }
            Ok(Err(error)) => error,
            Err(_) => IdentityError::Timeout(call_timeout),
        };
        attempts = attempts.saturating_add(1);
        let words = error.to_string();
        outage.failed(&words);
        state.send_replace(IdentityState::Pending {
            attempts,
            last_error: Some(words),
        });
        let wait = backoff.next().unwrap_or(RetryBackoff::STARTUP.cap);
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tokio::time::Instant;

    use super::*;

    /// When the stand-in API server was asked.
    type Asked = Arc<Mutex<Vec<Instant>>>;

    /// A stand-in API server that fails `failures` times, then answers; records when it was asked.
    fn server(
        failures: usize,
    ) -> (
        Asked,
        impl FnMut() -> std::future::Ready<Result<String, IdentityError>> + Send + 'static,
    ) {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let ask = move || {
            let mut log = log.lock().unwrap();
            log.push(Instant::now());
            std::future::ready(if log.len() > failures {
                Ok("system:serviceaccount:kube-system:tierd".to_owned())
            } else {
                Err(IdentityError::NoUser)
            })
        };
        (asked, ask)
    }

    /// The waits between attempts.
    fn gaps(asked: &Mutex<Vec<Instant>>) -> Vec<Duration> {
        asked
            .lock()
            .unwrap()
            .windows(2)
            .map(|w| w[1] - w[0])
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn retries_back_off_from_200_ms_and_are_capped_at_2_s() {
        let (asked, ask) = server(12);
        let identity =
            ControllerIdentity::spawn(ask, Duration::from_secs(10), RetryBackoff::default())
                .unwrap();
        let user = tokio::time::timeout(Duration::from_secs(60), identity.wait())
            .await
            .unwrap();
        assert_eq!(user, "system:serviceaccount:kube-system:tierd");
        let gaps = gaps(&asked);
        assert_eq!(gaps.len(), 12, "12 failures, 12 waits: {gaps:?}");
        for (n, gap) in gaps.iter().enumerate() {
            // Equal jitter: the n-th wait lies in [d/2, d], d = min(2 s, 200 ms * 2^n).
            let d = Duration::from_millis(200 * 2u64.pow(n as u32)).min(Duration::from_secs(2));
            assert!(
                *gap >= d / 2 && *gap <= d,
                "wait {n} was {gap:?}, not in [{:?}, {d:?}]",
                d / 2
            );
        }
        assert!(
            gaps[6..].iter().all(|g| *g >= Duration::from_secs(1)),
            "capped waits: {gaps:?}"
        );
        assert_eq!(identity.state(), IdentityState::Known(user));
    }

    #[tokio::test(start_paused = true)]
    async fn the_retry_ends_when_the_last_handle_is_dropped() {
        let (asked, ask) = server(usize::MAX);
        let identity =
            ControllerIdentity::spawn(ask, Duration::from_secs(10), RetryBackoff::default())
                .unwrap();
        let clone = identity.clone();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(matches!(clone.state(), IdentityState::Pending { attempts, .. } if attempts >= 5));
        drop(identity);
        tokio::time::sleep(Duration::from_secs(10)).await;
        let with_a_clone = asked.lock().unwrap().len();
        assert!(with_a_clone > 10, "a clone keeps it asking: {with_a_clone}");
        drop(clone);
        tokio::task::yield_now().await;
        let at_drop = asked.lock().unwrap().len();
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(
            asked.lock().unwrap().len(),
            at_drop,
            "asked again after the last handle went"
        );
    }
}
