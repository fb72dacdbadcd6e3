//! `tierd`: keeps a cluster's system Tiers present and correct. See `tierd --help`.
//!
//! The binary only: the command line and its plumbing; the assembly lives in the `tierd`
//! library crate (`tierd::Tierd::builder`), the `--tiers` format in `tierd::tiers_file`, the
//! CRD in `tier_kube::crd`. `cli` (the command line and exit codes), `commands` (`crd`, `plan`,
//! `ensure`), `daemon` (`run`: flags → builder → serve), `plan` (the read-only plan as a table,
//! JSON or YAML), `demo` (on the in-memory backend), `signals` (SIGTERM/SIGINT), `logging` (the
//! tracing subscriber). Its unit tests check the shipped manifests in `deploy/` against the
//! command line (`tests/`).

mod cli;
mod commands;
mod controller;
mod daemon;
mod demo;
mod logging;
mod plan;
mod signals;
#[cfg(test)]
mod tests;

use std::process::ExitCode;

use clap::Parser;

use tier_core::Antrea;
use tier_core::calico::Calico;

use crate::cli::{Cli, Command, ControllerKind, exit};

/// `$command::<C>($args)` for the controller `$kind` names: the one place the `--controller`
/// flag selects an implementation of [`controller::ControllerMode`].
macro_rules! for_controller {
    ($kind:expr, $($command:ident)::+, $($args:expr),*) => {
        match $kind {
            ControllerKind::Antrea => $($command)::+::<Antrea>($($args),*).await,
            ControllerKind::Calico => $($command)::+::<Calico>($($args),*).await,
        }
    };
}

/// Parses the command line, runs the command and returns its exit code.
fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(cli.worker_threads))
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tierd: cannot start the async runtime: {e}");
            return ExitCode::from(exit::ERROR);
        }
    };
    let code = runtime.block_on(run(cli));
    ExitCode::from(code)
}

/// Prints a failed command's error and returns its exit code.
fn report(result: Result<u8, commands::CommandError>) -> u8 {
    result.unwrap_or_else(|error| {
        eprintln!("tierd: {error}");
        error.exit_code()
    })
}

async fn run(cli: Cli) -> u8 {
    match cli.command {
        Command::Demo(args) => {
            logging::init(cli.log_format, "error");
            let narrator = demo::Narrator::new(Box::new(std::io::stdout()));
            if for_controller!(args.controller, demo::converges, args.seed, &narrator) {
                exit::OK
            } else {
                exit::ERROR
            }
        }
        Command::Crd => report(commands::crd().map(|yaml| {
            print!("{yaml}");
            exit::OK
        })),
        Command::Plan(args) => {
            logging::init(cli.log_format, "warn");
            // Like `kubectl diff`: every error, invalid input included, is PLAN_ERROR, so that
            // it never shares a code with "changes pending".
            for_controller!(args.cluster.controller, commands::plan, &args).unwrap_or_else(
                |error| {
                    eprintln!("tierd: {error}");
                    exit::PLAN_ERROR
                },
            )
        }
        Command::Ensure(args) => {
            logging::init(cli.log_format, "info");
            report(
                for_controller!(args.cluster.controller, commands::ensure, &args)
                    .map(|()| exit::OK),
            )
        }
        Command::Run(args) => {
            logging::init(cli.log_format, "info");
            report(for_controller!(args.cluster.controller, daemon::run, &args).map(|()| exit::OK))
        }
    }
}
