//! A real control plane for tests: kube-apiserver and etcd (and, on request,
//! kube-controller-manager), built from the Go module in
//! `testing/control-plane` on first use ([`binaries()`]), started on loopback ports with fresh
//! certificates, and torn down on drop.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tier_testcluster::Error> {
//! let cluster = tier_testcluster::TestCluster::start().await?;
//! cluster.apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n").await?;
//! let token = cluster.token("kube-system", "tierd").await?;
//! let kubeconfig = cluster.write_token_kubeconfig("tierd", &token)?;
//! # let _ = (kubeconfig, cluster.client());
//! # Ok(()) }
//! ```
//!
//! # What runs
//!
//! As controller-runtime's envtest runs it: etcd with `--unsafe-no-fsync` and a data dir in
//! the run directory; kube-apiserver with RBAC authorization (`--authorization-mode=RBAC`),
//! client certificates (`--client-ca-file`), a ServiceAccount issuer and signing key (so
//! TokenRequest works), `--advertise-address=127.0.0.1` with `--endpoint-reconciler-type=none`
//! (1.37 refuses a loopback address to its endpoint reconciler) and the ServiceAccount
//! admission plugin off (no controller-manager creates `default` ServiceAccounts). No
//! scheduler or kubelet: Deployments are stored but never run. kube-controller-manager runs
//! only with the controllers a test names ([`Options::controllers`]); without it garbage
//! collection and namespace deletion do not happen and no ValidatingAdmissionPolicy is
//! type-checked. The admin is a client certificate with O `system:masters`
//! ([`TestCluster::client`], [`TestCluster::kubeconfig`]).
//!
//! kube-apiserver's traffic to the cluster (a webhook's `service` reference, dialled at the
//! Service's ClusterIP) goes through an egress proxy of this crate ([`egress`]), where a test
//! routes a Service to a local process ([`TestCluster::route_service`]): a shipped
//! ValidatingWebhookConfiguration works unchanged, its TLS name `<service>.<namespace>.svc`
//! included.
//!
//! Ports are taken from the kernel (bind `127.0.0.1:0`, then closed) and handed to the
//! processes; if one was taken in between, the start is retried on new ports (at most
//! [`START_ATTEMPTS`] times).
//!
//! # Isolation: one API server per test
//!
//! Tiers are cluster-scoped and tierd ensures fixed names, so two tierd tests cannot share an
//! API server without stepping on each other; namespaces do not help. Each [`TestCluster`] is
//! therefore a whole control plane of its own: one etcd and one kube-apiserver. Measured on
//! the 2-core machine this project's CI uses (kube-apiserver v1.37.2, etcd v3.7.0, while other
//! builds kept the load average near 12): a start takes 9 s of wall time but only about 4.5 s
//! of CPU (kube-apiserver 3.7 s, etcd 0.7 s); a running pair holds about 330 MB resident
//! (kube-apiserver 290 MB, etcd 42 MB) and idles at about 2.5 % of one core. A second
//! kube-apiserver on a shared etcd (distinct `--etcd-prefix`, as k/k's test servers do) would
//! save only etcd's share, about 15 %, at the price of a process that outlives the test that
//! started it; so each cluster has its own. The cost is the start, not the running: tests
//! that need nothing fresh may share one cluster within a test, never across tests.
//!
//! Clusters of one process run at most [`max_parallel`] at a time (`TIER_TESTCLUSTER_PARALLEL`,
//! default: the number of CPUs, as the test harness's `--test-threads`); [`TestCluster::start`]
//! waits for a slot, so a machine with little memory can lower it.
//!
//! # Leftovers
//!
//! Each cluster's run directory (`$TMPDIR/tier-testcluster/<pid>-<n>`) records its owner and
//! its children's pids. Drop kills the children (SIGKILL) and removes the directory. A test
//! process that is itself killed cannot do that, so every start first ends the processes of
//! run directories whose owner is gone ([`process::reap_orphans`]).
#![forbid(unsafe_code)]

