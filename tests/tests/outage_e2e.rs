//! Quiet, bounded outages on the real binary: `tierd run` with its API server refusing
//! connections for 20 s (a port nobody listens on, where the test API server starts later), or
//! answering 503 to every Tier list and watch for 20 s. Either way tierd asks at most about
//! once per watch every one to two seconds once its backoff has grown, logs at most a handful
//! of WARN/ERROR lines (the outage once per retry loop, in words), says when each loop
//! recovered, and converges within 3 s of the server answering.
//!
//! The 20 s are the outage the test imposes (the world), long enough for the backoff
//! to reach its 2 s cap and stay there for most of the outage; the two tests run in parallel.
//! The harness runs tierd with `RUST_LOG=info`, which brings back kube's own per-request lines
//! that the default filter turns off (`kube_client::client::builder`,
//! `kube_runtime::watcher`: see `tier-bin/src/logging.rs`); the count below leaves those out,
//! as an operator's default log does.
//!
//! `tierd plan` is also run repeatedly against a healthy server: a successful plan prints no
//! warning (it used to print "starting the Tier watch failed: buffer's worker closed
//! unexpectedly" when its watch outlived the client).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use serde_json::Value;
use tier_tests::{Cluster, PATIENCE, Tierd, USER};
use tier_testserver::{AdmissionMode, Fault, ServerConfig, Verb};

/// How long the API server is away.
const OUTAGE: Duration = Duration::from_secs(20);

/// How soon after the server answers tierd must have converged.
const CONVERGE_WITHIN: Duration = Duration::from_secs(3);

/// The most WARN/ERROR lines a 20 s outage may cost.
const LOUD_LINES: usize = 20;

/// kube's targets the default filter turns off (`tier-bin/src/logging.rs`, `QUIET`).
const QUIET: [&str; 2] = ["kube_client::client::builder", "kube_runtime::watcher"];

fn antrea_admission() -> ServerConfig {
    ServerConfig::default().admission(AdmissionMode::BuiltinAntrea {
        controller_user: USER.to_owned(),
    })
}

