//! `tier-testserver`: the test API server on its own, for trying `tierd run` or a controller of
//! your own with `kubectl`, without a cluster.
//!
//! ```text
//! cargo run -p tier-testserver -- --kubeconfig /tmp/tier.kubeconfig --antrea-admission
//! KUBECONFIG=/tmp/tier.kubeconfig kubectl get tiers
//! cargo run -p tier-bin -- run --kubeconfig /tmp/tier.kubeconfig --listen 127.0.0.1:8443
//! ```
//!
//! A Calico cluster: `--calico` serves Calico's Tier (`projectcalico.org/v3`, or
//! `--calico crd.projectcalico.org/v1`) beside Antrea's; `--calico-builtins` creates Calico's
//! three built-in Tiers first, as Calico's own components would.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tier_testserver::{AdmissionMode, CalicoApi, ServerConfig, TestApiServer};

/// A fake Kubernetes API server serving Antrea's Tiers (and, with `--calico`, Calico's) on
/// 127.0.0.1 (plain HTTP, one bearer token), with a kubeconfig written for it. Stops on Ctrl-C.
#[derive(Debug, Parser)]
#[command(name = "tier-testserver", version, about)]
struct Args {
    /// The port to listen on, on 127.0.0.1 (0: any free port; the kubeconfig names it).
    #[arg(long, default_value_t = 6443)]
    port: u16,

    /// Where to write the kubeconfig (overwritten).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "tier-testserver.kubeconfig"
    )]
    kubeconfig: PathBuf,

    /// The user the kubeconfig's token authenticates as.
    #[arg(
        long,
        value_name = "USER",
        default_value = "system:serviceaccount:kube-system:tierd"
    )]
    user: String,

    /// Enforce Antrea's Tier admission rules (as Antrea's webhook would), letting `--user`
    /// change priorities.
    #[arg(long)]
    antrea_admission: bool,

    /// Also serve Calico's Tier, its CRD installed, at this API (`projectcalico.org/v3`, as a
    /// current Calico install serves it, or `crd.projectcalico.org/v1`), with Calico's CRD
    /// rules and its admission policy on built-in Tiers.
    #[arg(
        long,
        value_name = "API",
        num_args = 0..=1,
        default_missing_value = "projectcalico.org/v3"
    )]
    calico: Option<CalicoApi>,

    /// Create Calico's three built-in Tiers (default, kube-admin, kube-baseline) at start, as
    /// Calico's own components would. Needs `--calico`.
    #[arg(long, requires = "calico")]
    calico_builtins: bool,
}

/// The bearer token of `--user` in the kubeconfig (loopback only; not a secret).
const TOKEN: &str = "tier-testserver-token";

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("tier-testserver: cannot start the tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tier-testserver: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), tier_testserver::Error> {
    let mut config = ServerConfig::default()
        .port(args.port)
        .user(TOKEN, &args.user);
    if args.antrea_admission {
        config = config.admission(AdmissionMode::BuiltinAntrea {
            controller_user: args.user.clone(),
        });
    }
    if let Some(api) = args.calico {
        config = config.calico(api);
    }
    let server = TestApiServer::start(config).await?;
    if args.calico_builtins {
        server
            .store()
            .calico()
            .create_builtins()
            .map_err(tier_testserver::Error::Seed)?;
    }
    server.write_kubeconfig(&args.kubeconfig, &args.user)?;
    let mut admission = if args.antrea_admission {
        "Antrea's Tier admission rules".to_owned()
    } else {
        "no admission".to_owned()
    };
    if let Some(api) = args.calico {
        admission.push_str(&format!("; Calico's Tier at {api}"));
    }
    // The first line is the contract for scripts and tests: the URL, then the kubeconfig.
    println!(
        "tier-testserver listening on {} ({admission}); kubeconfig: {}",
        server.url(),
        args.kubeconfig.display()
    );
    println!(
        "try: KUBECONFIG={} kubectl get tiers",
        args.kubeconfig.display()
    );
    if tokio::signal::ctrl_c().await.is_err() {
        // No signal handling available: serve until killed.
        std::future::pending::<()>().await;
    }
    println!("tier-testserver stopped");
    Ok(())
}