pub mod binaries;
pub mod egress;
pub mod pki;
pub mod process;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::{Api, Client};
use tokio::sync::{Semaphore, SemaphorePermit};

pub use binaries::{Binaries, binaries};

/// How many times a start is tried on fresh ports when a port was taken in between.
pub const START_ATTEMPTS: usize = 3;

/// How long kube-apiserver may take to answer `/readyz` (envtest allows 20 s; contended CI
/// machines took 31 to 35 s, k/k#137743). `TIER_TESTCLUSTER_START_TIMEOUT` (seconds) overrides.
pub const START_TIMEOUT: Duration = Duration::from_secs(90);

/// The field manager [`TestCluster::apply`] applies as.
pub const FIELD_MANAGER: &str = "tier-testcluster";

/// The lifetime asked for the tokens [`TestCluster::token`] returns (kube-apiserver refuses
/// less than 10 minutes).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);

/// Starting, running or talking to the control plane failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `go` is not on PATH, so the control plane cannot be built.
    #[error(
        "cannot build kube-apiserver and etcd: `go` is not on PATH. The tests against a real API \
         server need Go 1.26 or newer (https://go.dev/dl/) and the Go module proxy, or set \
         TIER_TESTCLUSTER_BIN to a directory holding prebuilt kube-apiserver and etcd"
    )]
    GoMissing,
    /// Building the control plane failed.
    #[error("cannot build the control plane: {0}")]
    Build(String),
    /// A file or process operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file, directory or program.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// rcgen failed.
    #[error("cannot generate a certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// etcd or kube-apiserver exited.
    #[error("{process} exited ({status}); its log {log}) ends with:\n{tail}")]
    Exited {
        /// `etcd` or `kube-apiserver`.
        process: &'static str,
        /// Its exit status.
        status: String,
        /// Its log file (removed with the run directory).
        log: PathBuf,
        /// The end of its log.
        tail: String,
    },
    /// kube-apiserver did not become ready in time.
    #[error(
        "kube-apiserver was not ready after {waited:?} (last /readyz: {last}); its log ends with:\n{tail}"
    )]
    NotReady {
        /// How long it was waited for.
        waited: Duration,
        /// The last answer or error of `/readyz`.
        last: String,
        /// The end of its log.
        tail: String,
    },
    /// A kubeconfig could not be used.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// An API call failed.
    #[error("{what}: {source}")]
    Api {
        /// What was attempted.
        what: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// A manifest could not be applied.
    #[error("cannot apply {0}")]
    Manifest(String),
}

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            source,
        }
    }

    fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| Self::Api { what, source }
    }
}

/// How many clusters one process runs at a time (`TIER_TESTCLUSTER_PARALLEL`, default the
/// number of CPUs); each holds about 330 MB.
pub fn max_parallel() -> usize {
    std::env::var("TIER_TESTCLUSTER_PARALLEL")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from))
}

fn slots() -> &'static Semaphore {
    static SLOTS: std::sync::OnceLock<Semaphore> = std::sync::OnceLock::new();
    SLOTS.get_or_init(|| Semaphore::new(max_parallel()))
}

/// What to start beyond the defaults.
#[derive(Clone, Debug, Default)]
pub struct Options {
    apiserver_args: Vec<String>,
    files: Vec<(String, String)>,
    controllers: Vec<String>,
}

impl Options {
    /// Adds `arg` (e.g. `--etcd-compaction-interval=0`) to kube-apiserver's command line, after
    /// the defaults (a later flag wins). `{dir}` in it is replaced by the run directory.
    #[must_use]
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// Also runs kube-controller-manager with only `controllers` (its `--controllers` names,
    /// e.g. `validatingadmissionpolicy-status-controller`, which fills a
    /// ValidatingAdmissionPolicy's `status.typeChecking`), as the admin, once kube-apiserver is
    /// ready. Without it no controller runs (no type checking, garbage collection, namespace
    /// deletion or default ServiceAccounts).
    #[must_use]
    pub fn controllers<S: Into<String>>(
        mut self,
        controllers: impl IntoIterator<Item = S>,
    ) -> Self {
        self.controllers
            .extend(controllers.into_iter().map(Into::into));
        self
    }

