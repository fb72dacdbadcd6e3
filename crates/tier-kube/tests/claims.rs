//! `LeaseClaims` against a fake of the one Lease it uses, on tokio's paused clock: the kube
//! client's real requests (GET, POST, PUT with a resourceVersion) answered in process with
//! kube-apiserver's semantics for one object (404, `AlreadyExists`, `Conflict` on a stale
//! resourceVersion), and faults (an error status, an answer that never comes, a write by
//! "another replica" just before ours). The same claims on a real kube-apiserver:
//! `tests/tests/claims_e2e.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tier_core::{ClaimError, ErrorClass, PriorityClaims};
use tier_kube::claims::{ANNOTATION, ClaimsConfig, LeaseClaims, MAX_ATTEMPTS};

const NS: &str = "kube-system";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/tierd-priority-claims";

/// What the fake does with the next request.
#[derive(Clone, Debug)]
enum Fault {
    /// Answers with this code and reason.
    Status(u16, &'static str),
    /// Never answers.
    Hang,
}

#[derive(Default)]
struct State {
    lease: Option<Value>,
    version: u64,
    /// Faults for the next requests, in order.
    faults: Vec<Fault>,
    /// Before each of the next PUTs is applied, "another replica" writes this annotation
    /// (this many times).
    interloper: Option<(String, usize)>,
    /// Every request: `GET`, `POST`, `PUT 409` ...
    log: Vec<String>,
}

/// One Lease, as kube-apiserver keeps it.
#[derive(Clone, Default)]
struct FakeLease(Arc<Mutex<State>>);

fn status(code: u16, reason: &str, message: &str) -> Response<Full<bytes::Bytes>> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::from(body.to_string()))
        .unwrap()
}

fn ok(code: StatusCode, object: &Value) -> Response<Full<bytes::Bytes>> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::from(object.to_string()))
        .unwrap()
}

impl FakeLease {
    fn client(&self) -> kube::Client {
        kube::Client::new(self.clone(), NS)
    }

    fn log(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap().log)
    }

    fn fault(&self, fault: Fault) {
        self.0.lock().unwrap().faults.push(fault);
    }

    fn interlope(&self, annotation: &str) {
        self.interlope_times(annotation, 1);
    }

    fn interlope_times(&self, annotation: &str, times: usize) {
        self.0.lock().unwrap().interloper = Some((annotation.to_owned(), times));
    }

    fn stored(&self) -> Option<Value> {
        self.0.lock().unwrap().lease.clone()
    }

    /// The stored claims as (tier, priority).
    fn claims(&self) -> Vec<(String, i64)> {
        let lease = self.stored().unwrap();
        let text = lease["metadata"]["annotations"][ANNOTATION]
            .as_str()
            .unwrap();
        let claims: Vec<Value> = serde_json::from_str(text).unwrap();
        claims
            .iter()
            .map(|c| {
                (
                    c["tier"].as_str().unwrap().to_owned(),
                    c["priority"].as_i64().unwrap(),
                )
            })
            .collect()
    }

    fn answer(&self, method: &Method, path: &str, body: &[u8]) -> Response<Full<bytes::Bytes>> {
        let mut state = self.0.lock().unwrap();
        let state = &mut *state;
        let verb = method.as_str().to_owned();
        if let Some(Fault::Status(code, reason)) = state.faults.first().cloned() {
            state.faults.remove(0);
            state.log.push(format!("{verb} {code}"));
            return status(code, reason, "injected");
        }
        let answer = match (method, path) {
            (&Method::GET, LEASE) => match &state.lease {
                Some(lease) => ok(StatusCode::OK, lease),
                None => status(
                    404,
                    "NotFound",
                    "leases \"tierd-priority-claims\" not found",
                ),
            },
            (&Method::POST, LEASES) => {
                if state.lease.is_some() {
                    status(
                        409,
                        "AlreadyExists",
                        "leases \"tierd-priority-claims\" already exists",
                    )
                } else {
                    let mut lease: Value = serde_json::from_slice(body).unwrap();
                    state.version += 1;
                    lease["metadata"]["resourceVersion"] = json!(state.version.to_string());
                    lease["metadata"]["uid"] = json!("u-1");
                    state.lease = Some(lease.clone());
                    ok(StatusCode::CREATED, &lease)
                }
            }
            (&Method::PUT, LEASE) => {
                if let (Some((annotation, times)), Some(lease)) =
                    (state.interloper.take(), state.lease.as_mut())
                {
                    if times > 1 {
                        state.interloper = Some((annotation.clone(), times - 1));
                    }
                    state.version += 1;
                    lease["metadata"]["annotations"][ANNOTATION] = json!(annotation);
                    lease["metadata"]["resourceVersion"] = json!(state.version.to_string());
                }
                let mut lease: Value = serde_json::from_slice(body).unwrap();
                match &state.lease {
                    None => status(
                        404,
                        "NotFound",
                        "leases \"tierd-priority-claims\" not found",
                    ),
                    Some(stored)
                        if stored["metadata"]["resourceVersion"]
                            != lease["metadata"]["resourceVersion"] =>
                    {
                        status(409, "Conflict", "the object has been modified")
                    }
                    Some(_) => {
                        state.version += 1;
                        lease["metadata"]["resourceVersion"] = json!(state.version.to_string());
                        state.lease = Some(lease.clone());
                        ok(StatusCode::OK, &lease)
                    }
                }
            }
            _ => status(404, "NotFound", "not served by the fake"),
        };
        state.log.push(match answer.status().as_u16() {
            200 | 201 => verb,
            code => format!("{verb} {code}"),
        });
        answer
    }
}

