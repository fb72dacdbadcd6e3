//! The `tier-sim` command line: which seeds, which strategies, what to print.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::calico::{CalicoStrategy, calico_outcome_line, calico_table, run_calico_seeds};
use crate::check::{Invariant, secs};
use crate::report::{comparison_table, issue_15_summary, numbers_table, tierd_summary};
use crate::sabotage::Sabotage;
use crate::scenario::Scenario;
use crate::sim::{SeedReport, SimConfig, Strategy, run_scenario, run_seeds};
use crate::worlds::World;

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
    /// The families of worlds to draw seeds from, comma-separated (`issue-15` is every world of
    /// issue 15); each runs the same seeds and gets its own summary.
    #[arg(
        long,
        alias = "worlds",
        value_enum,
        value_delimiter = ',',
        default_value = "random"
    )]
    pub world: Vec<WorldArg>,
    /// Do not check the per-Tier liveness and write-bound invariants of issue 15 in the random
    /// worlds (they are always checked in the other worlds).
    #[arg(long)]
    pub no_issue_15_checks: bool,
    /// Print only the numbers docs/RELIABILITY.md quotes: writes and failed writes per seed of
    /// tierd and of Antrea's fixed initializer, on the seeds without an adversary and on all
    /// (random worlds; ignores --strategy and --world).
    #[arg(long)]
    pub numbers: bool,
    /// Whose Tiers: Antrea's (the default) or Calico's built-ins, with Calico's worlds and
    /// Calico's own initializer as the baseline (`--strategy calico`, or `all`); `--world`
    /// and `--numbers` are Antrea's.
    #[arg(long, value_enum, default_value_t = ControllerArg::Antrea)]
    pub controller: ControllerArg,
}

/// The `--controller` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ControllerArg {
    /// Antrea's six system Tiers.
    Antrea,
    /// Calico's three built-in Tiers.
    Calico,
}

/// The `--world` values: one family, or every family of issue 15.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WorldArg {
    /// The random worlds (the default).
    Random,
    /// Every world of issue 15.
    #[value(name = "issue-15")]
    Issue15,
    /// One Tier's writes always get 503.
    FailingTier,
    /// One Tier's calls hang until the call timeout.
    HangingTier,
    /// An editor changes a Tier every 100 ms; tierd's cache lags 200 ms.
    FastEditor,
    /// A prune controller's deletions reach the cache with tierd's creates.
    CoalescedDeleter,
    /// RBAC refuses updates, allows creates.
    UpdateForbidden,
    /// RBAC refuses every create.
    CreateForbidden,
    /// A fighter that slows down.
    SlowingFighter,
    /// A lag spike that recovers.
    LagSpike,
}

impl WorldArg {
    /// The worlds it selects.
    pub fn worlds(self) -> Vec<World> {
        match self {
            WorldArg::Random => vec![World::Random],
            WorldArg::Issue15 => World::ISSUE_15.to_vec(),
            WorldArg::FailingTier => vec![World::FailingTier],
            WorldArg::HangingTier => vec![World::HangingTier],
            WorldArg::FastEditor => vec![World::FastEditor],
            WorldArg::CoalescedDeleter => vec![World::CoalescedDeleter],
            WorldArg::UpdateForbidden => vec![World::UpdateForbidden],
            WorldArg::CreateForbidden => vec![World::CreateForbidden],
            WorldArg::SlowingFighter => vec![World::SlowingFighter],
            WorldArg::LagSpike => vec![World::LagSpike],
        }
    }
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
    /// Calico's own `EnsureInitialized` only (with `--controller calico`).
    Calico,
    /// Every strategy of the controller on the same seeds, with the comparison table.
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
            StrategyArg::Calico => Vec::new(),
        }
    }

    /// The Calico strategies it selects (none for Antrea's baselines).
    pub fn calico_strategies(self) -> Vec<CalicoStrategy> {
        match self {
            StrategyArg::Tierd => vec![CalicoStrategy::Tierd],
            StrategyArg::Calico => vec![CalicoStrategy::Calico],
            StrategyArg::All => vec![CalicoStrategy::Tierd, CalicoStrategy::Calico],
            StrategyArg::AntreaOld | StrategyArg::AntreaNew => Vec::new(),
        }
    }
}

