//! The commands that talk to a cluster: `crd`, `plan`, `ensure` (and the shared set-up).
//!
//! Every command validates its input (the `--tiers` file) before it builds a client, so bad
//! input exits 2 without a single API request.

use std::time::Duration;

use tier_core::{DesiredSet, DriverConfig, Mode, Status, Stopped, TierLister, TierState};
use tier_kube::{ClientOptions, KubeLister, WriterConfig};

use crate::cli::{ClusterArgs, EnsureArgs, PlanArgs, exit};
use crate::{plan, signals, tiers_file};

/// A command failed; each variant maps to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The `--tiers` file is unreadable or invalid (exit 2).
    #[error(transparent)]
    Tiers(#[from] tiers_file::TiersFileError),
    /// No client could be built (exit 1).
    #[error(transparent)]
    Client(#[from] tier_kube::ClientError),
    /// The Tier cache could not be started (exit 1).
    #[error(transparent)]
    Lister(#[from] tier_kube::ListerError),
    /// The CRD could not be rendered (exit 1).
    #[error(transparent)]
    Crd(#[from] tier_kube::CrdError),
    /// The Tier cache did not sync in time (exit 1).
    #[error(
        "the Tier cache did not sync within {0:?}: is the API server reachable, is the Tier CRD \
         installed (`tierd crd | kubectl apply -f -`) and may tierd list and watch tiers?"
    )]
    SyncTimeout(Duration),
    /// `ensure --timeout` passed before every Tier converged (exit 1).
    #[error("not every Tier converged within {after:?}:{}", pending(.status))]
    NotConverged {
        /// The timeout.
        after: Duration,
        /// The status when it passed.
        status: Box<Status>,
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
    /// The API server could not say who tierd is, and `--controller-user` is not set (exit 1).
    #[error("cannot default the webhook's controller user: {0}")]
    Identity(#[source] tier_kube::IdentityError),
    /// The API server did not say who tierd is in time, and `--controller-user` is not set
    /// (exit 1).
    #[error(
        "the API server did not say who tierd is within {0:?} (SelfSubjectReview); check the \
         connection or set --controller-user"
    )]
    IdentityTimeout(Duration),
    /// A task of tierd ended unexpectedly (exit 1).
    #[error("a tierd task ended unexpectedly: {0}")]
    Task(String),
}

impl CommandError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CommandError::Tiers(_) | CommandError::Tls(_) => exit::USAGE_OR_PENDING,
            _ => exit::ERROR,
        }
    }
}

/// One line per Tier that is not converged, saying why.
fn pending(status: &Status) -> String {
    if !status.synced {
        return "\n  - the Tier cache never synced".to_owned();
    }
    status
        .unconverged()
        .map(|t| {
            let why = match &t.state {
                TierState::Blocked { message, .. } => format!("blocked: {message}"),
                TierState::Retrying { attempt, error, .. } => {
                    format!("retrying (attempt {attempt}): {error}")
                }
                TierState::Contested { corrections, .. } => {
                    format!("contested: corrected {corrections} times in a row")
                }
                other => other.as_str().to_owned(),
            };
            format!("\n  - {}: {why}", t.name)
        })
        .collect()
}

/// The desired set: the `--tiers` file, or Antrea's six.
pub fn desired(args: &ClusterArgs) -> Result<DesiredSet, CommandError> {
    match &args.tiers {
        Some(path) => Ok(tiers_file::load(path)?),
        None => Ok(DesiredSet::antrea()),
    }
}

/// The client options the flags select.
pub fn client_options(args: &ClusterArgs) -> ClientOptions {
    ClientOptions {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
        in_cluster: args.in_cluster,
    }
}

/// The clients the flags select, from one configuration: the shared one (kube's defaults,
/// retries on: the watch, Events, identity) and the writer's (retries off; see
/// [`tier_kube::client`]).
pub async fn clients(args: &ClusterArgs) -> Result<(kube::Client, kube::Client), CommandError> {
    let config = tier_kube::client::config(&client_options(args)).await?;
    let shared = tier_kube::client::client_from_config(config.clone())?;
    let writer = tier_kube::client::writer_client(config)?;
    Ok((shared, writer))
}

/// The writer configuration the flags select.
pub fn writer_config(args: &ClusterArgs) -> WriterConfig {
    WriterConfig {
        call_timeout: args.call_timeout,
        ..WriterConfig::default()
    }
}

/// `tierd crd`: the CRD as YAML.
pub fn crd() -> Result<String, CommandError> {
    Ok(tier_kube::crd::crd_yaml()?)
}

/// `tierd plan`: prints the plan table; exit 0 in sync, 2 pending. Writes nothing.
pub async fn plan(args: &PlanArgs) -> Result<u8, CommandError> {
    let desired = desired(&args.cluster)?;
    let client = tier_kube::client::client(&client_options(&args.cluster)).await?;
    let lister = KubeLister::start(client)?;
    tokio::time::timeout(args.timeout, lister.wait_synced())
        .await
        .map_err(|_| CommandError::SyncTimeout(args.timeout))?;
    let rows = plan::rows(&desired, &lister.snapshot());
    print!("{}", plan::render(&rows));
    Ok(if plan::in_sync(&rows) {
        exit::OK
    } else {
        exit::USAGE_OR_PENDING
    })
}

/// `tierd ensure`: converges every Tier once; with `--timeout`, gives up naming the laggards.
pub async fn ensure(args: &EnsureArgs) -> Result<(), CommandError> {
    let desired = desired(&args.cluster)?;
    let (client, writer_client) = clients(&args.cluster).await?;
    let lister = KubeLister::start(client)?;
    let writer = lister.writer(writer_client, writer_config(&args.cluster));
    let ensurer = tier_runtime::spawn(lister, writer, desired, DriverConfig::default(), Mode::Once);
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
    match (stopped, interrupted, args.timeout) {
        (Stopped::Converged, _, _) => Ok(()),
        (_, true, _) => Err(CommandError::Interrupted),
        (_, false, after) => Err(CommandError::NotConverged {
            after: after.unwrap_or_default(),
            status: Box::new(status.current()),
        }),
    }
}
