//! Logging: `tracing` to stderr, as text or JSON, filtered by `RUST_LOG`.

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Installs the global subscriber; `default_filter` applies when `RUST_LOG` is unset or invalid.
/// A second call is a no-op.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
