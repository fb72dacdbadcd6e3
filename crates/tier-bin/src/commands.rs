//! The commands that talk to a cluster: `crd`, `plan`, `ensure` (and the shared set-up).
//!
//! Every command validates its input (the `--tiers` file) before it builds a client, so bad
//! input exits 2 without a single API request.
//!
//! When the Tier cache does not sync in time (`plan --timeout`, `ensure --timeout`), the error
//! names the API server and what the cache's watch last saw, in words
//! ([`tier_kube::explain`]): connection refused, 403 Forbidden on list, the CRD missing.

use std::time::Duration;

use tier_core::{DriverConfig, Mode, Status, Stopped, TierLister};
use tier_kube::client::ClientOptions;
use tier_kube::writer::WriterConfig;

use crate::cli::{ClusterArgs, EnsureArgs, Output, PlanArgs, exit};
use crate::controller::ControllerMode;
use tierd::tiers_file;

use crate::{plan, signals};

/// A command failed; each variant maps to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The driver's configuration is out of range (exit 2).
    #[error(transparent)]
    Config(#[from] tier_core::ConfigError),
    /// The `--tiers` file is unreadable or invalid (exit 2).
    #[error(transparent)]
    Tiers(#[from] tiers_file::TiersFileError),
    /// Flags that make no sense for the selected controller (exit 2).
    #[error("{0}")]
    Flags(String),
    /// The `--leader-elect-*` flags cannot fence or are out of range (exit 2).
    #[error("invalid --leader-elect-* flags: {0}")]
    LeaderElection(#[source] tier_kube::lease::ElectionError),
    /// No client could be built from the kubeconfig, the context or the in-cluster
    /// configuration (exit 2: the configuration is input; no request was sent).
    #[error(transparent)]
    Client(#[from] tier_kube::client::ClientError),
    /// The Tier cache could not be started (exit 1).
    #[error(transparent)]
    Lister(#[from] tier_kube::lister::ListerError),
    /// The CRD could not be rendered (exit 1).
    #[error(transparent)]
    Crd(#[from] tier_kube::crd::CrdError),
    /// `plan`'s Tier cache did not sync in time (exit 2, as every `plan` error).
    #[error("the Tier cache did not sync within {after:?} from {server}: {}", cache_words(.cache))]
    SyncTimeout {
        /// The timeout.
        after: Duration,
        /// The API server's URL.
        server: String,
        /// What the cache's watch last saw, in words.
        cache: Option<String>,
    },
    /// The plan could not be printed as JSON or YAML (exit 2, as every `plan` error).
    #[error("cannot print the plan: {0}")]
    Output(String),
    /// `ensure --timeout` passed before every Tier converged (exit 1).
    #[error("not every Tier converged within {after:?}:{}", pending(.status, .cache.as_deref()))]
    NotConverged {
        /// The timeout.
        after: Duration,
        /// The status when it passed.
        status: Box<Status>,
        /// What the cache's watch last saw, in words (for a cache that never synced).
        cache: Option<String>,
    },
    /// A signal stopped the command (exit 1).
    #[error("stopped by a signal before finishing")]
    Interrupted,
    /// The TLS certificate or key could not be used (exit 2).
    #[error("cannot use the TLS certificate: {0}")]
    Tls(#[from] tier_server::tls::TlsError),
    /// The HTTP server failed (exit 1).
    #[error("the HTTP server failed: {0}")]
    Serve(#[from] tier_server::server::ServeError),
    /// tierd could not start (outside a tokio runtime: a bug; exit 1).
    #[error("tierd could not start: {0}")]
    Start(#[from] tierd::StartError),
    /// A task of tierd ended unexpectedly (exit 1).
    #[error("a tierd task ended unexpectedly: {0}")]
    Task(String),
}

impl CommandError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CommandError::Tiers(_)
            | CommandError::Flags(_)
            | CommandError::LeaderElection(_)
            | CommandError::Tls(_)
            | CommandError::Client(_)
            | CommandError::Config(_) => exit::USAGE,
            _ => exit::ERROR,
        }
    }
}

/// What the cache saw, or that the API server never answered.
fn cache_words(cache: &Option<String>) -> String {
    match cache {
        Some(error) => format!("last error: {error}"),
        None => "no answer and no error from the API server yet (a slow server or a long \
                 list); try a longer --timeout"
            .to_owned(),
    }
}

/// One line per Tier that is not converged, saying why.
fn pending(status: &Status, cache: Option<&str>) -> String {
    if !status.synced {
        return match cache {
            Some(error) => format!("\n  - the Tier cache never synced; last error: {error}"),
            None => "\n  - the Tier cache never synced (no error seen)".to_owned(),
        };
    }
    status.unconverged().map(|t| format!("\n  - {t}")).collect()
}

/// The client options the flags select.
pub(crate) fn client_options(args: &ClusterArgs) -> ClientOptions {
    ClientOptions {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
        in_cluster: args.in_cluster,
    }
}

/// The clients the flags select, from one configuration: the shared one (kube's defaults,
/// retries on: Events, the metrics reviews) and the retry-free one (the writer and tierd's own
/// retry loops; see [`tierd::Clients`]). Sends no request.
pub(crate) async fn clients(args: &ClusterArgs) -> Result<tierd::Clients, CommandError> {
    let config = tier_kube::client::config(&client_options(args)).await?;
    Ok(tierd::Clients::from_config(config)?)
}

/// The writer configuration the flags select.
pub(crate) fn writer_config(args: &ClusterArgs) -> WriterConfig {
    WriterConfig {
        call_timeout: args.call_timeout,
        ..WriterConfig::default()
    }
}

/// `tierd crd`: the CRD as YAML.
pub(crate) fn crd() -> Result<String, CommandError> {
    Ok(tier_kube::crd::crd_yaml()?)
}

/// `tierd plan`: prints the plan (table, JSON or YAML) and returns the exit code: 0 in sync,
/// [`exit::PLAN_PENDING`] when changes are pending. Writes nothing.
///
/// # Errors
///
/// Invalid input, no client, or a Tier cache that did not sync within `--timeout`; `main` maps
/// every error of `plan` to [`exit::PLAN_ERROR`].
pub(crate) async fn plan<C: ControllerMode>(args: &PlanArgs) -> Result<u8, CommandError> {
    let desired = C::desired(&args.cluster)?;
    let config = tier_kube::client::config(&client_options(&args.cluster)).await?;
    // The server, for error messages ("connection refused" to which server).
    let server = config.cluster_url.to_string();
    // Retries off: the watch's own backoff is its only retry loop (kube's would hide a 503).
    let client = tier_kube::client::writer_client(config)?;
    let lister = C::watch_tiers(&client, &C::settings_from(&args.cluster))?;
    let synced = tokio::time::timeout(args.timeout, lister.wait_synced())
        .await
        .is_ok();
    let (snapshot, cache) = (lister.snapshot(), lister.watch_stats().last_error);
    // The watch's task ends here, before the client and the runtime: left running, it met them
    // shutting down and logged "buffer's worker closed unexpectedly" after a successful plan.
    lister.stop().await;
    if !synced {
        return Err(CommandError::SyncTimeout {
            after: args.timeout,
            server,
            cache,
        });
    }
    // Creates are reviewed as the controller's admission would (Antrea's webhook for any user:
    // the user matters only for updates, which plan does not predict).
    let admission = C::default_admission();
    let records = plan::records(&desired, &snapshot, admission.as_ref());
    let text = match args.output {
        Output::Table => plan::table::<C>(&records),
        Output::Json => plan::json(&records).map_err(|e| CommandError::Output(e.to_string()))?,
        Output::Yaml => plan::yaml(&records).map_err(|e| CommandError::Output(e.to_string()))?,
    };
    print!("{text}");
    Ok(if plan::in_sync(&records) {
        exit::OK
    } else {
        exit::PLAN_PENDING
    })
}

/// `tierd ensure`: converges every Tier once; with `--timeout`, gives up naming the laggards.
pub(crate) async fn ensure<C: ControllerMode>(args: &EnsureArgs) -> Result<(), CommandError> {
    let desired = C::desired(&args.cluster)?;
    let config = tier_kube::client::config(&client_options(&args.cluster)).await?;
    // The server, for error messages ("connection refused" to which server).
    let server = config.cluster_url.to_string();
    // Retries off for both: the writes' and the watch's own backoffs are their only retry loops.
    let client = tier_kube::client::writer_client(config)?;
    let writer_client = client.clone();
    let lister = C::watch_tiers(&client, &C::settings_from(&args.cluster))?;
    let watch = lister.clone();
    let writer = lister.writer(writer_client, writer_config(&args.cluster));
    let ensurer =
        tier_runtime::spawn(lister, writer, desired, DriverConfig::default(), Mode::Once)?;
    let status = ensurer.status();
    let cancel = ensurer.cancellation();
    let deadline = async {
        match args.timeout {
            Some(after) => tokio::time::sleep(after).await,
            None => std::future::pending().await,
        }
    };
    let mut interrupted = false;
    let stopped = tokio::select! {
        stopped = ensurer.join() => stopped,
        () = deadline => {
            cancel.cancel();
            Stopped::Cancelled
        }
        () = signals::shutdown() => {
            interrupted = true;
            cancel.cancel();
            Stopped::Cancelled
        }
    };
    let status = status.current();
    let last_error = watch.watch_stats().last_error;
    // The driver is done (or cancelled): end the watch before the client and the runtime.
    watch.stop().await;
    match (stopped, interrupted, args.timeout) {
        (Stopped::Converged, _, _) => Ok(()),
        (_, true, _) => Err(CommandError::Interrupted),
        (_, false, after) => {
            let cache = (!status.synced).then(|| {
                last_error.map_or_else(
                    || format!("no answer yet from {server}"),
                    |error| format!("{error} (API server {server})"),
                )
            });
            Err(CommandError::NotConverged {
                after: after.unwrap_or_default(),
                status: Box::new(status),
                cache,
            })
        }
    }
}
