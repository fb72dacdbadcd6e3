//! `tier-testcluster --kubeconfig FILE`: a real kube-apiserver and etcd for people and scripts
//! (`--build-only`: just build them, as CI does first).
//!
//! Builds the control plane if needed, starts it, writes an admin kubeconfig to FILE once
//! `/readyz` answers, runs until SIGTERM or SIGINT, then stops it and removes its data (FILE
//! too, which would point at nothing).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// A real kube-apiserver and etcd on 127.0.0.1, for trying tierd with kubectl.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Where to write the admin kubeconfig once the API server is ready.
    #[arg(long, required_unless_present = "build_only")]
    kubeconfig: Option<PathBuf>,
    /// Only build (or find cached) the control plane's binaries, print their directory, exit.
    #[arg(long)]
    build_only: bool,
    /// Also run kube-controller-manager with these controllers (comma-separated `--controllers`
    /// names, e.g. `validatingadmissionpolicy-status-controller`).
    #[arg(long, value_delimiter = ',')]
    controllers: Vec<String>,
    /// An extra kube-apiserver flag (repeatable), e.g. `--apiserver-arg=--v=2`.
    #[arg(long = "apiserver-arg", allow_hyphen_values = true)]
    apiserver_args: Vec<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tier-testcluster: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if args.build_only {
        let binaries = tokio::task::spawn_blocking(tier_testcluster::binaries).await??;
        println!(
            "{}",
            binaries
                .kube_apiserver
                .parent()
                .unwrap_or(&binaries.kube_apiserver)
                .display()
        );
        return Ok(());
    }
    let Some(kubeconfig) = args.kubeconfig.clone() else {
        return Err("--kubeconfig FILE is required".into());
    };
    // Never overwrite someone's kubeconfig (~/.kube/config): only a previous run's.
    if let Ok(existing) = std::fs::read_to_string(&kubeconfig)
        && !existing.contains("name: tier-testcluster")
    {
        return Err(format!(
            "{} exists and is not a tier-testcluster kubeconfig; choose another path",
            kubeconfig.display()
        )
        .into());
    }
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let options = args
        .apiserver_args
        .iter()
        .fold(tier_testcluster::Options::default(), |o, a| {
            o.apiserver_arg(a.clone())
        })
        .controllers(args.controllers.clone());
    let start = tier_testcluster::TestCluster::start_with(options);
    let cluster = tokio::select! {
        cluster = start => cluster?,
        _ = tokio::signal::ctrl_c() => return Ok(()),
        _ = terminate.recv() => return Ok(()),
    };
    std::fs::write(&kubeconfig, cluster.admin_kubeconfig_yaml())?;
    eprintln!(
        "tier-testcluster: kube-apiserver {} ready at {} in {:.1?}; admin kubeconfig in {} \
         (logs in {}); SIGINT or SIGTERM stops it",
        cluster.binaries().version,
        cluster.url(),
        cluster.started_in(),
        kubeconfig.display(),
        cluster.dir().display(),
    );
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    drop(cluster);
    let _ = std::fs::remove_file(&kubeconfig);
    eprintln!("tier-testcluster: stopped, data removed");
    Ok(())
}
