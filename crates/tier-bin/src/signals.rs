//! SIGTERM and SIGINT: the first starts a graceful shutdown, a second exits at once.

/// Resolves at the first SIGTERM or SIGINT. From then on, the next one exits the process at
/// once with status 1: its listener is registered before this returns, so a second signal sent
/// as soon as the first one's effects show (readiness failing) is never missed.
pub async fn shutdown() {
    listen().await;
    tracing::info!("shutting down; a second signal exits at once");
    let second = listen();
    tokio::spawn(async move {
        second.await;
        eprintln!("tierd: second signal, exiting now");
        std::process::exit(1);
    });
}

/// Registers for SIGTERM and SIGINT now (signals sent from here on are seen) and resolves at
/// the next one.
#[cfg(unix)]
fn listen() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let streams = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        match streams {
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
}

#[cfg(not(unix))]
fn listen() -> impl std::future::Future<Output = ()> + Send + 'static {
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
