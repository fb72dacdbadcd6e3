//! SIGTERM and SIGINT: the first starts a graceful shutdown, a second exits at once.

/// Resolves at the first SIGTERM or SIGINT. From then on, the next one exits the process at
/// once with status 1.
pub async fn shutdown() {
    first_signal().await;
    tracing::info!("shutting down; a second signal exits at once");
    tokio::spawn(async {
        first_signal().await;
        eprintln!("tierd: second signal, exiting now");
        std::process::exit(1);
    });
}

#[cfg(unix)]
async fn first_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            tracing::warn!("cannot listen for SIGTERM/SIGINT; falling back to Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(not(unix))]
async fn first_signal() {
    let _ = tokio::signal::ctrl_c().await;
}