    /// Writes `contents` to `<run directory>/<name>` before kube-apiserver starts, e.g. an
    /// `AdmissionConfiguration` named by `--admission-control-config-file={dir}/<name>`.
    /// `{dir}` in `contents` is replaced by the run directory too.
    #[must_use]
    pub fn file(mut self, name: impl Into<String>, contents: impl Into<String>) -> Self {
        self.files.push((name.into(), contents.into()));
        self
    }
}

/// A running control plane (etcd and kube-apiserver) of its own; stopped and removed on drop.
pub struct TestCluster {
    // Dropped in this order: the controller-manager, kube-apiserver, etcd, the egress proxy,
    // then the directory.
    controller_manager: Option<process::Process>,
    apiserver: process::Process,
    etcd: process::Process,
    egress: egress::Egress,
    client: Client,
    url: String,
    pki: pki::Files,
    kubeconfig: PathBuf,
    started_in: Duration,
    binaries: Binaries,
    dir: tempfile::TempDir,
    _slot: SemaphorePermit<'static>,
}

impl std::fmt::Debug for TestCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCluster")
            .field("url", &self.url)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

fn free_port() -> Result<u16, Error> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io(Path::new("127.0.0.1:0"), e))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::io(Path::new("127.0.0.1:0"), e))?
        .port();
    Ok(port)
}

