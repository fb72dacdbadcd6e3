//! Priority claims across webhook replicas (`Webhook::claims`, `ReservingWriter::claiming`),
//! with a fake port: one `ClaimSet` behind a lock, on an injected wall clock.
//!
//! Each "replica" is a webhook of its own (its own reservation table, its own cache that lags:
//! it never shows the creates the test admits), served on its own port; the two share only the
//! claims port, as replicas share only the API server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tier_core::admission::{AdmissionPolicy, ClaimSet};
use tier_core::{ClaimError, ErrorClass, FixedLister, PriorityClaims, TierSpec, TierWriter};
use tier_core::{DesiredSet, WriteError};
use tier_server::readiness::{CacheSynced, Readiness, TIER_CACHE_SYNCED};
use tier_server::server::Routes;
use tier_server::webhook::{PATH, ReservationTable, ReservingWriter, Webhook};

use crate::common::{Running, post, system_tiers};

const TTL: Duration = Duration::from_secs(10);

/// What the fake port does with a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Applies the rule to the shared set.
    Works,
    /// Fails as an API server answering 503 would.
    Fails,
}

/// The store every replica shares: one claim set, one wall clock (moved by hand).
struct SharedClaims {
    set: Mutex<ClaimSet>,
    now: Mutex<SystemTime>,
    mode: Mutex<Mode>,
    calls: AtomicUsize,
}

impl SharedClaims {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            set: Mutex::new(ClaimSet::new(TTL, []).unwrap()),
            now: Mutex::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)),
            mode: Mutex::new(Mode::Works),
            calls: AtomicUsize::new(0),
        })
    }

    fn advance(&self, by: Duration) {
        *self.now.lock().unwrap() += by;
    }

    fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl PriorityClaims for SharedClaims {
    async fn claim(&self, tier: &str, priority: i64) -> Result<(), ClaimError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        // A round trip: both replicas' reviews are in flight at once.
        tokio::task::yield_now().await;
        if *self.mode.lock().unwrap() == Mode::Fails {
            return Err(ClaimError::Unavailable(WriteError::transient(
                "update of the Lease kube-system/tierd-priority-claims failed: 503 etcd is slow",
            )));
        }
        let now = *self.now.lock().unwrap();
        self.set.lock().unwrap().take(tier, priority, now)?;
        Ok(())
    }
}

/// One replica: its own table and lagging cache (the system Tiers only), `claims` if given.
struct Replica {
    server: Running,
    webhook: Webhook,
    table: ReservationTable,
    clock: Arc<Mutex<Instant>>,
}

impl Replica {
    async fn start(claims: Option<Arc<SharedClaims>>) -> Self {
        let lister = Arc::new(FixedLister::new(system_tiers()));
        let readiness = Readiness::new();
        readiness.register(TIER_CACHE_SYNCED, CacheSynced::new(lister.clone()));
        let clock = Arc::new(Mutex::new(Instant::now()));
        let now = clock.clone();
        let table = ReservationTable::with_clock(TTL, move || *now.lock().unwrap()).unwrap();
        let policy = AdmissionPolicy::antrea("tierd").desire(&DesiredSet::antrea());
        let mut webhook = Webhook::new(lister, policy, &readiness).reservations(table.clone());
        if let Some(claims) = claims {
            webhook = webhook.claims(claims);
        }
        let server = Running::plain(
            Routes::new(readiness)
                .webhook(webhook.clone())
                .into_router(),
        )
        .await;
        Self {
            server,
            webhook,
            table,
            clock,
        }
    }

    fn advance(&self, by: Duration) {
        *self.clock.lock().unwrap() += by;
    }

    async fn send(&self, body: &Value) -> Value {
        post(self.server.addr, PATH, body.to_string()).await.json()["response"].clone()
    }
}

fn create(uid: &str, name: &str, priority: i64) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "crd.antrea.io", "version": "v1beta1", "kind": "Tier"},
            "resource": {"group": "crd.antrea.io", "version": "v1beta1", "resource": "tiers"},
            "name": name,
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {
                "apiVersion": "crd.antrea.io/v1beta1",
                "kind": "Tier",
                "metadata": {"name": name},
                "spec": {"priority": priority},
            },
        }
    })
}

fn allowed(response: &Value) -> bool {
    response["allowed"] == true
}

