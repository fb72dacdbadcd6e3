//! Summaries of many runs: per strategy, and the comparison table of strategies on the same
//! seeds.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use crate::check::Invariant;
use crate::sim::{SeedReport, Strategy};

/// Count, mean and maximum of a series.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    /// How many values.
    pub count: usize,
    /// Their sum.
    pub sum: f64,
    /// The largest (0 when empty).
    pub max: f64,
}

impl Stats {
    /// Adds a value.
    pub fn add(&mut self, value: f64) {
        self.count += 1;
        self.sum += value;
        self.max = self.max.max(value);
    }

    /// The mean, if any value was added.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    /// `mean/max` with `digits` decimals, or `-` when empty.
    pub fn show(&self, digits: usize) -> String {
        match self.mean() {
            Some(mean) => format!("{mean:.digits$}/{:.digits$}", self.max),
            None => "-".to_owned(),
        }
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// What the runs of one strategy showed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Runs summarized.
    pub seeds: usize,
    /// Runs without violation that converged.
    pub passed: usize,
    /// Runs that converged (see [`SeedReport::converged`]).
    pub converged: usize,
    /// Runs whose every desired Tier had its desired priority at the end.
    pub priorities_ok: usize,
    /// Runs where some initializer was still retrying at the end (baselines only).
    pub stuck: usize,
    /// Runs with at least one violation, per invariant.
    pub violations: BTreeMap<Invariant, usize>,
    /// Write calls per run.
    pub writes: Stats,
    /// Failed write calls per run.
    pub failed: Stats,
    /// Write calls denied by admission per run.
    pub denied: Stats,
    /// Denied creates the writer's own cache had predicted, per run.
    pub doomed: Stats,
    /// Desired Tiers not as desired at the start, per run (the least writes without drift).
    pub start_drift: Stats,
    /// Seconds from the start until the store was exactly desired for good (converged runs).
    pub settled_at: Stats,
    /// Seconds after faults stopped until everything converged (tierd).
    pub after_quiet: Stats,
    /// tierd's convergence bound, in seconds.
    pub bound: Stats,
}

impl Summary {
    /// Summarizes `reports`.
    pub fn of<'a>(reports: impl IntoIterator<Item = &'a SeedReport>) -> Self {
        let mut s = Summary::default();
        for r in reports {
            s.seeds += 1;
            s.passed += usize::from(r.passed());
            s.converged += usize::from(r.converged);
            s.priorities_ok += usize::from(r.priorities_settled_at.is_some());
            s.stuck += usize::from(r.unfinished > 0);
            let kinds: BTreeSet<Invariant> = r.violations.iter().map(|v| v.invariant).collect();
            for kind in kinds {
                *s.violations.entry(kind).or_default() += 1;
            }
            s.writes.add(r.writes as f64);
            s.failed.add(r.failed_writes as f64);
            s.denied.add(r.denied_writes as f64);
            s.doomed.add(r.doomed_writes as f64);
            s.start_drift.add(r.start_drift as f64);
            if r.converged
                && let Some(at) = r.settled_at
            {
                s.settled_at.add(secs(at));
            }
            if let Some(after) = r.converged_after_quiet {
                s.after_quiet.add(secs(after));
            }
            s.bound.add(secs(r.bound));
        }
        s
    }

