//! `embed-controller`: the example controller as a process. Reads the cluster from
//! `KUBECONFIG` (or `~/.kube/config`, or in-cluster) and serves on `LISTEN` (default
//! `127.0.0.1:8080`) until Ctrl-C. Try it with `tier-testserver` (see README).

use std::net::SocketAddr;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match start().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("embed-controller: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn start() -> Result<(), Box<dyn std::error::Error>> {
    let listen: SocketAddr = std::env::var("LISTEN")
        .unwrap_or_else(|_| "127.0.0.1:8080".to_owned())
        .parse()
        .map_err(|error| format!("LISTEN is not an address: {error}"))?;
    let config = tier_kube::client::config(&tier_kube::client::ClientOptions::default()).await?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(%listen, "serving /tiers, /livez, /readyz and /validate/tier");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    embed_controller::run(config, listener, shutdown).await?;
    Ok(())
}
