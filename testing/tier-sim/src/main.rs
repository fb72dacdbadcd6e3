//! `tier-sim`: runs seeds of the deterministic simulation. See `tier-sim --help`.

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // Logs only on request (`RUST_LOG=tier_core=debug`): thousands of seeds log a lot.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::from_default_env())
            .without_time()
            .init();
    }
    tier_sim::cli::run(&tier_sim::cli::Cli::parse())
}