impl tower_service::Service<Request<kube::client::Body>> for FakeLease {
    type Response = Response<Full<bytes::Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let fake = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            let hang = {
                let mut state = fake.0.lock().unwrap();
                if matches!(state.faults.first(), Some(Fault::Hang)) {
                    state.faults.remove(0);
                    state.log.push(format!("{} hung", parts.method));
                    true
                } else {
                    false
                }
            };
            if hang {
                std::future::pending::<()>().await;
            }
            Ok(fake.answer(&parts.method, parts.uri.path(), &body))
        })
    }
}

/// A wall clock that follows tokio's (paused) clock.
fn clock() -> impl Fn() -> SystemTime + Send + Sync + 'static {
    let start = tokio::time::Instant::now();
    let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    move || base + start.elapsed()
}

fn replica(fake: &FakeLease, name: &str) -> LeaseClaims {
    LeaseClaims::with_clock(fake.client(), ClaimsConfig::new(NS, name), clock()).unwrap()
}

fn taken(result: Result<(), ClaimError>) -> String {
    match result {
        Err(ClaimError::Taken(denial)) => denial.0,
        other => panic!("not taken: {other:?}"),
    }
}

fn unavailable(result: Result<(), ClaimError>) -> tier_core::WriteError {
    match result {
        Err(ClaimError::Unavailable(error)) => error,
        other => panic!("not unavailable: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn the_first_claim_creates_the_lease_and_another_replica_is_denied() {
    let fake = FakeLease::default();
    let (a, b) = (replica(&fake, "tierd-a"), replica(&fake, "tierd-b"));
    a.claim("first", 10).await.unwrap();
    assert_eq!(fake.log(), ["GET 404", "POST"]);
    let lease = fake.stored().unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "tierd-a");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 10);
    assert!(lease["spec"]["renewTime"].is_string(), "{lease}");
    assert_eq!(fake.claims(), [("first".to_owned(), 10)]);

    tokio::time::advance(Duration::from_millis(120)).await;
    let denied = taken(b.claim("second", 10).await);
    assert_eq!(
        denied,
        "tier second priority 10 is claimed by a create of Tier first admitted 120 ms ago by a \
         tierd replica, not yet visible"
    );
    assert_eq!(fake.log(), ["GET"], "a denial writes nothing");
    // Another priority: B writes on the resourceVersion it read.
    b.claim("second", 11).await.unwrap();
    assert_eq!(fake.log(), ["PUT"]);
    assert_eq!(
        fake.claims(),
        [("first".to_owned(), 10), ("second".to_owned(), 11)]
    );
    assert_eq!(fake.stored().unwrap()["spec"]["holderIdentity"], "tierd-b");
}

#[tokio::test(start_paused = true)]
async fn a_stale_copy_gets_a_conflict_rereads_and_decides_on_what_won() {
    let fake = FakeLease::default();
    let (a, b) = (replica(&fake, "tierd-a"), replica(&fake, "tierd-b"));
    a.claim("warm", 1).await.unwrap();
    b.claim("warm", 1).await.unwrap();
    let _ = fake.log();
    // B writes a claim at 20; A's copy is stale. Its PUT conflicts, it re-reads, sees B's
    // claim and denies.
    b.claim("theirs", 20).await.unwrap();
    let denied = taken(a.claim("mine", 20).await);
    assert!(denied.contains("Tier theirs"), "{denied}");
    assert_eq!(fake.log(), ["PUT", "PUT 409", "GET"]);
    // The same race at a free priority: A re-reads and writes beside B's claim.
    let interloper = r#"[{"tier":"theirs","priority":21,"at":"2027-01-15T08:00:00Z"}]"#;
    fake.interlope(interloper);
    a.claim("mine", 22).await.unwrap();
    assert_eq!(fake.log(), ["PUT 409", "GET", "PUT"]);
    assert!(fake.claims().contains(&("mine".to_owned(), 22)));
}

#[tokio::test(start_paused = true)]
async fn of_concurrent_claims_at_one_priority_exactly_one_wins() {
    for trial in 0..20_i64 {
        let fake = FakeLease::default();
        let replicas: Vec<LeaseClaims> = (0..3)
            .map(|i| replica(&fake, &format!("tierd-{i}")))
            .collect();
        // Half the trials start from an existing Lease every replica has a copy of.
        if trial % 2 == 1 {
            for (i, r) in replicas.iter().enumerate() {
                r.claim(&format!("warm{i}"), 200 + i64::try_from(i).unwrap())
                    .await
                    .unwrap();
            }
        }
        let claims = replicas.iter().enumerate().map(|(i, r)| {
            let r = r.clone();
            tokio::spawn(async move { r.claim(&format!("t{i}"), 10).await })
        });
        let mut won = 0;
        for claim in claims {
            match claim.await.unwrap() {
                Ok(()) => won += 1,
                Err(ClaimError::Taken(_)) => {}
                Err(other) => panic!("trial {trial}: {other:?}"),
            }
        }
        assert_eq!(won, 1, "trial {trial}: {:?}", fake.log());
    }
}

