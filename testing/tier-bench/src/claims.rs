//! 4d. What `--priority-claims` adds to a CREATE review: the webhook's `review_json` on a real
//! kube-apiserver and etcd (`tier-testcluster`, loopback, etcd without fsync), without claims
//! and with `LeaseClaims`, in the shapes a claim takes:
//!
//! - one replica claiming again and again: its copy of the Lease is current, one PUT;
//! - two replicas taking turns: each copy is stale, so PUT (409), GET, PUT;
//! - a retried create of a Tier whose claim is fresh: no request.
//!
//! Every review is a new Tier at a new priority, and the clocks of the reservation table and of
//! the claims move 10 s (one TTL) per review, so nothing lapses or fills up on the way: each
//! claim is a full one. Only on request (`--only claims`): it needs kube-apiserver and etcd
//! (built from `testing/control-plane` by Go on first use, or `TIER_TESTCLUSTER_BIN`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;
use tier_core::admission::AdmissionPolicy;
use tier_core::{DesiredSet, FixedLister, Snapshot, TierLister};
use tier_kube::claims::{ClaimsConfig, LeaseClaims};
use tier_server::readiness::{CheckState, Readiness, TIER_CACHE_SYNCED, from_fn};
use tier_server::webhook::{ReservationTable, Webhook};

use crate::quantile;

/// One clock for the reservation tables and the claims, moved by hand.
#[derive(Clone)]
struct Clocks {
    offset: Arc<Mutex<Duration>>,
    instant: Instant,
    wall: SystemTime,
}

impl Clocks {
    fn new() -> Self {
        Self {
            offset: Arc::new(Mutex::new(Duration::ZERO)),
            instant: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    fn advance(&self, by: Duration) {
        *self.offset.lock().unwrap() += by;
    }

    fn instant(&self) -> impl Fn() -> Instant + Send + Sync + 'static {
        let (offset, base) = (self.offset.clone(), self.instant);
        move || base + base.elapsed() + *offset.lock().unwrap()
    }

    fn wall(&self) -> impl Fn() -> SystemTime + Send + Sync + 'static {
        let (offset, base, started) = (self.offset.clone(), self.wall, self.instant);
        move || base + started.elapsed() + *offset.lock().unwrap()
    }
}

fn replica(client: Option<(&kube::Client, &str)>, clocks: &Clocks) -> Webhook {
    let lister: Arc<dyn TierLister> = Arc::new(FixedLister::new(Snapshot::synced(1, [])));
    let readiness = Readiness::new();
    readiness.register(TIER_CACHE_SYNCED, from_fn(|| CheckState::Ok));
    let policy = AdmissionPolicy::antrea("tierd").desire(&DesiredSet::antrea());
    let table = ReservationTable::with_clock(Duration::from_secs(10), clocks.instant()).unwrap();
    let webhook = Webhook::new(lister, policy, &readiness).reservations(table);
    match client {
        None => webhook,
        Some((client, name)) => {
            let claims = LeaseClaims::with_clock(
                client.clone(),
                ClaimsConfig::new("kube-system", name),
                clocks.wall(),
            )
            .unwrap();
            webhook.claims(Arc::new(claims))
        }
    }
}

fn create(n: usize, name: &str) -> Vec<u8> {
    // Priorities 1..=49, never a system Tier's or a reserved one.
    let priority = 1 + n % 49;
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("u{n}"),
            "kind": {"group": "crd.antrea.io", "version": "v1beta1", "kind": "Tier"},
            "name": name,
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {"metadata": {"name": name}, "spec": {"priority": priority}},
        }
    })
    .to_string()
    .into_bytes()
}

/// Reviews `n` creates through `replicas` in turn, each a new Tier (or the same one, `retry`),
/// and returns the µs each took, sorted; every one must be allowed.
async fn time(replicas: &[Webhook], clocks: &Clocks, n: usize, retry: bool) -> Vec<f64> {
    let mut micros = Vec::with_capacity(n);
    for i in 0..n {
        let name = if retry {
            "again".to_owned()
        } else {
            format!("t{i}")
        };
        let body = create(if retry { 0 } else { i }, &name);
        let webhook = &replicas[i % replicas.len()];
        let started = Instant::now();
        let review = webhook.review_json(&body).await.unwrap();
        micros.push(started.elapsed().as_secs_f64() * 1e6);
        let response = review.response.unwrap();
        assert!(response.allowed, "{}", response.result.message);
        if !retry {
            clocks.advance(Duration::from_secs(10));
        }
    }
    micros.sort_by(f64::total_cmp);
    micros
}

/// Prints section 4d.
pub async fn claims(requests: usize) {
    let cluster = match tier_testcluster::TestCluster::start().await {
        Ok(cluster) => cluster,
        Err(error) => {
            println!("4d. Priority claims: skipped, no control plane: {error}\n");
            return;
        }
    };
    let client = cluster.client();
    let n = requests.clamp(20, 2_000);
    let clocks = Clocks::new();
    let plain = [replica(None, &clocks)];
    let one = [replica(Some((&client, "tierd-a")), &clocks)];
    let two = [
        replica(Some((&client, "tierd-a")), &clocks),
        replica(Some((&client, "tierd-b")), &clocks),
    ];
    // Warm up: the Lease exists and each replica holds a copy.
    let _ = time(&two, &clocks, 4, false).await;
    let rows = [
        (
            "no claims (the replica's own table)",
            time(&plain, &clocks, n, false).await,
        ),
        (
            "claims, one replica (PUT)",
            time(&one, &clocks, n, false).await,
        ),
        (
            "claims, two replicas in turn (PUT 409, GET, PUT)",
            time(&two, &clocks, n, false).await,
        ),
        (
            "claims, a retried create (no request)",
            time(&one, &clocks, n, true).await,
        ),
    ];
    println!(
        "4d. CREATE review with and without priority claims: `Webhook::review_json` in process, \
         claims on kube-apiserver {} over loopback TLS (etcd without fsync), {n} reviews per row",
        cluster.binaries().version
    );
    println!("| CREATE review | p50 (µs) | p99 (µs) | max (µs) | added at p50 (µs) |");
    println!("|---|---|---|---|---|");
    let base = quantile(&rows[0].1, 0.5);
    for (name, micros) in &rows {
        let p50 = quantile(micros, 0.5);
        println!(
            "| {name} | {p50:.0} | {:.0} | {:.0} | {:.0} |",
            quantile(micros, 0.99),
            micros.last().copied().unwrap_or_default(),
            p50 - base
        );
    }
    println!();
}