/// The command that replays one seed of `strategy` in `world` (broken by `sabotage`, without
/// the issue-15 checks in the random worlds unless `issue_15_checks`) with its timeline.
pub fn replay_command(
    seed: u64,
    strategy: Strategy,
    sabotage: Option<Sabotage>,
    world: World,
    issue_15_checks: bool,
) -> String {
    let mut cmd = format!("cargo run -p tier-sim --release -- --seed {seed} --verbose");
    if world != World::Random {
        let _ = write!(cmd, " --world {}", world.as_str());
    } else if !issue_15_checks {
        cmd.push_str(" --no-issue-15-checks");
    }
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
    if cli.controller == ControllerArg::Calico {
        return render_calico(cli, out);
    }
    if cli.strategy == StrategyArg::Calico {
        let _ = writeln!(out, "error: --strategy calico needs --controller calico");
        return ExitCode::FAILURE;
    }
    if cli.numbers {
        return numbers(cli, out);
    }
    let mut worlds: Vec<World> = cli.world.iter().flat_map(|w| w.worlds()).collect();
    worlds.dedup();
    let mut code = ExitCode::SUCCESS;
    for (i, world) in worlds.iter().enumerate() {
        if worlds.len() > 1 {
            if i > 0 {
                let _ = writeln!(out);
            }
            let _ = writeln!(out, "== world {}", world.as_str());
        }
        if render_world(cli, *world, out) != ExitCode::SUCCESS {
            code = ExitCode::FAILURE;
        }
    }
    code
}

/// The seeds the command line selects.
fn seeds(cli: &Cli) -> Vec<u64> {
    match cli.seed {
        Some(seed) => vec![seed],
        None => (cli.start..cli.start.saturating_add(cli.seeds)).collect(),
    }
}

fn jobs(cli: &Cli) -> usize {
    cli.jobs
        .or_else(|| std::thread::available_parallelism().ok().map(usize::from))
        .unwrap_or(1)
}

