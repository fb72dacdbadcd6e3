//! Where kube-apiserver's traffic to the "cluster" goes: an HTTP CONNECT proxy on a Unix socket,
//! named by kube-apiserver's `--egress-selector-config-file` (the KEP-1281 network proxy, as
//! konnectivity serves it), that routes each target address to a local one.
//!
//! kube-apiserver calls a webhook with a `service` reference at the Service's ClusterIP and
//! port, verifying the name `<service>.<namespace>.svc`; no kube-proxy runs here, so nothing
//! answers at a ClusterIP. Through this proxy, [`Egress::route`] maps that ClusterIP and port
//! to a process on 127.0.0.1: the shipped ValidatingWebhookConfiguration is used unchanged,
//! TLS name included. A target without a route is refused (`502`), so a test sees the
//! webhook error a cluster without the endpoint would show.
//!
//! Bounds: one thread per tunnelled connection (kube-apiserver keeps a few per webhook), the
//! route table holds what tests put in it; both end with the cluster.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::Error;

/// The longest a CONNECT request line and headers may be.
const MAX_HEADER_BYTES: u64 = 8 * 1024;

/// The egress proxy of one control plane; stopped on drop.
#[derive(Debug)]
pub struct Egress {
    socket: PathBuf,
    routes: Arc<Mutex<HashMap<String, SocketAddr>>>,
    stopped: Arc<AtomicBool>,
}

impl Egress {
    /// Listens on `socket` (a path in the run directory).
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the socket cannot be bound.
    pub fn start(socket: &Path) -> Result<Self, Error> {
        let listener = UnixListener::bind(socket).map_err(|e| Error::io(socket, e))?;
        let routes: Arc<Mutex<HashMap<String, SocketAddr>>> = Arc::default();
        let stopped = Arc::new(AtomicBool::new(false));
        let (table, stop) = (routes.clone(), stopped.clone());
        std::thread::Builder::new()
            .name("tier-testcluster-egress".to_owned())
            .spawn(move || {
                for connection in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let Ok(connection) = connection else {
                        continue;
                    };
                    let table = table.clone();
                    let _ = std::thread::Builder::new()
                        .name("tier-testcluster-tunnel".to_owned())
                        .spawn(move || tunnel(connection, &table));
                }
            })
            .map_err(|e| Error::io(socket, e))?;
        Ok(Self {
            socket: socket.to_owned(),
            routes,
            stopped,
        })
    }

    /// The `EgressSelectorConfiguration` that sends kube-apiserver's "cluster" traffic here.
    pub fn configuration(&self) -> String {
        format!(
            "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\n\
             egressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    \
             transport:\n      uds:\n        udsName: {}\n",
            self.socket.display()
        )
    }

    /// Sends connections kube-apiserver opens to `target` (`host:port`, e.g. a ClusterIP and
    /// Service port) to `to`; replaces an earlier route of `target`.
    pub fn route(&self, target: impl Into<String>, to: SocketAddr) {
        self.routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(target.into(), to);
    }

    /// Removes the route of `target`: its connections are refused again.
    pub fn unroute(&self, target: &str) {
        self.routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(target);
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = UnixStream::connect(&self.socket);
    }
}

/// Serves one CONNECT: reads the request, dials the route, answers 200 and copies both ways.
fn tunnel(connection: UnixStream, routes: &Mutex<HashMap<String, SocketAddr>>) {
    let _ = connection.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(reader) = connection.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(reader.take(MAX_HEADER_BYTES));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let target = match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["CONNECT", target, _] => target.to_owned(),
        _ => return answer(connection, "400 Bad Request"),
    };
    // The headers end with an empty line.
    loop {
        let mut header = String::new();
        match reader.read_line(&mut header) {
            Ok(0) | Err(_) => return,
            Ok(_) if header.trim().is_empty() => break,
            Ok(_) => {}
        }
    }
    let to = routes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&target)
        .copied();
    let Some(to) = to else {
        return answer(connection, "502 Bad Gateway");
    };
    let Ok(upstream) = TcpStream::connect_timeout(&to, Duration::from_secs(5)) else {
        return answer(connection, "502 Bad Gateway");
    };
    let mut client = connection;
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .is_err()
    {
        return;
    }
    let _ = client.set_read_timeout(None);
    let (Ok(mut client_reader), Ok(mut upstream_writer)) =
        (client.try_clone(), upstream.try_clone())
    else {
        return;
    };
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut client_reader, &mut upstream_writer);
        let _ = upstream_writer.shutdown(std::net::Shutdown::Write);
    });
    let mut upstream_reader = upstream;
    let _ = std::io::copy(&mut upstream_reader, &mut client);
    let _ = client.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}

fn answer(mut connection: UnixStream, status: &str) {
    let _ = write!(connection, "HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
}
