//! The `tier-sim` command line: which seeds, which strategies, what to print.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::check::{Invariant, secs};
use crate::report::{comparison_table, tierd_summary};
use crate::sabotage::Sabotage;
use crate::scenario::Scenario;
use crate::sim::{SeedReport, SimConfig, Strategy, run_scenario, run_seeds};

/// Deterministic simulation of tierd, and of Antrea's old and new Tier initializers, on virtual
/// time: seeded faults, lagging caches, concurrent initializers and adversaries; invariants
/// checked at every step. Exits with 1 when a tierd seed fails.
#[derive(Debug, Parser)]
#[command(name = "tier-sim", version)]
pub struct Cli {
    /// How many seeds to run.
    #[arg(long, default_value_t = 1000)]
    pub seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    pub start: u64,
    /// Run only this seed (instead of --seeds/--start).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print each run's scenario and timeline.
    #[arg(long)]
    pub verbose: bool,
    /// Which initializer to simulate; `all` also prints the comparison table.
    #[arg(long, value_enum, default_value_t = StrategyArg::Tierd)]
    pub strategy: StrategyArg,
    /// Threads to run seeds on (default: the available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Seconds the baselines get after faults stop.
    #[arg(long, default_value_t = 300)]
    pub limit: u64,
    /// Break tierd on purpose, to see the checks fail.
    #[arg(long, value_enum)]
    pub sabotage: Option<Sabotage>,
}

/// The `--strategy` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StrategyArg {
    /// tierd only.
    Tierd,
    /// Antrea before the fix only.
    AntreaOld,
    /// Antrea since the fix only.
    AntreaNew,
    /// All three on the same seeds, with the comparison table.
    All,
}

impl StrategyArg {
    /// The strategies it selects.
    pub fn strategies(self) -> Vec<Strategy> {
        match self {
            StrategyArg::Tierd => vec![Strategy::Tierd],
            StrategyArg::AntreaOld => vec![Strategy::AntreaOld],
            StrategyArg::AntreaNew => vec![Strategy::AntreaNew],
            StrategyArg::All => Strategy::ALL.to_vec(),
        }
    }
}

/// The command that replays one seed of `strategy` (broken by `sabotage`) with its timeline.
pub fn replay_command(seed: u64, strategy: Strategy, sabotage: Option<Sabotage>) -> String {
    let mut cmd = format!("cargo run -p tier-sim --release -- --seed {seed} --verbose");
    if strategy != Strategy::Tierd {
        let _ = write!(cmd, " --strategy {}", strategy.as_str());
    }
    if let Some(sabotage) = sabotage.and_then(|s| s.to_possible_value()) {
        let _ = write!(cmd, " --sabotage {}", sabotage.get_name());
    }
    cmd
}

/// One line about one run.
pub fn outcome_line(r: &SeedReport) -> String {
    let verdict = match (r.strategy, r.passed(), r.converged) {
        (Strategy::Tierd, true, _) => "passed",
        (Strategy::Tierd, false, _) => "FAILED",
        (_, _, true) => "converged",
        (_, _, false) => "not converged",
    };
    let mut line = format!("seed {} {}: {verdict}", r.seed, r.strategy.as_str());
    if let Some(after) = r.converged_after_quiet {
        let _ = write!(
            line,
            "; converged {} after faults stopped (bound {})",
            secs(after),
            secs(r.bound)
        );
    } else if let Some(at) = r.settled_at {
        let _ = write!(line, "; store exactly desired since {}", secs(at));
    }
    let _ = write!(line, "; {} write(s), {} failed", r.writes, r.failed_writes);
    if r.unfinished > 0 {
        let _ = write!(line, "; {} initializer(s) still retrying", r.unfinished);
    }
    if r.violation_count > 0 {
        let mut kinds: BTreeMap<Invariant, usize> = BTreeMap::new();
        for v in &r.violations {
            *kinds.entry(v.invariant).or_default() += 1;
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} x{n}")).collect();
        let _ = write!(
            line,
            "; {} violation(s): {}",
            r.violation_count,
            kinds.join(", ")
        );
    }
    line
}

/// Runs the command line; prints everything to stdout (a closed stdout is not an error).
pub fn run(cli: &Cli) -> ExitCode {
    let mut out = String::new();
    let code = render(cli, &mut out);
    let _ = std::io::stdout().write_all(out.as_bytes());
    code
}

/// Runs the command line, writing what it prints to `out`.
fn render(cli: &Cli, out: &mut String) -> ExitCode {
    let seeds: Vec<u64> = match cli.seed {
        Some(seed) => vec![seed],
        None => (cli.start..cli.start.saturating_add(cli.seeds)).collect(),
    };
    let strategies = cli.strategy.strategies();
    let config = SimConfig {
        limit: Duration::from_secs(cli.limit),
        verbose: cli.verbose,
        sabotage: cli.sabotage,
        ..SimConfig::default()
    };
    let jobs = cli
        .jobs
        .or_else(|| std::thread::available_parallelism().ok().map(usize::from))
        .unwrap_or(1);
    let reports = match run_seeds(&seeds, &strategies, &config, jobs) {
        Ok(reports) => reports,
        Err(e) => {
            let _ = writeln!(out, "error: {e}");
            return ExitCode::FAILURE;
        }
    };

    if cli.verbose {
        for r in &reports {
            if cli.seed.is_some() {
                for line in &r.trace {
                    let _ = writeln!(out, "{line}");
                }
            }
            let _ = writeln!(out, "{}", outcome_line(r));
            if cli.seed.is_none() {
                for v in &r.violations {
                    let _ = writeln!(out, "  {v}");
                }
            }
        }
        let _ = writeln!(out);
    }

    let failed: Vec<&SeedReport> = reports
        .iter()
        .filter(|r| r.strategy == Strategy::Tierd && !r.passed())
        .collect();
    for r in failed.iter().take(20) {
        let first = r
            .violations
            .first()
            .map_or_else(|| "not converged".to_owned(), ToString::to_string);
        let _ = writeln!(out, "seed {} FAILED: {first}", r.seed);
        let _ = writeln!(
            out,
            "  replay: {}",
            replay_command(r.seed, r.strategy, cli.sabotage)
        );
    }
    if failed.len() > 20 {
        let _ = writeln!(out, "... and {} more failed seed(s)", failed.len() - 20);
    }

    if strategies.contains(&Strategy::Tierd) {
        let _ = write!(out, "{}", tierd_summary(&reports));
    }
    if cli.seed.is_none() && strategies.iter().any(|s| *s != Strategy::Tierd) {
        let _ = writeln!(out);
        let _ = write!(out, "{}", comparison_table(&reports));
        let _ = write!(out, "{}", issue_6694(&strategies, &config));
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Every selected strategy on [`Scenario::issue_6694`], one line each.
fn issue_6694(strategies: &[Strategy], config: &SimConfig) -> String {
    let scenario = Scenario::issue_6694();
    let mut out = String::from("\nissue 6694 (all six Tiers exist, the cache syncs 2 s late):\n");
    for &strategy in strategies {
        match run_scenario(&scenario, &config.clone().with_strategy(strategy)) {
            Ok(r) => {
                let _ = writeln!(out, "  {}", outcome_line(&r));
            }
            Err(e) => {
                let _ = writeln!(out, "  {}: error: {e}", strategy.as_str());
            }
        }
    }
    out
}