#[tokio::test(start_paused = true)]
async fn a_fresh_claim_of_the_same_tier_writes_nothing_and_one_past_half_the_ttl_renews() {
    let fake = FakeLease::default();
    let a = replica(&fake, "tierd-a");
    a.claim("first", 10).await.unwrap();
    let _ = fake.log();
    tokio::time::advance(Duration::from_millis(4_999)).await;
    a.claim("first", 10).await.unwrap();
    assert!(fake.log().is_empty(), "a retried review costs no request");
    tokio::time::advance(Duration::from_millis(1)).await;
    a.claim("first", 10).await.unwrap();
    assert_eq!(fake.log(), ["PUT"]);
    // Lapsed claims go at the next write: the set holds what is live.
    tokio::time::advance(Duration::from_secs(10)).await;
    a.claim("second", 11).await.unwrap();
    assert_eq!(fake.claims(), [("second".to_owned(), 11)]);
}

#[tokio::test(start_paused = true)]
async fn failures_are_unavailable_with_their_class_and_the_deadline_bounds_a_hung_call() {
    let fake = FakeLease::default();
    let a = replica(&fake, "tierd-a");
    fake.fault(Fault::Status(500, "InternalError"));
    let error = unavailable(a.claim("x", 10).await);
    assert_eq!(error.class, ErrorClass::Transient);
    assert!(
        error
            .message
            .starts_with("read of the Lease kube-system/tierd-priority-claims failed"),
        "{error:?}"
    );
    fake.fault(Fault::Status(403, "Forbidden"));
    assert_eq!(
        unavailable(a.claim("x", 10).await).class,
        ErrorClass::Forbidden
    );
    // The Lease exists and the write fails: nothing is claimed, and the next claim re-reads.
    a.claim("x", 10).await.unwrap();
    tokio::time::advance(Duration::from_secs(6)).await;
    fake.fault(Fault::Status(503, "ServiceUnavailable"));
    let _ = fake.log();
    // A's copy is current: its renewal is a PUT, which fails.
    assert_eq!(
        unavailable(a.claim("x", 10).await).class,
        ErrorClass::Transient
    );
    assert_eq!(fake.log(), ["PUT 503"]);
    // A call that never answers: cut at the 2 s deadline.
    fake.fault(Fault::Hang);
    let started = tokio::time::Instant::now();
    let error = unavailable(a.claim("x", 10).await);
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert!(error.message.contains("within 2s"), "{error:?}");
    a.claim("x", 10).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_claim_gives_up_after_its_attempts_when_every_write_conflicts() {
    let fake = FakeLease::default();
    let a = replica(&fake, "tierd-a");
    a.claim("warm", 1).await.unwrap();
    let _ = fake.log();
    // Every PUT loses to "another replica" writing first.
    let other = r#"[{"tier":"other","priority":100,"at":"2027-01-15T08:00:00Z"}]"#;
    fake.interlope_times(other, 1000);
    let error = unavailable(a.claim("mine", 5).await);
    assert!(
        error.message.contains("changed under every one of"),
        "{error:?}"
    );
    let log = fake.log();
    assert_eq!(log.len(), MAX_ATTEMPTS, "{log:?}");
    assert_eq!(log[..3], ["PUT 409", "GET", "PUT 409"]);
}

#[tokio::test(start_paused = true)]
async fn an_annotation_that_is_not_tierds_is_read_as_no_claims_and_replaced() {
    let fake = FakeLease::default();
    let a = replica(&fake, "tierd-a");
    a.claim("warm", 1).await.unwrap();
    for junk in ["not json", &"x".repeat(200_000)] {
        fake.interlope(junk);
        // A's copy is stale (the junk was written after it): conflict, re-read, replace.
        a.claim("mine", 2).await.unwrap();
        assert_eq!(fake.claims(), [("mine".to_owned(), 2)]);
        tokio::time::advance(Duration::from_secs(10)).await;
    }
}

#[test]
fn the_configuration_is_checked() {
    let fake = FakeLease::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = runtime.enter();
    let bad = [
        ClaimsConfig {
            ttl: Duration::ZERO,
            ..ClaimsConfig::new(NS, "a")
        },
        ClaimsConfig {
            deadline: Duration::ZERO,
            ..ClaimsConfig::new(NS, "a")
        },
        ClaimsConfig {
            deadline: Duration::from_secs(10),
            ..ClaimsConfig::new(NS, "a")
        },
    ];
    for config in bad {
        assert!(
            LeaseClaims::new(fake.client(), config.clone()).is_err(),
            "{config:?}"
        );
    }
    assert!(LeaseClaims::new(fake.client(), ClaimsConfig::new(NS, "a")).is_ok());
}