/// The WARN and ERROR lines of tierd's JSON log, as `target: message`, without [`QUIET`]'s.
fn loud(tierd: &Tierd) -> Vec<String> {
    tierd
        .logs()
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|json| matches!(json["level"].as_str(), Some("WARN" | "ERROR")))
        .filter(|json| {
            let target = json["target"].as_str().unwrap_or_default();
            !QUIET.iter().any(|quiet| target.starts_with(quiet))
        })
        .map(|json| {
            format!(
                "{}: {}",
                json["target"].as_str().unwrap_or_default(),
                json["fields"]["message"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// The messages of tierd's log containing `text`.
fn said(tierd: &Tierd, text: &str) -> Vec<String> {
    tierd
        .logs()
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|json| json["fields"]["message"].as_str().map(str::to_owned))
        .filter(|message| message.contains(text))
        .collect()
}

/// Nothing of a watch outlived the runtime at exit: no "buffer's worker closed" line.
async fn exited_quietly(tierd: &Tierd) {
    // Let the log reader catch up with what the process wrote before it exited.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let late: Vec<String> = tierd
        .logs()
        .into_iter()
        .filter(|line| line.contains("worker closed"))
        .collect();
    assert!(late.is_empty(), "{late:#?}");
}

/// Waits until the Tiers are stored and `/readyz` answers 200: how long that took.
async fn converged(tierd: &Tierd, cluster: &Cluster) -> Duration {
    let from = Instant::now();
    loop {
        if cluster.has_antrea_tiers() && tierd.get("/readyz").await.0 == 200 {
            return from.elapsed();
        }
        assert!(
            from.elapsed() < PATIENCE,
            "never converged: {:?} {:?}",
            tierd.get("/readyz?verbose").await,
            tierd.logs()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sleeps until `OUTAGE` after `from`, checking meanwhile that tierd stays up.
async fn ride_out(tierd: &mut Tierd, from: Instant) {
    while from.elapsed() < OUTAGE {
        assert_eq!(tierd.exited(), None, "tierd exited: {:?}", tierd.logs());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_seconds_of_refused_connections_cost_a_few_lines_and_converge_within_3_s() {
    let absent = Cluster::absent();
    // No --controller-user: the identity's retry loop runs too.
    let mut tierd = Tierd::run_on(&absent.kubeconfig.0, None, &[], None).await;
    let started = tierd.started;
    ride_out(&mut tierd, started).await;
    let loud_lines = loud(&tierd);
    let (_, readyz) = tierd.get("/readyz?verbose").await;
    assert!(readyz.contains("connection refused"), "{readyz}");
    assert!(
        !readyz.contains("Status {") && !readyz.contains("ApiError"),
        "{readyz}"
    );

    let cluster = absent.start(antrea_admission()).await;
    let took = converged(&tierd, &cluster).await;
    println!(
        "refused for {OUTAGE:?}: {} WARN/ERROR lines, converged {took:?} after the server \
         appeared\n{loud_lines:#?}",
        loud_lines.len()
    );
    assert!(took <= CONVERGE_WITHIN, "converged only after {took:?}");
    assert!(
        loud_lines.len() <= LOUD_LINES,
        "{} lines: {loud_lines:#?}",
        loud_lines.len()
    );
    assert!(
        loud_lines.iter().all(|l| !l.contains("Status {")),
        "{loud_lines:#?}"
    );
    // The Tier watch said it failed once, and that it recovered.
    let failing = said(&tierd, "Tier watch (tiers.crd.antrea.io) failing");
    assert_eq!(failing.len(), 1, "{failing:#?}");
    assert!(failing[0].contains("connection refused"), "{failing:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let recovered = said(&tierd, "Tier watch (tiers.crd.antrea.io) recovered after");
    assert_eq!(recovered.len(), 1, "{:#?}", tierd.logs());

    tierd.terminate().await;
    assert!(tierd.wait(Duration::from_secs(5)).await.unwrap().success());
    exited_quietly(&tierd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_seconds_of_503s_are_paced_quiet_and_converge_within_3_s() {
    let cluster = Cluster::start(antrea_admission()).await;
    let faults = [
        cluster
            .server
            .inject(Fault::unavailable(Verb::List).forever()),
        cluster
            .server
            .inject(Fault::unavailable(Verb::Watch).forever()),
    ];
    let mut tierd = Tierd::run(&cluster, None, &[]).await;
    let started = tierd.started;
    ride_out(&mut tierd, started).await;
    let lists = cluster.server.requests().count_code(Verb::List, None, 503);
    let loud_lines = loud(&tierd);
    let (_, readyz) = tierd.get("/readyz?verbose").await;
    assert!(
        readyz.contains("503 ServiceUnavailable: the server is currently unable"),
        "{readyz}"
    );
    assert!(
        !readyz.contains("Status {") && !readyz.contains("ApiError"),
        "{readyz}"
    );

    for fault in faults {
        cluster.server.remove_fault(fault);
    }
    let took = converged(&tierd, &cluster).await;
    println!(
        "503 for {OUTAGE:?}: {lists} Tier lists, {} WARN/ERROR lines, converged {took:?} after \
         the server answered\n{loud_lines:#?}",
        loud_lines.len()
    );
    // One watch: at most about one list every 1-2 s once grown (4 quicker ones first).
    assert!(lists <= 25, "{lists} Tier lists in {OUTAGE:?}");
    assert!(took <= CONVERGE_WITHIN, "converged only after {took:?}");
    assert!(
        loud_lines.len() <= LOUD_LINES,
        "{} lines: {loud_lines:#?}",
        loud_lines.len()
    );
    let failing = said(&tierd, "Tier watch (tiers.crd.antrea.io) failing");
    assert_eq!(failing.len(), 1, "{failing:#?}");
    assert!(
        failing[0].contains("503 ServiceUnavailable: the server is currently unable"),
        "{failing:?}"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let recovered = said(&tierd, "Tier watch (tiers.crd.antrea.io) recovered after");
    assert_eq!(recovered.len(), 1, "{:#?}", tierd.logs());

    tierd.terminate().await;
    assert!(tierd.wait(Duration::from_secs(5)).await.unwrap().success());
    exited_quietly(&tierd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_plan_prints_no_warning() {
    let cluster = Cluster::start(antrea_admission()).await;
    for (name, priority, description) in tier_tests::antrea() {
        cluster.seed(name, priority, Some(description));
    }
    for run in 0..40 {
        let plan = cluster.tierd(&["plan"]).await;
        assert_eq!(plan.code(), 0, "run {run}: {plan:?}");
        assert!(
            !plan.stderr.contains("WARN") && !plan.stderr.contains("ERROR"),
            "run {run}: {}",
            plan.stderr
        );
    }
}
