//! End-to-end test support: run the real `tierd` binary against [`tier_testserver`].
//!
//! The binary is the one `cargo test --workspace` builds next to the test executables
//! (`target/<profile>/tierd`). [`Cluster`] is a test API server with tierd's user and a
//! kubeconfig; [`Tierd`] is a running `tierd run` whose three listen addresses (webhook, probes,
//! metrics) are read from its JSON log; [`Tierd::get`] speaks HTTP or HTTPS to the right one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod real;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use serde_json::Value;
use tier_testserver::{AdmissionMode, ServerConfig, TestApiServer, WebhookConfig};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

/// tierd's user name (its service account), exempt from the priority-update rule.
pub const USER: &str = "system:serviceaccount:kube-system:tierd";
/// tierd's bearer token at the test API server.
pub const TOKEN: &str = "tierd-token";
/// The longest any wait in these tests may take.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Antrea's six system Tiers: name, priority, description.
pub fn antrea() -> Vec<(&'static str, i64, &'static str)> {
    tier_testserver::antrea::SYSTEM_TIERS
        .iter()
        .map(|t| (t.name, t.priority, t.description))
        .collect()
}

/// The path of the `tierd` binary built by cargo for this test run.
///
/// Tests live in `target/<profile>/deps/`, binaries in `target/<profile>/`: both are searched.
pub fn tierd_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let name = format!("tierd{}", std::env::consts::EXE_SUFFIX);
    let dir = exe.parent().unwrap();
    [Some(dir), dir.parent()]
        .into_iter()
        .flatten()
        .map(|d| d.join(&name))
        .find(|bin| bin.exists())
        .unwrap_or_else(|| {
            panic!(
                "no {name} next to {}: run the tests with `cargo test --workspace` (or `cargo build -p tier-bin` first)",
                exe.display()
            )
        })
}

/// A file removed on drop.
pub struct TempFile(pub PathBuf);

impl TempFile {
    /// A fresh path in the temp dir with `stem` and `ext` in its name.
    pub fn new(stem: &str, ext: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Self(std::env::temp_dir().join(format!("tier-e2e-{stem}-{}-{n}.{ext}", std::process::id())))
    }

