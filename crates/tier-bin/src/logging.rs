//! Logging: `tracing` to stderr, as text or JSON.
//!
//! - **Filter**: `RUST_LOG` when set and valid (kube's filter syntax, e.g.
//!   `RUST_LOG=info,kube_client=debug`); otherwise the command's level with the targets of
//!   [`QUIET`] turned off. Those are kube's per-request lines that repeat what tierd already
//!   says once per state change: kube's HTTP trace layer logs an ERROR for every failed request
//!   (24 in 5 s while a webhook was down), and kube-runtime's watcher a WARN with the Rust
//!   `Debug` of every failed list. `RUST_LOG` brings them back.
//! - **Colour**: ANSI colour only when stderr is a terminal and `NO_COLOR` is unset or empty
//!   (<https://no-color.org>); never in a pipe, a file or a container log.

use std::ffi::OsStr;
use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Targets off by default: kube's lines that duplicate tierd's own (see the module docs).
pub const QUIET: [&str; 2] = ["kube_client::client::builder", "kube_runtime::watcher"];

/// The filter used when `RUST_LOG` is unset or invalid: `level` for everything, [`QUIET`] off.
pub fn default_filter(level: &str) -> String {
    let mut filter = level.to_owned();
    for target in QUIET {
        filter.push(',');
        filter.push_str(target);
        filter.push_str("=off");
    }
    filter
}

/// Whether to colour log lines: only on a terminal, and only without `NO_COLOR` (non-empty).
pub fn use_colour(stderr_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(OsStr::is_empty)
}

/// Installs the global subscriber at `level` (see the module docs for `RUST_LOG` and colour).
/// A second call is a no-op.
pub fn init(format: LogFormat, level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter(level)));
    let colour = use_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, None));
        assert!(use_colour(true, Some(OsStr::new(""))));
        assert!(!use_colour(true, Some(OsStr::new("1"))));
        assert!(!use_colour(false, None));
        assert!(!use_colour(false, Some(OsStr::new(""))));
    }

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `filter` lets through of one line from tierd and kube's noisy targets.
    fn logged(filter: &str) -> String {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::new(filter))
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "tier_core::driver", "tier created");
            tracing::warn!(target: "tier_kube::lister", "Tier watch failed");
            tracing::error!(target: "kube_client::client::builder", "failed with status 503");
            tracing::warn!(target: "kube_runtime::watcher", "watch list error with 403: Api(..)");
            tracing::warn!(target: "kube_client::config", "impersonating user");
        });
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn the_default_filter_keeps_tierd_and_drops_kube_duplicates() {
        let text = logged(&default_filter("info"));
        assert!(text.contains("tier created"), "{text}");
        assert!(text.contains("Tier watch failed"), "{text}");
        assert!(text.contains("impersonating user"), "{text}");
        assert!(!text.contains("failed with status"), "{text}");
        assert!(!text.contains("watch list error"), "{text}");
        // RUST_LOG=info (a plain level) brings kube's lines back.
        let all = logged("info");
        assert!(all.contains("failed with status 503"), "{all}");
        assert!(all.contains("watch list error"), "{all}");
    }
}
