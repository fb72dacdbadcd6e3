//! Measurements on the in-memory backend, on virtual time: deterministic per seed.

use std::time::Duration;

use tier_core::{DesiredSet, TierSpec};
use tier_memory::faults::RandomFaults;
use tier_memory::{MemoryCluster, Verb};
use tokio::time::Instant;

use crate::{median, quantile};

/// The limit of one run, in virtual time.
const LIMIT: Duration = Duration::from_secs(3600);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// A cluster with three Tiers missing, one with a wrong priority, one with a wrong description.
fn drifted() -> MemoryCluster {
    let antrea = DesiredSet::antrea();
    let get = |n: &str| antrea.get(n).cloned().unwrap();
    let baseline = get("baseline");
    let mut application = get("application");
    application.priority = 240;
    let mut platform = get("platform");
    platform.description = "edited".into();
    MemoryCluster::builder()
        .with_tiers([baseline, application, platform])
        .build()
}

/// Whether the store holds every desired Tier with the right priority (and description).
fn converged(cluster: &MemoryCluster, descriptions: bool) -> bool {
    DesiredSet::antrea().tiers().iter().all(|t: &TierSpec| {
        cluster.get(&t.name).is_some_and(|o| {
            o.priority == t.priority && (!descriptions || o.description == t.description)
        })
    })
}

struct Run {
    converged: bool,
    fields_right: bool,
    writes: usize,
    seconds: f64,
}

fn run(strategy: &'static str, seed: u64) -> Run {
    runtime().block_on(async {
        let cluster = drifted();
        cluster.faults().random(
            RandomFaults::new(seed)
                .failing(0.3)
                .latency(Duration::from_millis(20)),
        );
        let start = Instant::now();
        let work = crate::strategy::run(strategy, cluster.lister(), cluster.clone(), seed);
        let done = tokio::time::timeout(LIMIT, work).await.is_ok();
        let calls = cluster.calls();
        Run {
            converged: done && converged(&cluster, false),
            fields_right: converged(&cluster, true),
            writes: calls.count(Verb::Create) + calls.count(Verb::Update),
            seconds: start.elapsed().as_secs_f64(),
        }
    })
}

/// Table 2b: writes and time under 30 % transient faults.
pub fn writes_under_faults(seeds: u64) {
    println!(
        "2b. Under 30 % transient faults and up to 20 ms latency per call ({seeds} seeds, in-memory, virtual time; 3 missing, 1 wrong priority, 1 wrong description)\n"
    );
    println!(
        "| strategy | converged | every field right | mean writes | median virtual s | p99 virtual s |"
    );
    println!("|---|---|---|---|---|---|");
    for strategy in [crate::strategy::TIERD, crate::strategy::ANTREA_NEW] {
        let runs: Vec<Run> = (0..seeds).map(|seed| run(strategy, seed)).collect();
        let n = runs.len().max(1) as f64;
        let converged = runs.iter().filter(|r| r.converged).count();
        let right = runs.iter().filter(|r| r.fields_right).count();
        let writes = runs.iter().map(|r| r.writes as f64).sum::<f64>() / n;
        let mut secs: Vec<f64> = runs.iter().map(|r| r.seconds).collect();
        let mid = median(&mut secs);
        println!(
            "| {strategy} | {converged}/{seeds} | {right}/{seeds} | {writes:.2} | {mid:.2} | {:.2} |",
            quantile(&secs, 0.99)
        );
    }
    println!();
}

/// Seconds from the squatter's removal to networkops converged, and to all six; and the
/// creates of networkops the server denied.
fn unblock(strategy: &'static str, seed: u64) -> ((f64, f64), usize) {
    runtime().block_on(async {
        let cluster = MemoryCluster::builder()
            .with_tier(TierSpec::new("team-a", 150, ""))
            .build();
        let (lister, writer) = (cluster.lister(), cluster.clone());
        let task = tokio::spawn(crate::strategy::run(strategy, lister, writer, seed));
        // The squatter goes away at a seed-dependent moment between 20 s and 40 s.
        tokio::time::sleep(Duration::from_millis(20_000 + (seed * 7919) % 20_000)).await;
        let _ = cluster.delete("team-a");
        let removed = Instant::now();
        let mut networkops = None;
        while !converged(&cluster, false) {
            if networkops.is_none() && cluster.get("networkops").is_some() {
                networkops = Some(removed.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            if removed.elapsed() > LIMIT {
                break;
            }
        }
        let all = removed.elapsed();
        task.abort();
        let denied = cluster.calls().failed_for(Verb::Create, "networkops");
        (
            (networkops.unwrap_or(all).as_secs_f64(), all.as_secs_f64()),
            denied,
        )
    })
}

/// Table 3: from a blocker's removal to convergence.
pub fn unblocking(seeds: u64) {
    println!(
        "3. From a squatter's removal to convergence ({seeds} seeds; squatter at networkops' priority removed 20-40 s after start; virtual time, 1 ms resolution)\n"
    );
    println!(
        "| strategy | networkops: median s | networkops: max s | all six: median s | all six: max s | denied creates (mean) |"
    );
    println!("|---|---|---|---|---|---|");
    for strategy in [crate::strategy::TIERD, crate::strategy::ANTREA_NEW] {
        let (times, denied): (Vec<(f64, f64)>, Vec<usize>) =
            (0..seeds).map(|seed| unblock(strategy, seed)).unzip();
        let (mut nets, mut alls): (Vec<f64>, Vec<f64>) = times.into_iter().unzip();
        let (nm, am) = (median(&mut nets), median(&mut alls));
        let denied = denied.iter().sum::<usize>() as f64 / seeds.max(1) as f64;
        println!(
            "| {strategy} | {nm:.3} | {:.3} | {am:.3} | {:.3} | {denied:.2} |",
            quantile(&nets, 1.0),
            quantile(&alls, 1.0)
        );
    }
    println!();
}