/// Two replicas, two creates at one priority per trial (a fresh priority each, so the
/// 20-priority limit is never what denies), sent `apart` from each other (`None`: at once).
/// Returns how many were admitted in each trial.
async fn two_replicas(claims: bool, apart: Option<Duration>) -> Vec<usize> {
    let shared = SharedClaims::new();
    let port = || claims.then(|| shared.clone());
    let (a, b) = (Replica::start(port()).await, Replica::start(port()).await);
    let mut admitted = Vec::new();
    for trial in 0..20_i64 {
        let priority = 10 + trial;
        let first = create(&format!("a{trial}"), &format!("a{trial}"), priority);
        let second = create(&format!("b{trial}"), &format!("b{trial}"), priority);
        let answers = match apart {
            None => {
                let (x, y) = tokio::join!(a.send(&first), b.send(&second));
                [x, y]
            }
            Some(gap) => {
                let x = a.send(&first).await;
                for clock in [&a, &b] {
                    clock.advance(gap);
                }
                shared.advance(gap);
                let y = b.send(&second).await;
                [x, y]
            }
        };
        admitted.push(answers.iter().filter(|r| allowed(r)).count());
        // The next trial starts after both tables' and the claims' TTL: nothing carries over.
        for clock in [&a, &b] {
            clock.advance(TTL);
        }
        shared.advance(TTL);
    }
    a.server.stop().await.unwrap();
    b.server.stop().await.unwrap();
    admitted
}

#[tokio::test]
async fn without_claims_two_replicas_admit_both_creates_at_one_priority() {
    // The race the claims close (Antrea issue 7309 across replicas): the harness shows it.
    assert_eq!(two_replicas(false, None).await, [2; 20]);
    assert_eq!(
        two_replicas(false, Some(Duration::from_millis(100))).await,
        [2; 20]
    );
}

#[tokio::test]
async fn with_claims_exactly_one_of_two_concurrent_creates_is_admitted_in_20_trials() {
    assert_eq!(two_replicas(true, None).await, [1; 20]);
}

#[tokio::test]
async fn with_claims_exactly_one_of_two_creates_100_ms_apart_is_admitted_in_20_trials() {
    assert_eq!(
        two_replicas(true, Some(Duration::from_millis(100))).await,
        [1; 20]
    );
}

#[tokio::test]
async fn another_replicas_claim_denies_with_its_holder_and_releases_the_local_reservation() {
    let shared = SharedClaims::new();
    let (a, b) = (
        Replica::start(Some(shared.clone())).await,
        Replica::start(Some(shared.clone())).await,
    );
    assert!(allowed(&a.send(&create("u1", "first", 10)).await));
    shared.advance(Duration::from_millis(120));
    let denied = b.send(&create("u2", "second", 10)).await;
    assert!(!allowed(&denied));
    assert_eq!(
        denied["status"]["message"],
        "tier second priority 10 is claimed by a create of Tier first admitted 120 ms ago by a \
         tierd replica, not yet visible"
    );
    // A rule denial (400 at the client), as the local table's.
    assert_eq!(denied["status"].get("code"), None);
    // B holds nothing for the refused create: only the claim decides.
    assert!(b.table.held().is_empty(), "{:?}", b.table.held());
    // A retry of the admitted create passes on either replica (its own claim).
    assert!(allowed(&b.send(&create("u3", "first", 10)).await));
    // After the TTL the priority is free for another Tier.
    shared.advance(TTL);
    b.advance(TTL);
    assert!(allowed(&b.send(&create("u4", "second", 10)).await));
    a.server.stop().await.unwrap();
    b.server.stop().await.unwrap();
}

#[tokio::test]
async fn a_claim_that_cannot_be_made_refuses_the_create_retryably() {
    let shared = SharedClaims::new();
    let a = Replica::start(Some(shared.clone())).await;
    shared.set_mode(Mode::Fails);
    let refused = a.send(&create("u1", "first", 10)).await;
    assert!(!allowed(&refused));
    assert_eq!(refused["status"]["code"], 503);
    assert_eq!(refused["status"]["reason"], "ServiceUnavailable");
    assert_eq!(refused["status"]["details"]["retryAfterSeconds"], 1);
    let message = refused["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "tier first priority 10 could not be claimed across tierd replicas, so whether \
             another replica admitted a Tier there is unknown; retry shortly"
        ),
        "{message}"
    );
    assert!(message.contains("503 etcd is slow"), "{message}");
    // Fail closed: the local table alone would have admitted it. And it left nothing held, so
    // another Tier at that priority is not blocked here once claims work again.
    assert!(a.table.held().is_empty(), "{:?}", a.table.held());
    shared.set_mode(Mode::Works);
    assert!(allowed(&a.send(&create("u2", "second", 10)).await));
    a.server.stop().await.unwrap();
}

