//! `tier-bench`: tierd's benchmarks, printed as tables (`just bench`). Numbers, not assertions.
//!
//! 1. Start-up: synced and converged times of tierd and Antrea's sequential strategy through the
//!    real kube adapter against the test API server, with 0 ms and 20 ms per call; the real
//!    `tierd` binary's start-to-ready and start-to-converged.
//! 2. API requests per convergence: no faults (writes = drifted Tiers, no GET), and the mean
//!    writes under 30 % transient faults (in-memory backend, virtual time, many seeds).
//! 3. From a blocker's removal to convergence (virtual time).
//! 4. Webhook admission latency (p50, p99) and throughput over loopback TLS, with empty policy
//!    caches and with 10,000 policies in them.
//!    4b. Throughput of the webhook beside a static TLS responder on the same stack (wrk when
//!    installed, else an in-process client).
//!    4d. A CREATE review with and without priority claims on a real kube-apiserver
//!    (`--only claims`).
//! 5. Peak RSS of `tierd run`, without and with 10,000 policies in the cluster.
//! 6. Hostile clients: probe and admission latency, and peak RSS, while 1,000 slowloris
//!    connections and 300 stalled handshakes are held on the webhook port.
//! 7. The attacks of issue 17, one fresh `tierd run` each: peak RSS beside the Deployment's
//!    128 MiB limit, and log bytes written (part of `--only hostile`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod attacks;
mod claims;
mod hostile;
mod memory;
mod open_loop;
mod startup;
mod strategy;
mod throughput;
mod webhook;

use clap::Parser;

/// Command line of `tier-bench`.
#[derive(Debug, Parser)]
#[command(about = "tierd's benchmarks; prints tables")]
struct Cli {
    /// Repetitions of each start-up measurement (the median is shown).
    #[arg(long, default_value_t = 7)]
    runs: usize,
    /// Seeds of the in-memory measurements.
    #[arg(long, default_value_t = 500)]
    seeds: u64,
    /// Webhook requests to send.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Requests of each kind timed during the hostile-clients attack.
    #[arg(long, default_value_t = 200)]
    hostile_requests: usize,
    /// Seconds per round of the throughput section when wrk is the load client.
    #[arg(long, default_value_t = 2)]
    throughput_seconds: u64,
    /// Rounds of the throughput section (each measures every server once, in rotated order).
    #[arg(long, default_value_t = 7)]
    throughput_rounds: usize,
    /// Only these sections (startup, requests, unblock, webhook, throughput, latency, rss,
    /// hostile);
    /// default all. `handler` (never part of all) times the webhook's handler alone, for a
    /// profiler; `claims` (never part of all: it starts kube-apiserver) times CREATE reviews
    /// with priority claims.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Rates (reviews/s) of the latency section's fixed-rate client.
    #[arg(long, value_delimiter = ',', default_value = "10000,20000,30000")]
    latency_rates: Vec<u32>,
    /// Internal: be the latency section's fixed-rate client against this address, print one
    /// line and exit.
    #[arg(long, hide = true)]
    open_loop: Option<std::net::SocketAddr>,
    /// Internal: the client's rate, reviews/s.
    #[arg(long, hide = true, default_value_t = 10_000)]
    open_loop_rate: u32,
    /// Internal: the client's duration, s.
    #[arg(long, hide = true, default_value_t = 2)]
    open_loop_seconds: u64,
    /// Internal: the review the client sends.
    #[arg(long, hide = true)]
    open_loop_body: Option<std::path::PathBuf>,
    /// Internal: the CA the client trusts.
    #[arg(long, hide = true)]
    open_loop_ca: Option<std::path::PathBuf>,
}

fn main() {
    let cli = Cli::parse();
    if let (Some(addr), Some(body), Some(ca)) =
        (cli.open_loop, &cli.open_loop_body, &cli.open_loop_ca)
    {
        open_loop::client(addr, cli.open_loop_rate, cli.open_loop_seconds, body, ca);
        return;
    }
    let want = |s: &str| cli.only.is_empty() || cli.only.iter().any(|o| o == s);
    println!(
        "tier-bench on {} core(s)\n",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    if want("startup") {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(startup::adapters(cli.runs));
        rt.block_on(startup::binary(cli.runs));
        rt.block_on(startup::requests());
    }
    if want("requests") {
        memory::writes_under_faults(cli.seeds);
    }
    if want("unblock") {
        memory::unblocking(cli.seeds.min(100));
    }
    if want("webhook") {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(webhook::latency(cli.requests));
    }
    if want("throughput") {
        let rt = tokio::runtime::Runtime::new().unwrap();
        // A debug build is CI's smoke run, not a measurement.
        let (rounds, seconds) = if cfg!(debug_assertions) {
            (1, 1)
        } else {
            (cli.throughput_rounds, cli.throughput_seconds)
        };
        rt.block_on(throughput::throughput(cli.requests, seconds, rounds));
    }
    if want("latency") {
        let rt = tokio::runtime::Runtime::new().unwrap();
        // A debug build is CI's smoke run: one short round at a low rate.
        let (rates, seconds, rounds) = if cfg!(debug_assertions) {
            (vec![500], 1, 1)
        } else {
            (cli.latency_rates.clone(), 3, 5)
        };
        rt.block_on(open_loop::latency(&rates, seconds, rounds));
    }
    if want("handler") {
        // Only on request: a loop of the handler alone, to run under `valgrind --tool=callgrind`.
        if !cli.only.is_empty() {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async { throughput::handler(cli.requests) });
        }
    }
    if cli.only.iter().any(|o| o == "claims") {
        // Only on request: it starts kube-apiserver and etcd.
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(claims::claims(cli.requests));
    }
    if want("rss") {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(startup::peak_rss());
    }
    if want("hostile") {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(hostile::hostile(cli.hostile_requests));
        rt.block_on(attacks::attacks());
    }
}

/// The median of `values` (sorted in place); zero when empty.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or_default()
}

/// The `q` quantile (0..=1) of sorted `values`.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}
