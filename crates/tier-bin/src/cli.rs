//! The command line: `tierd run | ensure | plan | crd | demo`, and the flags they share.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Exit codes, shared by every command.
pub mod exit {
    /// Success: converged, in sync, or printed.
    pub const OK: u8 = 0;
    /// A runtime error: the cluster could not be reached, or `ensure` timed out.
    pub const ERROR: u8 = 1;
    /// Bad input (for example an invalid `--tiers` file), or `plan` found pending changes.
    pub const USAGE_OR_PENDING: u8 = 2;
}

const EXIT_CODES: &str = "Exit codes: 0 success; 1 runtime error (API unreachable, timeout); \
                          2 invalid input such as a bad --tiers file (plan: changes pending).";

/// tierd keeps a cluster's system Tiers (Antrea's six by default) present and correct.
#[derive(Debug, Parser)]
#[command(name = "tierd", version, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "TIERD_LOG_FORMAT")]
    pub log_format: LogFormat,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output formats. Filter with `RUST_LOG` (default `info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: serve health, metrics and the Tier webhook at once, sync the Tier cache,
    /// ensure the system Tiers, then keep correcting drift until SIGTERM/SIGINT.
    #[command(
        after_help = "Exit codes: 0 after a clean shutdown; 1 on a runtime error; 2 on invalid input."
    )]
    Run(RunArgs),
    /// Ensure the system Tiers once and exit (for an init container or a Job).
    #[command(
        after_help = "Exit codes: 0 when every Tier converged; 1 on a runtime error or when \
                            --timeout passed (every Tier still pending or blocked is named, with \
                            why); 2 on invalid input."
    )]
    Ensure(EnsureArgs),
    /// Print what tierd would do (read-only: waits for the Tier cache, writes nothing).
    #[command(
        after_help = "Exit codes: 0 when every Tier is in sync; 2 when changes are pending \
                            (or on invalid input); 1 on error."
    )]
    Plan(PlanArgs),
    /// Print the Tier CustomResourceDefinition as YAML.
    #[command(after_help = "Exit codes: 0 printed; 1 on error.")]
    Crd,
    /// Run the real initializer on an in-memory cluster from a messy start, narrating it.
    #[command(after_help = "Exit codes: 0 when the demo converged; 1 otherwise.")]
    Demo(DemoArgs),
}

/// How to reach the cluster and what to ensure.
#[derive(Clone, Debug, Args)]
pub struct ClusterArgs {
    /// A kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// Use the in-cluster service account, ignoring kubeconfig files.
    #[arg(long, conflicts_with_all = ["kubeconfig", "context"])]
    pub in_cluster: bool,

    /// A YAML file of desired Tiers replacing Antrea's six (validated before any API call).
    #[arg(long, value_name = "FILE", env = "TIERD_TIERS")]
    pub tiers: Option<PathBuf>,

    /// The longest one API write may take.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub call_timeout: Duration,
}

/// Flags of `tierd run`.
#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// Cluster and desired Tiers.
    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// Address of the HTTP(S) server (health, metrics, webhook).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:8443",
        env = "TIERD_LISTEN"
    )]
    pub listen: SocketAddr,

    /// PEM certificate for TLS (reloaded when it changes); without it the server speaks HTTP.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key for TLS.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// The user the webhook lets change Tier priorities. Default: whoever tierd's own client
    /// authenticates as (asked of the API server: SelfSubjectReview, Kubernetes 1.28+); set it
    /// on older servers, or to exempt another controller.
    #[arg(long, value_name = "USER", env = "TIERD_CONTROLLER_USER")]
    pub controller_user: Option<String>,

    /// This pod's name, reported as the instance in Kubernetes Events.
    #[arg(long, value_name = "NAME", env = "POD_NAME")]
    pub pod_name: Option<String>,

    /// Make /readyz also wait for the system Tiers. Off by default: kube-apiserver reaches the
    /// webhook only through Ready pods, so a single replica that waited for Tiers whose creation
    /// needs its own webhook would never become ready.
    #[arg(long)]
    pub ready_requires_tiers: bool,
}

/// Flags of `tierd ensure`.
#[derive(Clone, Debug, Args)]
pub struct EnsureArgs {
    /// Cluster and desired Tiers.
    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// Give up after this long (e.g. `2m`), naming every Tier not converged; default: never.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
}

/// Flags of `tierd plan`.
#[derive(Clone, Debug, Args)]
pub struct PlanArgs {
    /// Cluster and desired Tiers.
    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// Give up waiting for the Tier cache after this long.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// Flags of `tierd demo`.
#[derive(Clone, Debug, Args)]
pub struct DemoArgs {
    /// Seed of the initializer's jitter.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_durations_and_defaults() {
        let cli = Cli::try_parse_from(["tierd", "ensure", "--timeout", "90s"]).unwrap();
        let Command::Ensure(args) = cli.command else {
            panic!("not ensure");
        };
        assert_eq!(args.timeout, Some(Duration::from_secs(90)));
        assert_eq!(args.cluster.call_timeout, Duration::from_secs(10));
        assert!(Cli::try_parse_from(["tierd", "run", "--in-cluster", "--context", "x"]).is_err());
        assert!(Cli::try_parse_from(["tierd", "run", "--tls-cert", "c.pem"]).is_err());
    }
}
