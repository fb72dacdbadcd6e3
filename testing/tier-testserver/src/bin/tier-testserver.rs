//! `tier-testserver`: the test API server on its own, for trying `tierd run` or a controller of
//! your own with `kubectl`, without a cluster.
//!
//! ```text
//! cargo run -p tier-testserver -- --kubeconfig /tmp/tier.kubeconfig --antrea-admission
//! KUBECONFIG=/tmp/tier.kubeconfig kubectl get tiers
//! cargo run -p tier-bin -- run --kubeconfig /tmp/tier.kubeconfig --listen 127.0.0.1:8443
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tier_testserver::{AdmissionMode, ServerConfig, TestApiServer};

/// A fake Kubernetes API server serving Antrea's Tiers on 127.0.0.1 (plain HTTP, one bearer
/// token), with a kubeconfig written for it. Stops on Ctrl-C.
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
    let server = TestApiServer::start(config).await?;
    server.write_kubeconfig(&args.kubeconfig, &args.user)?;
    let admission = if args.antrea_admission {
        "Antrea's Tier admission rules"
    } else {
        "no admission"
    };
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