#[tokio::test]
async fn only_admitted_non_dry_run_creates_claim() {
    let shared = SharedClaims::new();
    let a = Replica::start(Some(shared.clone())).await;
    // Denied by this replica's own rules (a reserved priority, an overlap): no claim.
    assert!(!allowed(&a.send(&create("u1", "x", 254)).await));
    assert!(!allowed(&a.send(&create("u2", "x", 253)).await));
    // A dry run, an UPDATE, a DELETE and another kind: no claim.
    let mut dry = create("u3", "x", 10);
    dry["request"]["dryRun"] = json!(true);
    assert!(allowed(&a.send(&dry).await));
    let mut update = create("u4", "baseline", 253);
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = update["request"]["object"].clone();
    assert!(allowed(&a.send(&update).await));
    let mut delete = create("u5", "mine", 10);
    delete["request"]["operation"] = json!("DELETE");
    delete["request"]["oldObject"] = delete["request"]["object"].take();
    let _ = a.send(&delete).await;
    let mut other = create("u6", "x", 11);
    other["request"]["kind"]["kind"] = json!("ClusterNetworkPolicy");
    assert!(allowed(&a.send(&other).await));
    assert_eq!(shared.calls(), 0);
    // An admitted create claims once.
    assert!(allowed(&a.send(&create("u7", "x", 12)).await));
    assert_eq!(shared.calls(), 1);
    // The webhook's direct API claims too.
    let review = a
        .webhook
        .review_json(create("u8", "y", 13).to_string().as_bytes())
        .await
        .unwrap();
    assert!(review.response.unwrap().allowed);
    assert_eq!(shared.calls(), 2);
    a.server.stop().await.unwrap();
}

/// A writer that records what it was asked to send (clones share the record).
#[derive(Clone, Default)]
struct Recording(Arc<Mutex<Vec<String>>>);

#[async_trait::async_trait]
impl TierWriter for Recording {
    async fn create(&self, tier: &TierSpec) -> Result<(), WriteError> {
        self.0.lock().unwrap().push(format!("create {}", tier.name));
        Ok(())
    }

    async fn update(&self, tier: &TierSpec, _rv: &str) -> Result<(), WriteError> {
        self.0.lock().unwrap().push(format!("update {}", tier.name));
        Ok(())
    }
}

#[tokio::test]
async fn tierds_own_writes_claim_before_they_are_sent() {
    let shared = SharedClaims::new();
    let b = Replica::start(Some(shared.clone())).await;
    let sent = Recording::default();
    // The writer of replica A, which shares only the claims with B.
    let table = ReservationTable::new(TTL).unwrap();
    let writer = ReservingWriter::new(sent.clone(), table).claiming(shared.clone());
    writer.create(&TierSpec::new("mine", 30, "")).await.unwrap();
    assert_eq!(*sent.0.lock().unwrap(), ["create mine"]);
    // B, whose cache does not show it yet, denies another Tier there.
    let denied = b.send(&create("u1", "squatter", 30)).await;
    assert!(!allowed(&denied), "{denied}");
    // A priority another replica admitted first: the write is refused as denied, unsent.
    assert!(allowed(&b.send(&create("u2", "theirs", 31)).await));
    let error = writer
        .update(&TierSpec::new("mine", 31, ""), "7")
        .await
        .unwrap_err();
    assert_eq!(error.class, ErrorClass::Denied);
    assert!(
        error.message.contains("claimed by a create of Tier theirs"),
        "{error}"
    );
    assert_eq!(sent.0.lock().unwrap().len(), 1);
    // A claim that cannot be made fails the write with the store's class, unsent.
    shared.set_mode(Mode::Fails);
    let error = writer
        .create(&TierSpec::new("other", 32, ""))
        .await
        .unwrap_err();
    assert_eq!(error.class, ErrorClass::Transient);
    assert_eq!(sent.0.lock().unwrap().len(), 1);
    b.server.stop().await.unwrap();
}