    /// A temp file holding `text`.
    pub fn with(stem: &str, ext: &str, text: &str) -> Self {
        let file = Self::new(stem, ext);
        std::fs::write(&file.0, text).unwrap();
        file
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A test API server with tierd's user and a kubeconfig file for it.
pub struct Cluster {
    /// The server.
    pub server: TestApiServer,
    /// The kubeconfig tierd uses.
    pub kubeconfig: TempFile,
}

impl Cluster {
    /// A cluster with Antrea's built-in Tier admission (tierd exempt from the priority rule).
    pub async fn antrea() -> Self {
        Self::start(
            ServerConfig::default().admission(AdmissionMode::BuiltinAntrea {
                controller_user: USER.to_owned(),
            }),
        )
        .await
    }

    /// A cluster with `config` plus tierd's user.
    pub async fn start(config: ServerConfig) -> Self {
        Self::start_as(config, USER).await
    }

    /// A cluster with `config` plus `user`, whom tierd's kubeconfig authenticates as.
    pub async fn start_as(config: ServerConfig, user: &str) -> Self {
        let server = TestApiServer::start(config.user(TOKEN, user))
            .await
            .unwrap();
        let kubeconfig = TempFile::new("kubeconfig", "yaml");
        server.write_kubeconfig(&kubeconfig.0, user).unwrap();
        Self { server, kubeconfig }
    }

    /// A test API server that is not there yet: a free port on 127.0.0.1 and a kubeconfig for
    /// tierd's user pointing at it. Connections are refused until [`Absent::start`].
    pub fn absent() -> Absent {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let kubeconfig = TempFile::with(
            "kubeconfig",
            "yaml",
            &tier_testserver::kubeconfig_for(
                &format!("http://127.0.0.1:{port}"),
                USER,
                TOKEN,
                "tier-testserver",
            ),
        );
        Absent { port, kubeconfig }
    }

    /// Stores a Tier directly (another actor; no admission).
    pub fn seed(&self, name: &str, priority: i64, description: Option<&str>) {
        self.server
            .store()
            .create(tier_testserver::tier::tier(name, priority, description))
            .unwrap();
    }

    /// The stored priority and description of `name`.
    pub fn stored(&self, name: &str) -> Option<(i64, Option<String>)> {
        let tier = self.server.store().get(name)?;
        let spec = &tier["spec"];
        Some((
            spec["priority"].as_i64()?,
            spec["description"].as_str().map(str::to_owned),
        ))
    }

    /// Whether every Antrea Tier is stored exactly as desired.
    pub fn has_antrea_tiers(&self) -> bool {
        antrea()
            .into_iter()
            .all(|(name, p, d)| self.stored(name) == Some((p, Some(d.to_owned()))))
    }

    /// Waits until `cond` holds, polling every 20 ms; false after `PATIENCE`.
    pub async fn eventually(&self, cond: impl Fn(&Self) -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            if cond(self) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cond(self)
    }

    /// Runs `tierd <args> --kubeconfig <this cluster>` to completion.
    pub async fn tierd(&self, args: &[&str]) -> Finished {
        let output = Command::new(tierd_binary())
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig.0)
            .env("RUST_LOG", "info")
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(PATIENCE, output)
            .await
            .unwrap()
            .unwrap();
        Finished {
            status: output.status,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// A cluster whose API server starts later, on a port chosen now; see [`Cluster::absent`].
pub struct Absent {
    /// The port the server will listen on.
    pub port: u16,
    /// The kubeconfig pointing at it.
    pub kubeconfig: TempFile,
}

impl Absent {
    /// Starts the test API server (`config` plus tierd's user) on the chosen port.
    pub async fn start(self, config: ServerConfig) -> Cluster {
        let server = TestApiServer::start(config.user(TOKEN, USER).port(self.port))
            .await
            .unwrap();
        Cluster {
            server,
            kubeconfig: self.kubeconfig,
        }
    }
}

/// A finished tierd command.
#[derive(Debug)]
pub struct Finished {
    /// Its exit status.
    pub status: ExitStatus,
    /// What it printed.
    pub stdout: String,
    /// What it logged.
    pub stderr: String,
}

impl Finished {
    /// The exit code (-1 when killed by a signal).
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }
}

/// A TLS client configuration that trusts the certificates in `ca_pem` alone (ring, TLS 1.2 and
/// 1.3), e.g. a [`Tls`]'s certificate read back from its file by another process.
pub fn client_config_trusting(ca_pem: &[u8]) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca_pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// TLS material for tierd's server: a self-signed certificate for 127.0.0.1.
pub struct Tls {
    /// The certificate file.
    pub cert: TempFile,
    /// The key file.
    pub key: TempFile,
    /// The certificate as PEM (it is its own CA).
    pub ca_pem: String,
}

impl Tls {
    /// A TLS client configuration that trusts this certificate alone (ring, TLS 1.2 and 1.3).
    pub fn client_config(&self) -> rustls::ClientConfig {
        client_config_trusting(self.ca_pem.as_bytes())
    }

    /// A fresh certificate for `127.0.0.1` and `localhost`.
    pub fn new() -> Self {
        let certified =
            rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
                .unwrap();
        let ca_pem = certified.cert.pem();
        Self {
            cert: TempFile::with("cert", "pem", &ca_pem),
            key: TempFile::with("key", "pem", &certified.signing_key.serialize_pem()),
            ca_pem,
        }
    }
}

impl Default for Tls {
    fn default() -> Self {
        Self::new()
    }
}

/// A running `tierd run`.
pub struct Tierd {
    child: Child,
    /// Where it serves the webhook.
    pub addr: SocketAddr,
    /// Where it serves `/livez` and `/readyz` (plain HTTP).
    pub probe_addr: SocketAddr,
    /// Where it serves `/metrics`.
    pub metrics_addr: SocketAddr,
    /// Whether it serves HTTPS, with this CA.
    ca_pem: Option<String>,
    logs: Arc<Mutex<Vec<String>>>,
    /// When the process was spawned.
    pub started: Instant,
    /// The addresses of the ports that serve so far: webhook, probes, metrics.
    addrs: watch::Receiver<[Option<SocketAddr>; 3]>,
}

impl Tierd {
    /// Starts `tierd run` with its three ports on 127.0.0.1:0 and `--log-format json <extra>`
    /// against `cluster`.
    pub async fn run(cluster: &Cluster, tls: Option<&Tls>, extra: &[&str]) -> Self {
        Self::run_with(cluster, tls, extra, Some(USER)).await
    }

    /// [`run`](Self::run) with `--controller-user` set to `controller_user`, or not at all.
    pub async fn run_with(
        cluster: &Cluster,
        tls: Option<&Tls>,
        extra: &[&str],
        controller_user: Option<&str>,
    ) -> Self {
        Self::run_on(&cluster.kubeconfig.0, tls, extra, controller_user).await
    }

    /// [`run_with`](Self::run_with) on a kubeconfig file (whose API server may not be up).
    /// Panics with its log if tierd exits before it serves on all three ports.
    pub async fn run_on(
        kubeconfig: &std::path::Path,
        tls: Option<&Tls>,
        extra: &[&str],
        controller_user: Option<&str>,
    ) -> Self {
        let mut tierd = Self::probes_first(kubeconfig, tls, extra, controller_user).await;
        tierd.until_serving().await;
        tierd
    }

    /// Starts tierd like [`run_on`](Self::run_on) but returns once its probe port serves
    /// (the webhook and metrics ports may wait, e.g. for a self-signed certificate); their
    /// addresses are unspecified until [`until_serving`](Self::until_serving).
    pub async fn probes_first(
        kubeconfig: &std::path::Path,
        tls: Option<&Tls>,
        extra: &[&str],
        controller_user: Option<&str>,
    ) -> Self {
        let mut command = Command::new(tierd_binary());
        command.args(["run", "--webhook-listen", "127.0.0.1:0"]);
        if let Some(user) = controller_user {
            command.args(["--controller-user", user]);
        }
        let mut tierd = Self::spawn(command, kubeconfig, tls, extra);
        tierd.probe_addr = tierd.until_serves(|addrs| addrs[1].is_some()).await[1].unwrap();
        tierd
    }

    /// Starts `tierd run --controller calico` (no webhook port: `--webhook-listen ""`) with its
    /// probe and metrics ports on 127.0.0.1:0 and `--log-format json <extra>` against
    /// `cluster`; returns once both serve. [`addr`](Self::addr) stays unspecified.
    pub async fn run_calico(cluster: &Cluster, extra: &[&str]) -> Self {
        let mut command = Command::new(tierd_binary());
        command.args(["run", "--controller", "calico", "--webhook-listen", ""]);
        let mut tierd = Self::spawn(command, &cluster.kubeconfig.0, None, extra);
        let [_, probe_addr, metrics_addr] = tierd
            .until_serves(|addrs| addrs[1].is_some() && addrs[2].is_some())
            .await;
        tierd.probe_addr = probe_addr.unwrap();
        tierd.metrics_addr = metrics_addr.unwrap();
        tierd
    }

    /// Spawns `command` (`tierd run` with flags and environment of the caller's choosing, e.g.
    /// a rendered Deployment's: [`real`]) with the probe and metrics ports on 127.0.0.1:0,
    /// `--log-format json`, `--kubeconfig kubeconfig` and `extra`; returns once the probe and
    /// metrics ports serve, and the webhook port too when `webhook` is true.
    pub async fn start(
        command: Command,
        kubeconfig: &std::path::Path,
        extra: &[&str],
        webhook: bool,
    ) -> Self {
        let mut tierd = Self::spawn(command, kubeconfig, None, extra);
        let addrs = tierd
            .until_serves(|addrs| {
                addrs[1].is_some() && addrs[2].is_some() && (!webhook || addrs[0].is_some())
            })
            .await;
        if let Some(addr) = addrs[0] {
            tierd.addr = addr;
        }
        tierd.probe_addr = addrs[1].unwrap();
        tierd.metrics_addr = addrs[2].unwrap();
        tierd
    }

    /// Spawns `command` (`tierd run` and its controller's flags) with the probe and metrics
    /// ports on 127.0.0.1:0, JSON logs read into [`logs`](Self::logs), `--kubeconfig
    /// kubeconfig`, `extra` and, with `tls`, its files.
    fn spawn(
        mut command: Command,
        kubeconfig: &std::path::Path,
        tls: Option<&Tls>,
        extra: &[&str],
    ) -> Self {
        command
            .args(["--probe-listen", "127.0.0.1:0"])
            .args(["--metrics-listen", "127.0.0.1:0"])
            .args(["--log-format", "json"])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(tls) = tls {
            command
                .arg("--tls-cert")
                .arg(&tls.cert.0)
                .arg("--tls-key")
                .arg(&tls.key.0);
        }
        let started = Instant::now();
        let mut child = command.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let logs: Arc<Mutex<Vec<String>>> = Arc::default();
        let (addr_tx, addr_rx) = watch::channel([None::<SocketAddr>; 3]);
        let lines = logs.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if let Ok(json) = serde_json::from_str::<Value>(&line) {
                    let fields = &json["fields"];
                    if fields["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("serving"))
                        && let Some(addr) = fields["addr"].as_str().and_then(|a| a.parse().ok())
                    {
                        let port = match fields["server"].as_str() {
                            Some("webhook") => 0,
                            Some("probes") => 1,
                            Some("metrics") => 2,
                            _ => continue,
                        };
                        addr_tx.send_modify(|addrs| addrs[port] = Some(addr));
                    }
                }
                lines.lock().unwrap().push(line);
            }
        });
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        Self {
            child,
            addr: unspecified,
            probe_addr: unspecified,
            metrics_addr: unspecified,
            ca_pem: tls.map(|t| t.ca_pem.clone()),
            logs,
            started,
            addrs: addr_rx,
        }
    }

    /// Waits (within [`PATIENCE`]) until all three ports serve and records their addresses.
    /// Panics with the log if tierd exits first.
    pub async fn until_serving(&mut self) {
        let [addr, probe_addr, metrics_addr] = self
            .until_serves(|addrs| addrs.iter().all(Option::is_some))
            .await
            .map(Option::unwrap);
        (self.addr, self.probe_addr, self.metrics_addr) = (addr, probe_addr, metrics_addr);
    }

    async fn until_serves(
        &mut self,
        done: impl Fn(&[Option<SocketAddr>; 3]) -> bool,
    ) -> [Option<SocketAddr>; 3] {
        let mut addrs = self.addrs.clone();
        let serving = tokio::time::timeout(PATIENCE, async {
            tokio::select! {
                // The log closes (Err) when the process exits: then wait for its status.
                addrs = addrs.wait_for(|a| done(a)) => addrs.map(|a| *a).map_err(|_| None),
                status = self.child.wait() => Err(Some(status.unwrap())),
            }
        })
        .await
        .unwrap_or_else(|_| panic!("tierd did not start serving: {:?}", self.logs()));
        let serving = match serving {
            Err(None) => Err(tokio::time::timeout(PATIENCE, self.child.wait())
                .await
                .unwrap()
                .unwrap()),
            Err(Some(status)) => Err(status),
            Ok(addrs) => Ok(addrs),
        };
        match serving {
            Ok(addrs) => addrs,
            Err(status) => {
                // Let the log reader catch up with what the process wrote before it exited.
                tokio::time::sleep(Duration::from_millis(100)).await;
                panic!("tierd exited ({status}) before serving: {:?}", self.logs())
            }
        }
    }

    /// The base URL of its webhook server.
    pub fn url(&self) -> String {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// Everything it logged so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// GETs `path` from the port that serves it (probes, metrics or webhook): status code and
    /// body.
    pub async fn get(&self, path: &str) -> (u16, String) {
        if path.starts_with("/livez") || path.starts_with("/readyz") {
            get(&format!("http://{}{path}", self.probe_addr), None).await
        } else if path.starts_with("/metrics") {
            get(&format!("http://{}{path}", self.metrics_addr), None).await
        } else {
            get(&format!("{}{path}", self.url()), self.ca_pem.as_deref()).await
        }
    }

    /// Makes this tierd (started with `tls`) `cluster`'s Tier webhook, reached only while its
    /// `/readyz` on the probe port answers 200 (kube-apiserver reaches only Ready pods), and
    /// waits until Antrea's Tiers exist: tierd's own creates went through its own webhook.
    pub async fn serve_as_webhook(&self, cluster: &Cluster, tls: &Tls) {
        let webhook = WebhookConfig::new(format!("{}/validate/tier", self.url()))
            .ca_pem(tls.ca_pem.clone())
            .ready_url(format!("http://{}/readyz", self.probe_addr));
        cluster
            .server
            .set_admission(AdmissionMode::Webhook(webhook))
            .unwrap();
        assert!(
            cluster.eventually(Cluster::has_antrea_tiers).await,
            "{:?}",
            self.logs()
        );
    }

    /// Polls `path` until it answers 200; the time since the process started.
    pub async fn until_ok(&self, path: &str) -> Duration {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if self.get(path).await.0 == 200 {
                return self.started.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "{path} never answered 200: {:?}",
                self.get(&format!("{path}?verbose")).await
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The exit status, if the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or_default()
    }

    /// Sends SIGTERM.
    pub async fn terminate(&self) {
        let pid = self.child.id().unwrap();
        let status = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit (at most `limit`).
    pub async fn wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(limit, self.child.wait())
            .await
            .ok()
            .map(Result::unwrap)
    }
}

/// POSTs `body` as JSON to `url` (plain HTTP) with a bearer `token`: status code and body.
pub async fn post_json(url: &str, token: &str, body: &Value) -> (u16, String) {
    send_json("POST", url, token, body).await
}

/// PUTs the stored Tier `name` with its priority set to `priority`, as the user of `token`.
pub async fn put_priority(
    cluster: &Cluster,
    token: &str,
    name: &str,
    priority: i64,
) -> (u16, String) {
    let mut object = cluster.server.store().get(name).unwrap();
    object["spec"]["priority"] = priority.into();
    let url = format!(
        "{}/apis/crd.antrea.io/v1beta1/tiers/{name}",
        cluster.server.url()
    );
    send_json("PUT", &url, token, &object).await
}

/// Sends `body` as JSON with `method` to `url` over HTTP, as the user of `token`.
async fn send_json(method: &str, url: &str, token: &str, body: &Value) -> (u16, String) {
    use http_body_util::Full;

    let request = hyper::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    send(request).await
}

/// DELETEs `url` (plain HTTP) with a bearer `token`: status code and body.
pub async fn delete(url: &str, token: &str) -> (u16, String) {
    use http_body_util::Full;

    let request = hyper::Request::delete(url)
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    send(request).await
}

/// Sends `request` over plain HTTP within 10 s: status code and body.
async fn send(request: hyper::Request<http_body_util::Full<Bytes>>) -> (u16, String) {
    use http_body_util::Full;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let response = tokio::time::timeout(Duration::from_secs(10), client.request(request))
        .await
        .unwrap()
        .unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// GETs `url` over HTTP, or HTTPS trusting `ca_pem`.
pub async fn get(url: &str, ca_pem: Option<&str>) -> (u16, String) {
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let mut roots = rustls::RootCertStore::empty();
    if let Some(pem) = ca_pem {
        for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    let response = tokio::time::timeout(Duration::from_secs(5), client.get(url.parse().unwrap()))
        .await
        .unwrap();
    match response {
        Ok(response) => {
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        }
        Err(e) => (0, e.to_string()),
    }
}
