//! Puts the git commit and the build date into `tierd --version`, when they can be known.
//!
//! Sets `TIERD_LONG_VERSION` for the crate, e.g. `0.1.0 (commit f232372c1d0e, built
//! 2026-12-01)`. Every part is optional, and nothing here fails the build:
//!
//! - the commit comes from `TIERD_GIT_COMMIT` if set (for packagers building from a source
//!   tarball), else from `git rev-parse HEAD` when `build.rs` is tracked by git; without
//!   either (no git, no repository) it is left out;
//! - the build date is `SOURCE_DATE_EPOCH`'s day if set (reproducible builds), else today (UTC).
//!
//! Cargo reruns this script only when the script, those variables, or git's `HEAD` (or the
//! branch it points to) change, never for an ordinary edit of the sources: the date is the day
//! of the last such change.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=TIERD_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");

    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let mut details = Vec::new();
    if let Some(commit) = std::env::var("TIERD_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
    {
        details.push(format!("commit {}", commit.trim()));
    }
    if let Some(date) = build_date() {
        details.push(format!("built {date}"));
    }
    let long = if details.is_empty() {
        version
    } else {
        format!("{version} ({})", details.join(", "))
    };
    println!("cargo:rustc-env=TIERD_LONG_VERSION={long}");
}

/// The abbreviated commit of `HEAD`, watching the files that move when it does.
fn git_commit() -> Option<String> {
    // A source tarball unpacked inside another repository is not that repository's commit.
    git(&["ls-files", "--error-unmatch", "build.rs"])?;
    let dirs = git(&[
        "rev-parse",
        "--path-format=absolute",
        "--git-dir",
        "--git-common-dir",
    ])?;
    let mut lines = dirs.lines();
    let (git_dir, common_dir) = (PathBuf::from(lines.next()?), PathBuf::from(lines.next()?));
    watch(&git_dir.join("HEAD"));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch(&common_dir.join(branch.trim()));
    }
    watch(&common_dir.join("packed-refs"));
    git(&["rev-parse", "--short=12", "HEAD"]).map(|c| c.trim().to_owned())
}

/// Reruns the script when `path` changes (only if it exists: a missing path would rerun it
/// on every build).
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// `git <args>`'s output, or `None` when git is missing or fails (no repository).
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8(output.stdout).ok()
}

/// `YYYY-MM-DD` of `SOURCE_DATE_EPOCH`, else of now, in UTC.
fn build_date() -> Option<String> {
    let seconds = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(epoch) => epoch.trim().parse::<i64>().ok()?,
        Err(_) => {
            i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs()).ok()?
        }
    };
    let (y, m, d) = civil_from_days(seconds.div_euclid(86_400));
    Some(format!("{y:04}-{m:02}-{d:02}"))
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
