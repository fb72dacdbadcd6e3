//! A small HTTPS validating webhook for tests: a self-signed certificate for 127.0.0.1,
//! `POST /validate/tier` answering AdmissionReviews, and `GET /readyz` standing for the
//! pod's readiness (what [`WebhookConfig::ready_url`] probes).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::antrea::{self, Operation};
use crate::config::WebhookConfig;
use crate::error::Error;
use crate::store::Store;

/// How the test webhook answers AdmissionReviews.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookBehaviour {
    /// Antrea's Tier rules against the Tiers in the store (its "informer cache").
    Antrea {
        /// The user allowed to change priorities.
        controller_user: String,
    },
    /// Allow everything.
    AllowAll,
    /// Deny everything with this message.
    DenyAll {
        /// `response.status.message`.
        message: String,
    },
    /// Never answer (the caller's timeout fires).
    Hang,
    /// Answer with a `response.uid` that does not echo the request's.
    WrongUid,
    /// Answer HTTP 500 without a review.
    ServerError,
}

struct WebhookState {
    store: Store,
    behaviour: Mutex<WebhookBehaviour>,
    ready: AtomicBool,
    reviews: Mutex<Vec<Value>>,
    shutdown: watch::Receiver<bool>,
}

/// A running HTTPS test webhook; stops on drop.
pub struct TestWebhook {
    addr: SocketAddr,
    ca_pem: String,
    state: Arc<WebhookState>,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TestWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestWebhook")
            .field("addr", &self.addr)
            .field("ready", &self.state.ready.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl TestWebhook {
    /// Starts a ready webhook on 127.0.0.1:0 reading Tiers from `store`. Must be called
    /// inside a tokio runtime.
    pub async fn start(store: Store, behaviour: WebhookBehaviour) -> Result<Self, Error> {
        let rcgen::CertifiedKey { cert, signing_key } = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_owned(),
            "localhost".to_owned(),
        ])
        .map_err(Error::Certificate)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der()));
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .map_err(Error::Tls)?;
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(Error::Bind)?;
        let addr = listener.local_addr().map_err(Error::LocalAddr)?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let state = Arc::new(WebhookState {
            store,
            behaviour: Mutex::new(behaviour),
            ready: AtomicBool::new(true),
            reviews: Mutex::new(Vec::new()),
            shutdown: shutdown_rx,
        });
        let task = tokio::spawn(accept_loop(
            listener,
            TlsAcceptor::from(Arc::new(tls)),
            Arc::clone(&state),
        ));
        Ok(Self {
            addr,
            ca_pem: cert.pem(),
            state,
            shutdown,
            task: Some(task),
        })
    }

    /// `https://127.0.0.1:<port>/validate/tier`.
    pub fn url(&self) -> String {
        format!("https://{}/validate/tier", self.addr)
    }

    /// `https://127.0.0.1:<port>/readyz` (200 while ready, 503 otherwise).
    pub fn ready_url(&self) -> String {
        format!("https://{}/readyz", self.addr)
    }

    /// The PEM of the self-signed certificate (its own CA).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A [`WebhookConfig`] for this webhook: its URL and CA, gated on its readiness URL.
    pub fn config(&self) -> WebhookConfig {
        WebhookConfig::new(self.url())
            .ca_pem(self.ca_pem.clone())
            .ready_url(self.ready_url())
    }

    /// Sets the readiness reported by `/readyz`.
    pub fn set_ready(&self, ready: bool) {
        self.state.ready.store(ready, Ordering::SeqCst);
    }

    /// Changes how reviews are answered.
    pub fn set_behaviour(&self, behaviour: WebhookBehaviour) {
        *self
            .state
            .behaviour
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = behaviour;
    }

    /// Every AdmissionReview received, oldest first.
    pub fn reviews(&self) -> Vec<Value> {
        self.state
            .reviews
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for TestWebhook {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn accept_loop(listener: TcpListener, acceptor: TlsAcceptor, state: Arc<WebhookState>) {
    let mut shutdown = state.shutdown.clone();
    loop {
        tokio::select! {
            () = crate::util::stopped(&mut shutdown) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(serve_connection(stream, acceptor.clone(), Arc::clone(&state)));
                }
                Err(error) => {
                    tracing::warn!(%error, "webhook accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
}

async fn serve_connection(stream: TcpStream, acceptor: TlsAcceptor, state: Arc<WebhookState>) {
    let mut shutdown = state.shutdown.clone();
    let handshake = tokio::time::timeout(Duration::from_secs(5), acceptor.accept(stream));
    let tls = match handshake.await {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => {
            tracing::debug!(%error, "webhook TLS handshake failed");
            return;
        }
        Err(_) => return,
    };
    let service = {
        let state = Arc::clone(&state);
        service_fn(move |request| handle(Arc::clone(&state), request))
    };
    let connection = http1::Builder::new().serve_connection(TokioIo::new(tls), service);
    tokio::select! {
        result = connection => {
            if let Err(error) = result {
                tracing::debug!(%error, "webhook connection ended with an error");
            }
        }
        () = crate::util::stopped(&mut shutdown) => {}
    }
}

async fn handle(
    state: Arc<WebhookState>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let respond = |code: StatusCode, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = code;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Ok(response)
    };
    match (request.method(), request.uri().path()) {
        (&Method::GET, "/readyz") => {
            if state.ready.load(Ordering::SeqCst) {
                respond(StatusCode::OK, "ok".to_owned())
            } else {
                respond(StatusCode::SERVICE_UNAVAILABLE, "not ready".to_owned())
            }
        }
        (&Method::POST, "/validate/tier") => {
            let body = match Limited::new(request.into_body(), 3 * 1024 * 1024)
                .collect()
                .await
            {
                Ok(body) => body.to_bytes(),
                Err(_) => return respond(StatusCode::BAD_REQUEST, "unreadable body".to_owned()),
            };
            let Ok(review) = serde_json::from_slice::<Value>(&body) else {
                return respond(
                    StatusCode::BAD_REQUEST,
                    "invalid AdmissionReview".to_owned(),
                );
            };
            state
                .reviews
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(review.clone());
            let behaviour = state
                .behaviour
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let request = review.get("request").cloned().unwrap_or(Value::Null);
            let uid = request
                .get("uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let verdict = match behaviour {
                WebhookBehaviour::Hang => {
                    let mut shutdown = state.shutdown.clone();
                    crate::util::stopped(&mut shutdown).await;
                    return respond(StatusCode::SERVICE_UNAVAILABLE, String::new());
                }
                WebhookBehaviour::ServerError => {
                    return respond(StatusCode::INTERNAL_SERVER_ERROR, "boom".to_owned());
                }
                WebhookBehaviour::AllowAll => Ok(()),
                WebhookBehaviour::WrongUid => Ok(()),
                WebhookBehaviour::DenyAll { ref message } => Err(message.clone()),
                WebhookBehaviour::Antrea {
                    ref controller_user,
                } => antrea_verdict(&state.store, &request, controller_user),
            };
            let uid = if behaviour == WebhookBehaviour::WrongUid {
                format!("not-{uid}")
            } else {
                uid
            };
            let response = match verdict {
                Ok(()) => json!({"uid": uid, "allowed": true}),
                Err(message) => json!({
                    "uid": uid,
                    "allowed": false,
                    "status": {"metadata": {}, "message": message},
                }),
            };
            respond(
                StatusCode::OK,
                json!({
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": response,
                })
                .to_string(),
            )
        }
        _ => respond(StatusCode::NOT_FOUND, "not found".to_owned()),
    }
}

fn antrea_verdict(store: &Store, request: &Value, controller_user: &str) -> Result<(), String> {
    let operation = request
        .get("operation")
        .and_then(Value::as_str)
        .and_then(Operation::parse);
    let Some(operation) = operation else {
        return Ok(());
    };
    let object = request.get("object").filter(|o| o.is_object());
    let old_object = request.get("oldObject").filter(|o| o.is_object());
    let username = request
        .pointer("/userInfo/username")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = old_object
        .and_then(|o| o.pointer("/metadata/name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    antrea::review(
        &antrea::Review {
            operation,
            object,
            old_object,
            username,
            controller_user,
            cluster_network_policy: false,
            references: store.policies().references(name),
        },
        &store.list(),
    )
}