    /// The violations as `kind:runs, ...`, or `none`.
    pub fn violations_line(&self) -> String {
        if self.violations.is_empty() {
            return "none".to_owned();
        }
        self.violations
            .iter()
            .map(|(kind, n)| format!("{kind}:{n}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The summary of tierd's runs, as printed after a run of many seeds.
pub fn tierd_summary(reports: &[SeedReport]) -> String {
    let mine: Vec<&SeedReport> = reports
        .iter()
        .filter(|r| r.strategy == Strategy::Tierd)
        .collect();
    let s = Summary::of(mine.iter().copied());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "tierd: {} seed(s), {} passed, {} failed",
        s.seeds,
        s.passed,
        s.seeds - s.passed
    );
    let _ = writeln!(
        out,
        "  converged after faults stopped (s, mean/max): {}   bound (s, mean/max): {}",
        s.after_quiet.show(2),
        s.bound.show(2)
    );
    let _ = writeln!(
        out,
        "  writes per seed (mean/max): {}   settled from start (s, mean/max): {}",
        s.writes.show(1),
        s.settled_at.show(1)
    );
    let _ = writeln!(
        out,
        "  failed writes per seed (mean/max): {}   denied: {}   doomed: {}",
        s.failed.show(2),
        s.denied.show(2),
        s.doomed.show(2)
    );
    let tightest = mine
        .iter()
        .filter_map(|r| Some((r, r.converged_after_quiet?)))
        .max_by(|(a, at), (b, bt)| {
            let slack = |r: &SeedReport, d: &Duration| r.bound.saturating_sub(*d);
            slack(b, bt).cmp(&slack(a, at)).then(b.seed.cmp(&a.seed))
        });
    if let Some((r, after)) = tightest {
        let _ = writeln!(
            out,
            "  closest to its bound: seed {} converged {:.2}s after faults stopped, bound {:.2}s",
            r.seed,
            secs(after),
            secs(r.bound)
        );
    }
    let _ = writeln!(out, "  violations (seeds): {}", s.violations_line());
    let spurious: Vec<u64> = mine
        .iter()
        .filter(|r| !r.adversary && r.corrections > 0)
        .map(|r| r.seed)
        .collect();
    if let Some(first) = spurious.first() {
        let _ = writeln!(
            out,
            "  finding: corrections reported without any adversary on {} seed(s), first: seed {first}",
            spurious.len()
        );
    }
    out
}

fn mean(stats: &Stats) -> String {
    stats
        .mean()
        .map_or_else(|| "-".to_owned(), |m| format!("{m:.2}"))
}

/// The comparison table of every strategy present in `reports`, over all seeds and over the
/// seeds resembling issue 6694, with and without an adversary.
pub fn comparison_table(reports: &[SeedReport]) -> String {
    type Filter = fn(&SeedReport) -> bool;
    let subsets: [(&str, Filter); 4] = [
        ("all seeds", |_| true),
        ("seeds resembling issue 6694", |r| r.issue_6694),
        ("seeds without adversary", |r| !r.adversary),
        ("seeds with adversary", |r| r.adversary),
    ];
    let strategies: BTreeSet<Strategy> = reports.iter().map(|r| r.strategy).collect();
    let tierd_settle: BTreeMap<u64, Duration> = reports
        .iter()
        .filter(|r| r.strategy == Strategy::Tierd && r.converged)
        .filter_map(|r| r.settled_at.map(|at| (r.seed, at)))
        .collect();
    let mut out = String::new();
    for (title, filter) in subsets {
        let _ = writeln!(out, "{title}:");
        let _ = writeln!(
            out,
            "  {:<11} {:>6} {:>10} {:>8} {:>6} {:>13} {:>8} {:>8} {:>8} {:>13} {:>12}  safety violations (seeds)",
            "strategy",
            "seeds",
            "converged",
            "prio ok",
            "stuck",
            "writes m/max",
            "failed m",
            "denied m",
            "doomed m",
            "settle s m/mx",
            "vs tierd s"
        );
        let drift = Summary::of(
            reports
                .iter()
                .filter(|r| r.strategy == Strategy::Tierd && filter(r)),
        );
        for &strategy in &strategies {
            let mine: Vec<&SeedReport> = reports
                .iter()
                .filter(|r| r.strategy == strategy && filter(r))
                .collect();
            let s = Summary::of(mine.iter().copied());
            let mut delta = Stats::default();
            for r in mine.iter().filter(|r| r.converged) {
                if let (Some(at), Some(tierd)) = (r.settled_at, tierd_settle.get(&r.seed)) {
                    delta.add(secs(at) - secs(*tierd));
                }
            }
            let delta = delta
                .mean()
                .map_or_else(|| "-".to_owned(), |d| format!("{d:+.1}"));
            let mut safety = s.violations.clone();
            safety.remove(&Invariant::NoConvergence);
            safety.remove(&Invariant::NotQuiescent);
            let safety = Summary {
                violations: safety,
                ..Summary::default()
            }
            .violations_line();
            let _ = writeln!(
                out,
                "  {:<11} {:>6} {:>10} {:>8} {:>6} {:>13} {:>8} {:>8} {:>8} {:>13} {:>12}  {}",
                strategy.as_str(),
                s.seeds,
                s.converged,
                s.priorities_ok,
                s.stuck,
                s.writes.show(1),
                mean(&s.failed),
                mean(&s.denied),
                mean(&s.doomed),
                s.settled_at.show(1),
                delta,
                safety
            );
        }
        if let Some(least) = drift.start_drift.mean() {
            let _ = writeln!(
                out,
                "  least writes a perfect initializer needs for the starting drift: {least:.1} \
                 per seed (more with an adversary)"
            );
        }
    }
    out.push_str(
        "converged: tierd every initializer reported convergence and the store is exactly \
         desired; baselines the store is exactly desired at the end. prio ok: every desired \
         priority right at the end. stuck: an initializer still retrying at the end. failed, \
         denied, doomed: failed writes, those denied by admission, and those denied although \
         the writer's own cache showed why, per seed. settle: \
         seconds from the start until the store was exactly desired for good. vs tierd: mean \
         difference of settle on the seeds both converged.\n",
    );
    out
}

/// The issue-15 numbers of tierd's runs of one world: which seeds fail which invariant, the
/// peak writes of one Tier in 300 s, the longest allowed wait, creates while creates were
/// refused.
pub fn issue_15_summary(reports: &[SeedReport]) -> String {
    let mine: Vec<&SeedReport> = reports
        .iter()
        .filter(|r| r.strategy == Strategy::Tierd)
        .collect();
    let mut peak = Stats::default();
    let mut wait = Stats::default();
    let mut refused = Stats::default();
    let mut failing: BTreeMap<Invariant, Vec<u64>> = BTreeMap::new();
    for r in &mine {
        if let Some((_, n)) = &r.peak_tier_writes {
            peak.add(*n as f64);
        }
        if let Some((_, w)) = &r.longest_wait {
            wait.add(secs(*w));
        }
        refused.add(r.forbidden_creates as f64);
        let kinds: BTreeSet<Invariant> = r.violations.iter().map(|v| v.invariant).collect();
        for kind in kinds {
            failing.entry(kind).or_default().push(r.seed);
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  issue 15: most writes of one Tier in 300 s (mean/max): {}   longest allowed wait (s, \
         mean/max): {}   creates while refused (mean/max): {}",
        peak.show(1),
        wait.show(1),
        refused.show(1)
    );
    for (kind, seeds) in &failing {
        let shown: Vec<String> = seeds.iter().take(12).map(u64::to_string).collect();
        let more = if seeds.len() > 12 { " ..." } else { "" };
        let _ = writeln!(
            out,
            "  {kind}: {} seed(s): {}{more}",
            seeds.len(),
            shown.join(" ")
        );
    }
    out
}

/// The numbers docs/RELIABILITY.md and docs/PERFORMANCE.md quote: per strategy, writes and failed
/// writes per seed (mean/max) on the seeds without an adversary and on all seeds.
pub fn numbers_table(reports: &[SeedReport]) -> String {
    type Filter = fn(&SeedReport) -> bool;
    let subsets: [(&str, Filter); 2] = [
        ("seeds without adversary", |r| !r.adversary),
        ("all seeds", |_| true),
    ];
    let strategies: BTreeSet<Strategy> = reports.iter().map(|r| r.strategy).collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<24} {:<11} {:>6} {:>7} {:>10} {:>13} {:>13}",
        "subset", "strategy", "seeds", "passed", "converged", "writes m/max", "failed m/max"
    );
    for (title, filter) in subsets {
        for &strategy in &strategies {
            let s = Summary::of(
                reports
                    .iter()
                    .filter(|r| r.strategy == strategy && filter(r)),
            );
            let passed = if strategy == Strategy::Tierd {
                s.passed.to_string()
            } else {
                "-".to_owned()
            };
            let _ = writeln!(
                out,
                "{:<24} {:<11} {:>6} {:>7} {:>10} {:>13} {:>13}",
                title,
                strategy.as_str(),
                s.seeds,
                passed,
                s.converged,
                s.writes.show(2),
                s.failed.show(2)
            );
        }
    }
    out
}