/// `--numbers`: tierd and Antrea's fixed initializer on the random worlds, writes and failed
/// writes per seed, without an adversary and over all seeds.
fn numbers(cli: &Cli, out: &mut String) -> ExitCode {
    let config = SimConfig {
        limit: Duration::from_secs(cli.limit),
        ..SimConfig::default()
    };
    let strategies = [Strategy::Tierd, Strategy::AntreaNew];
    let reports = match run_seeds(&seeds(cli), &strategies, &config, jobs(cli)) {
        Ok(reports) => reports,
        Err(e) => {
            let _ = writeln!(out, "error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let _ = write!(out, "{}", numbers_table(&reports));
    let failed = reports
        .iter()
        .any(|r| r.strategy == Strategy::Tierd && !r.passed());
    if failed {
        let _ = writeln!(
            out,
            "some tierd seeds FAILED: run without --numbers to see which"
        );
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// One initializer's mark in the issue-15 numbers of a run.
fn issue_15_line(r: &SeedReport) -> String {
    let mut line = String::new();
    if let Some((tier, n)) = &r.peak_tier_writes {
        let _ = write!(line, "peak {n} writes of {tier} in 300 s");
    }
    if let Some((tier, wait)) = &r.longest_wait {
        let _ = write!(line, "; longest allowed wait {} ({tier})", secs(*wait));
    }
    if r.forbidden_creates > 0 {
        let _ = write!(
            line,
            "; {} creates while creates were refused",
            r.forbidden_creates
        );
    }
    line
}

/// Runs the command line's seeds in `world`.
fn render_world(cli: &Cli, world: World, out: &mut String) -> ExitCode {
    let seeds = seeds(cli);
    let strategies = cli.strategy.strategies();
    let config = SimConfig {
        limit: Duration::from_secs(cli.limit),
        verbose: cli.verbose,
        sabotage: cli.sabotage,
        world,
        issue_15_checks: !cli.no_issue_15_checks,
        ..SimConfig::default()
    };
    let reports = match run_seeds(&seeds, &strategies, &config, jobs(cli)) {
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
            if r.strategy == Strategy::Tierd {
                let _ = writeln!(out, "  {}", issue_15_line(r));
            }
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
            replay_command(
                r.seed,
                r.strategy,
                cli.sabotage,
                world,
                !cli.no_issue_15_checks
            )
        );
    }
    if failed.len() > 20 {
        let _ = writeln!(out, "... and {} more failed seed(s)", failed.len() - 20);
    }

    if strategies.contains(&Strategy::Tierd) {
        let _ = write!(out, "{}", tierd_summary(&reports));
    }
    if world != World::Random {
        let _ = write!(out, "{}", issue_15_summary(&reports));
    }
    if cli.seed.is_none()
        && world == World::Random
        && strategies.iter().any(|s| *s != Strategy::Tierd)
    {
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

/// `--controller calico`: the seeds in Calico's worlds, the selected strategies, the table.
fn render_calico(cli: &Cli, out: &mut String) -> ExitCode {
    let strategies = cli.strategy.calico_strategies();
    if strategies.is_empty() {
        let _ = writeln!(
            out,
            "error: with --controller calico, --strategy is tierd, calico or all"
        );
        return ExitCode::FAILURE;
    }
    let config = SimConfig {
        limit: Duration::from_secs(cli.limit),
        verbose: cli.verbose,
        ..SimConfig::default()
    };
    let reports = match run_calico_seeds(&seeds(cli), &strategies, &config, jobs(cli)) {
        Ok(reports) => reports,
        Err(e) => {
            let _ = writeln!(out, "error: {e}");
            return ExitCode::FAILURE;
        }
    };
    for r in &reports {
        if cli.verbose && cli.seed.is_some() {
            for line in &r.trace {
                let _ = writeln!(out, "{line}");
            }
        }
        if cli.verbose || (r.strategy == CalicoStrategy::Tierd && !r.passed()) {
            let _ = writeln!(out, "{}", calico_outcome_line(r));
        }
    }
    let _ = write!(out, "{}", calico_table(&reports));
    let failed = reports
        .iter()
        .any(|r| r.strategy == CalicoStrategy::Tierd && !r.passed());
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worlds_are_selected_by_name_and_issue_15_selects_them_all() {
        let cli = Cli::parse_from(["tier-sim", "--worlds", "failing-tier,issue-15"]);
        let worlds: Vec<World> = cli.world.iter().flat_map(|w| w.worlds()).collect();
        assert_eq!(worlds.first(), Some(&World::FailingTier));
        assert_eq!(&worlds[1..], &World::ISSUE_15);
        let default = Cli::parse_from(["tier-sim"]);
        assert_eq!(default.world, vec![WorldArg::Random]);
        assert!(!default.no_issue_15_checks && !default.numbers);
        for world in World::ISSUE_15 {
            let cli = Cli::parse_from(["tier-sim", "--world", world.as_str()]);
            assert_eq!(cli.world[0].worlds(), vec![world]);
        }
    }

    #[test]
    fn calico_strategies_need_the_calico_controller() {
        let cli = Cli::parse_from(["tier-sim", "--controller", "calico", "--strategy", "all"]);
        assert_eq!(cli.controller, ControllerArg::Calico);
        assert_eq!(
            cli.strategy.calico_strategies(),
            [CalicoStrategy::Tierd, CalicoStrategy::Calico]
        );
        let mut out = String::new();
        let cli = Cli::parse_from(["tier-sim", "--strategy", "calico", "--seeds", "1"]);
        assert_eq!(render(&cli, &mut out), ExitCode::FAILURE);
        assert!(out.contains("--controller calico"), "{out}");
        let mut out = String::new();
        let cli = Cli::parse_from([
            "tier-sim",
            "--controller",
            "calico",
            "--strategy",
            "all",
            "--seeds",
            "5",
            "--jobs",
            "1",
        ]);
        assert_eq!(render(&cli, &mut out), ExitCode::SUCCESS, "{out}");
        assert!(out.starts_with("world "), "{out}");
    }

    #[test]
    fn a_replay_command_names_the_world_or_the_checks() {
        assert_eq!(
            replay_command(7, Strategy::Tierd, None, World::FastEditor, false),
            "cargo run -p tier-sim --release -- --seed 7 --verbose --world fast-editor"
        );
        assert_eq!(
            replay_command(7, Strategy::Tierd, None, World::Random, false),
            "cargo run -p tier-sim --release -- --seed 7 --verbose --no-issue-15-checks"
        );
    }
}