fn start_timeout() -> Duration {
    std::env::var("TIER_TESTCLUSTER_START_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(START_TIMEOUT, Duration::from_secs)
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

impl TestCluster {
    /// Starts a control plane with the defaults; see the [crate docs](crate).
    ///
    /// # Errors
    ///
    /// When the binaries cannot be built, a process exits or kube-apiserver is not ready within
    /// [`START_TIMEOUT`]; the error holds the end of the log.
    pub async fn start() -> Result<Self, Error> {
        Self::start_with(Options::default()).await
    }

    /// Starts a control plane with `options`.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_with(options: Options) -> Result<Self, Error> {
        let binaries = tokio::task::spawn_blocking(binaries::binaries)
            .await
            .map_err(|e| Error::Build(format!("the build task failed: {e}")))??;
        let slot = slots()
            .acquire()
            .await
            .map_err(|e| Error::Build(format!("no slot: {e}")))?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::start_once(&binaries, &options).await {
                Ok(parts) => return Ok(parts.finish(binaries, slot)),
                Err(Error::Exited { tail, .. })
                    if attempt < START_ATTEMPTS && tail.contains("address already in use") => {}
                Err(e) => return Err(e),
            }
        }
    }

    async fn start_once(binaries: &Binaries, options: &Options) -> Result<Parts, Error> {
        let started = Instant::now();
        static REAPED: std::sync::Once = std::sync::Once::new();
        REAPED.call_once(process::reap_orphans);
        let root = process::runs_root();
        std::fs::create_dir_all(&root).map_err(|e| Error::io(&root, e))?;
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = tempfile::Builder::new()
            .prefix(&format!(
                "{}-{}-",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ))
            .tempdir_in(&root)
            .map_err(|e| Error::io(&root, e))?;
        let run = dir.path().to_owned();
        let owner = run.join("owner");
        std::fs::write(&owner, std::process::id().to_string()).map_err(|e| Error::io(&owner, e))?;
        let pki = pki::Files::write(&run)?;
        for (name, contents) in &options.files {
            let path = run.join(name);
            std::fs::write(&path, contents.replace("{dir}", &run.display().to_string()))
                .map_err(|e| Error::io(&path, e))?;
        }

        let egress = egress::Egress::start(&run.join("egress.sock"))?;
        let egress_config = run.join("egress.yaml");
        std::fs::write(&egress_config, egress.configuration())
            .map_err(|e| Error::io(&egress_config, e))?;

        let (etcd_port, peer_port, port) = (free_port()?, free_port()?, free_port()?);
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let etcd_args = vec![
            format!("--data-dir={}", run.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
            "--unsafe-no-fsync=true".to_owned(),
            "--log-level=warn".to_owned(),
        ];
        let mut etcd = process::Process::spawn("etcd", &binaries.etcd, &etcd_args, &run)?;

        let url = format!("https://127.0.0.1:{port}");
        let dir_text = run.display().to_string();
        let mut args = vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--cert-dir={}", run.join("cert").display()),
            format!("--tls-cert-file={}", pki.serving_cert.display()),
            format!("--tls-private-key-file={}", pki.serving_key.display()),
            format!("--secure-port={port}"),
            "--bind-address=127.0.0.1".to_owned(),
            "--advertise-address=127.0.0.1".to_owned(),
            // 1.37 refuses a loopback advertise address with the endpoint reconciler ("may not
            // be in the loopback range"); nothing here needs the `kubernetes` Endpoints.
            "--endpoint-reconciler-type=none".to_owned(),
            "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
            "--allow-privileged=true".to_owned(),
            "--authorization-mode=RBAC".to_owned(),
            "--disable-admission-plugins=ServiceAccount".to_owned(),
            format!("--client-ca-file={}", pki.client_ca_file.display()),
            format!("--service-account-issuer={url}/"),
            format!("--service-account-key-file={}", pki.sa_public.display()),
            format!(
                "--service-account-signing-key-file={}",
                pki.sa_private.display()
            ),
            "--profiling=false".to_owned(),
            format!("--egress-selector-config-file={}", egress_config.display()),
        ];
        args.extend(
            options
                .apiserver_args
                .iter()
                .map(|a| a.replace("{dir}", &dir_text)),
        );
        let mut apiserver =
            process::Process::spawn("kube-apiserver", &binaries.kube_apiserver, &args, &run)?;

        let kubeconfig_yaml = kubeconfig_yaml(
            &url,
            &pki.serving_ca.cert_pem,
            "admin",
            &User::Certificate(&pki.admin),
        );
        let kubeconfig = run.join("admin.kubeconfig");
        std::fs::write(&kubeconfig, &kubeconfig_yaml).map_err(|e| Error::io(&kubeconfig, e))?;
        let client = client_from(&kubeconfig_yaml).await?;

        let timeout = start_timeout();
        let mut last;
        loop {
            etcd.check_running()?;
            apiserver.check_running()?;
            let request = http::Request::get("/readyz").body(Vec::new());
            let Ok(request) = request else {
                return Err(Error::Kubeconfig(
                    "cannot build a /readyz request".to_owned(),
                ));
            };
            match tokio::time::timeout(Duration::from_secs(5), client.request_text(request)).await {
                Ok(Ok(body)) if body.trim() == "ok" => break,
                Ok(Ok(body)) => last = body,
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = "no answer within 5 s".to_owned(),
            }
            if started.elapsed() > timeout {
                return Err(Error::NotReady {
                    waited: started.elapsed(),
                    last,
                    tail: apiserver.log_tail(30),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let controller_manager = if options.controllers.is_empty() {
            None
        } else {
            let args = vec![
                format!("--kubeconfig={}", kubeconfig.display()),
                format!("--controllers={}", options.controllers.join(",")),
                "--leader-elect=false".to_owned(),
                "--secure-port=0".to_owned(),
            ];
            Some(process::Process::spawn(
                "kube-controller-manager",
                &binaries.kube_controller_manager,
                &args,
                &run,
            )?)
        };
        Ok(Parts {
            controller_manager,
            apiserver,
            etcd,
            egress,
            client,
            url,
            pki,
            kubeconfig,
            started_in: started.elapsed(),
            dir,
        })
    }

    /// An admin client (client certificate, O `system:masters`: RBAC and API Priority and
    /// Fairness do not apply to it).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The API server's URL, `https://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The CA (PEM) the API server's serving certificate chains to.
    pub fn ca_pem(&self) -> &str {
        &self.pki.serving_ca.cert_pem
    }

    /// The admin kubeconfig file (certificates embedded; removed with the cluster).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The admin kubeconfig's text.
    pub fn admin_kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(
            &self.url,
            self.ca_pem(),
            "admin",
            &User::Certificate(&self.pki.admin),
        )
    }

    /// The run directory (certificates, logs, etcd's data); removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// kube-apiserver's log file.
    pub fn apiserver_log(&self) -> &Path {
        self.apiserver.log()
    }

    /// The end of kube-apiserver's log, for a failing test's message.
    pub fn apiserver_log_tail(&self, lines: usize) -> String {
        self.apiserver.log_tail(lines)
    }

    /// The end of kube-controller-manager's log; empty when it does not run.
    pub fn controller_manager_log_tail(&self, lines: usize) -> String {
        self.controller_manager
            .as_ref()
            .map(|p| p.log_tail(lines))
            .unwrap_or_default()
    }

    /// kube-apiserver's process id (e.g. to measure its memory).
    pub fn apiserver_pid(&self) -> u32 {
        self.apiserver.pid()
    }

    /// etcd's process id.
    pub fn etcd_pid(&self) -> u32 {
        self.etcd.pid()
    }

    /// How long the start took, from spawning etcd to `/readyz` answering `ok`.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The binaries this cluster runs.
    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// The client CA, to sign further client certificates kube-apiserver accepts (a user `name`
    /// in `groups`).
    ///
    /// # Errors
    ///
    /// [`Error::Certificate`] when rcgen fails.
    pub fn client_certificate(&self, name: &str, groups: &[&str]) -> Result<pki::Pair, Error> {
        self.pki.client_ca.client(name, groups)
    }

    /// Creates `namespace` unless it exists.
    ///
    /// # Errors
    ///
    /// [`Error::Api`] when the create fails otherwise than with 409.
    pub async fn ensure_namespace(&self, namespace: &str) -> Result<(), Error> {
        let api: Api<Namespace> = Api::all(self.client());
        let object = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(namespace.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(e) => Err(Error::api(format!("create Namespace {namespace}"))(e)),
        }
    }

    /// A token of the ServiceAccount `namespace/name` through TokenRequest (valid
    /// [`TOKEN_LIFETIME`]), creating the namespace and the account if needed. It authenticates
    /// as `system:serviceaccount:<namespace>:<name>` and holds only what RBAC grants it.
    ///
    /// # Errors
    ///
    /// [`Error::Api`] when a call fails.
    pub async fn token(&self, namespace: &str, name: &str) -> Result<String, Error> {
        self.ensure_namespace(namespace).await?;
        let api: Api<ServiceAccount> = Api::namespaced(self.client(), namespace);
        let account = ServiceAccount {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &account).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => {
                return Err(Error::api(format!(
                    "create ServiceAccount {namespace}/{name}"
                ))(e));
            }
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: i64::try_from(TOKEN_LIFETIME.as_secs()).ok(),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = api
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .map_err(Error::api(format!(
                "TokenRequest for ServiceAccount {namespace}/{name}"
            )))?;
        answer
            .status
            .map(|s| s.token)
            .ok_or_else(|| Error::Kubeconfig("TokenRequest answered without a token".to_owned()))
    }

    /// A kubeconfig text for this API server authenticating with `token` as `user`.
    pub fn token_kubeconfig_yaml(&self, user: &str, token: &str) -> String {
        kubeconfig_yaml(&self.url, self.ca_pem(), user, &User::Token(token))
    }

    /// Writes [`token_kubeconfig_yaml`](Self::token_kubeconfig_yaml) to a new file in the run
    /// directory and returns its path.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when it cannot be written.
    pub fn write_token_kubeconfig(&self, user: &str, token: &str) -> Result<PathBuf, Error> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = self.dir().join(format!(
            "{}-{}.kubeconfig",
            user.replace(|c: char| !c.is_ascii_alphanumeric(), "-"),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, self.token_kubeconfig_yaml(user, token))
            .map_err(|e| Error::io(&path, e))?;
        Ok(path)
    }

    /// A client authenticating with `token` (e.g. from [`token`](Self::token)).
    ///
    /// # Errors
    ///
    /// [`Error::Kubeconfig`] when kube cannot build it.
    pub async fn token_client(&self, token: &str) -> Result<Client, Error> {
        client_from(&self.token_kubeconfig_yaml("token", token)).await
    }

    /// Applies every document of `yaml` server-side as [`FIELD_MANAGER`], forcing conflicts (as
    /// `kubectl apply --server-side --force-conflicts`), in order; returns what the server
    /// stored. A document whose kind is not served yet (a custom resource right after its CRD)
    /// is retried until it is, for up to 30 s. Namespaced objects without a namespace go to
    /// `default`.
    ///
    /// # Errors
    ///
    /// [`Error::Manifest`] for a document that is not an object with `apiVersion` and `kind`,
    /// [`Error::Api`] when the server refuses one (the ones before it stay applied).
    pub async fn apply(&self, yaml: &str) -> Result<Vec<DynamicObject>, Error> {
        self.apply_as(yaml, FIELD_MANAGER, true).await
    }

    /// [`apply`](Self::apply) as the field manager `manager`, forcing conflicts or not.
    ///
    /// # Errors
    ///
    /// As [`apply`](Self::apply); without `force`, a conflict is an [`Error::Api`] with 409.
    pub async fn apply_as(
        &self,
        yaml: &str,
        manager: &str,
        force: bool,
    ) -> Result<Vec<DynamicObject>, Error> {
        let mut params = PatchParams::apply(manager);
        params.force = force;
        let mut applied = Vec::new();
        for document in serde_yaml::Deserializer::from_str(yaml) {
            let value = <serde_json::Value as serde::Deserialize>::deserialize(document)
                .map_err(|e| Error::Manifest(format!("a document that is not YAML: {e}")))?;
            if value.is_null() {
                continue;
            }
            let object: DynamicObject = serde_json::from_value(value)
                .map_err(|e| Error::Manifest(format!("a document that is not an object: {e}")))?;
            let types = object.types.clone().ok_or_else(|| {
                Error::Manifest(format!("{:?}: no apiVersion or kind", object.metadata.name))
            })?;
            let name = object
                .metadata
                .name
                .clone()
                .ok_or_else(|| Error::Manifest(format!("a {} without a name", types.kind)))?;
            let gvk = GroupVersionKind::try_from(&types)
                .map_err(|e| Error::Manifest(format!("{} {name}: {e}", types.kind)))?;
            let what = format!("{} {name}", types.kind);
            let (resource, capabilities) = self.resolve(&gvk, &what).await?;
            let api: Api<DynamicObject> = match capabilities.scope {
                Scope::Cluster => Api::all_with(self.client(), &resource),
                Scope::Namespaced => Api::namespaced_with(
                    self.client(),
                    object.metadata.namespace.as_deref().unwrap_or("default"),
                    &resource,
                ),
            };
            let stored = api
                .patch(&name, &params, &Patch::Apply(&object))
                .await
                .map_err(Error::api(format!("apply {what}")))?;
            applied.push(stored);
        }
        Ok(applied)
    }

    async fn resolve(
        &self,
        gvk: &GroupVersionKind,
        what: &str,
    ) -> Result<
        (
            kube::discovery::ApiResource,
            kube::discovery::ApiCapabilities,
        ),
        Error,
    > {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match kube::discovery::pinned_kind(&self.client, gvk).await {
                Ok(found) => return Ok(found),
                Err(e) if Instant::now() > deadline => {
                    return Err(Error::api(format!("discover the kind of {what}"))(e));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// Sends kube-apiserver's connections to `target` (`host:port`) to `to`, through its egress
    /// proxy ([`egress`]).
    pub fn route(&self, target: impl Into<String>, to: std::net::SocketAddr) {
        self.egress.route(target, to);
    }

    /// Removes the route of `target`.
    pub fn unroute(&self, target: &str) {
        self.egress.unroute(target);
    }

    /// Routes the Service `namespace/name` (its ClusterIP and first port, where kube-apiserver
    /// calls a webhook with a `service` reference) to `to`; returns the routed `ip:port`.
    ///
    /// # Errors
    ///
    /// [`Error::Api`] when the Service cannot be read, [`Error::Manifest`] when it has no
    /// ClusterIP or port.
    pub async fn route_service(
        &self,
        namespace: &str,
        name: &str,
        to: std::net::SocketAddr,
    ) -> Result<String, Error> {
        let api: Api<k8s_openapi::api::core::v1::Service> =
            Api::namespaced(self.client(), namespace);
        let service = api
            .get(name)
            .await
            .map_err(Error::api(format!("get Service {namespace}/{name}")))?;
        let spec = service.spec.unwrap_or_default();
        let ip = spec.cluster_ip.filter(|ip| !ip.is_empty() && ip != "None");
        let port = spec.ports.unwrap_or_default().first().map(|p| p.port);
        let (Some(ip), Some(port)) = (ip, port) else {
            return Err(Error::Manifest(format!(
                "Service {namespace}/{name} has no ClusterIP or port to route"
            )));
        };
        let target = format!("{ip}:{port}");
        self.route(target.clone(), to);
        Ok(target)
    }

    /// `kubectl` with `--kubeconfig` set to the admin kubeconfig; `None` without `kubectl` on
    /// PATH.
    pub fn kubectl(&self) -> Option<std::process::Command> {
        let path = std::env::var_os("PATH")?;
        let kubectl = std::env::split_paths(&path)
            .map(|dir| dir.join("kubectl"))
            .find(|candidate| candidate.is_file())?;
        let mut command = std::process::Command::new(kubectl);
        command.arg("--kubeconfig").arg(&self.kubeconfig);
        Some(command)
    }
}

/// A started control plane before its slot and binaries are attached.
struct Parts {
    controller_manager: Option<process::Process>,
    apiserver: process::Process,
    etcd: process::Process,
    egress: egress::Egress,
    client: Client,
    url: String,
    pki: pki::Files,
    kubeconfig: PathBuf,
    started_in: Duration,
    dir: tempfile::TempDir,
}

impl Parts {
    fn finish(self, binaries: Binaries, slot: SemaphorePermit<'static>) -> TestCluster {
        TestCluster {
            controller_manager: self.controller_manager,
            apiserver: self.apiserver,
            etcd: self.etcd,
            egress: self.egress,
            client: self.client,
            url: self.url,
            pki: self.pki,
            kubeconfig: self.kubeconfig,
            started_in: self.started_in,
            binaries,
            dir: self.dir,
            _slot: slot,
        }
    }
}

/// How a kubeconfig's user authenticates.
enum User<'a> {
    Certificate(&'a pki::Pair),
    Token(&'a str),
}

fn kubeconfig_yaml(url: &str, ca_pem: &str, user: &str, auth: &User<'_>) -> String {
    let credentials = match auth {
        User::Certificate(pair) => serde_json::json!({
            "client-certificate-data": b64(&pair.cert_pem),
            "client-key-data": b64(&pair.key_pem),
        }),
        User::Token(token) => serde_json::json!({ "token": token }),
    };
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "tier-testcluster",
            "cluster": {"server": url, "certificate-authority-data": b64(ca_pem)},
        }],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{
            "name": "tier-testcluster",
            "context": {"cluster": "tier-testcluster", "user": user},
        }],
        "current-context": "tier-testcluster",
    });
    serde_yaml::to_string(&config).unwrap_or_default()
}

async fn client_from(yaml: &str) -> Result<Client, Error> {
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(yaml).map_err(|e| Error::Kubeconfig(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    Client::try_from(config).map_err(|e| Error::Kubeconfig(e.to_string()))
}
