//! The command line: `tierd run | ensure | plan | crd | demo`, and the flags they share.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tier_kube::calico::CalicoApi;

/// Exit codes. `run`, `ensure`, `crd` and `demo` share 0/1/2; `plan` follows `kubectl diff`.
pub mod exit {
    /// Success: converged, in sync, or printed.
    pub const OK: u8 = 0;
    /// A runtime error: the cluster could not be reached, or `ensure` timed out.
    pub const ERROR: u8 = 1;
    /// Bad input, for example an invalid `--tiers` file (nothing was sent to the API).
    pub const USAGE: u8 = 2;
    /// `plan`: changes are pending (as `kubectl diff` exits 1 when it finds differences).
    pub const PLAN_PENDING: u8 = 1;
    /// `plan`: any error, invalid input included (as `kubectl diff` exits above 1).
    pub const PLAN_ERROR: u8 = 2;
}

const EXIT_CODES: &str = "Exit codes: 0 success; 1 runtime error (API unreachable, timeout); \
                          2 invalid input such as a bad --tiers file. \
                          plan, like `kubectl diff`: 0 in sync; 1 changes pending; 2 on any error \
                          or invalid input.";

const PLAN_AFTER_HELP: &str = "\
Exit codes (as `kubectl diff`, so a pipeline can tell drift from a broken setup):
  0  every Tier is in sync
  1  changes are pending (a create or update, including one that would be refused)
  2  error or invalid input (bad --tiers file, API unreachable, Tier cache not synced)

-o json and -o yaml print a list with one record per desired Tier, in the order of the
desired set. The record is stable (fields are only added):
  name      the Tier's name
  desired   {priority, description}: the fields tierd ensures
  observed  {priority, description}, or null when the Tier is absent
  action    none | create | update: what `tierd ensure` would do
  reason    why, in words: which fields differ, or who would refuse the write
  blocked   {by, message} when the write would be refused (Antrea's admission rules), else null";

/// The version `--version` prints: the crate version, plus the git commit and build date when
/// `build.rs` could know them (e.g. `0.1.0 (commit f232372c1d0e, built 2026-12-01)`).
pub const LONG_VERSION: &str = env!("TIERD_LONG_VERSION");

/// tierd keeps a cluster's system Tiers (Antrea's six by default) present and correct.
#[derive(Debug, Parser)]
#[command(name = "tierd", version = LONG_VERSION, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// How to log: text lines for people, or one JSON object per line (filter with RUST_LOG).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "TIERD_LOG_FORMAT")]
    pub log_format: LogFormat,

    /// Threads that run tierd's tasks (the webhook's connections, the controller, the watches),
    /// instead of tokio's one per CPU of the node. One serves tens of thousands of reviews a
    /// second (docs/PERFORMANCE.md, 4b); the second keeps reviews moving while a TLS handshake
    /// (a millisecond or more with an RSA key) holds the first.
    #[arg(long, global = true, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64), env = "TIERD_WORKER_THREADS")]
    pub worker_threads: u16,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output formats. Filter with `RUST_LOG` (default: the command's level, with kube's
/// duplicate per-request lines off; see `logging.rs`). Colour only on a terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The commands.
#[derive(Debug, Subcommand)]
// Parsed once per process: the size of `Run`'s flags does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run the daemon: serve the probes, metrics and the Tier webhook at once (three ports),
    /// sync the Tier cache, ensure the system Tiers, then keep correcting drift until
    /// SIGTERM/SIGINT.
    #[command(
        after_help = "Exit codes: 0 after a clean shutdown; 1 on a runtime error; 2 on invalid input."
    )]
    Run(RunArgs),
    /// Ensure the system Tiers once and exit (for an init container or a Job).
    #[command(
        after_help = "Exit codes: 0 when every Tier converged; 1 on a runtime error or when \
                            --timeout passed (every Tier still pending or blocked is named, with \
                            why); 2 on invalid input."
    )]
    Ensure(EnsureArgs),
    /// Print what tierd would do (read-only: waits for the Tier cache, writes nothing).
    #[command(after_help = PLAN_AFTER_HELP)]
    Plan(PlanArgs),
    /// Print the Tier CustomResourceDefinition as YAML.
    #[command(after_help = "Exit codes: 0 printed; 1 on error.")]
    Crd,
    /// Run the real initializer on an in-memory cluster from a messy start, narrating it.
    #[command(after_help = "Exit codes: 0 when the demo converged; 1 otherwise.")]
    Demo(DemoArgs),
}

/// How to reach the cluster and what to ensure.
#[derive(Clone, Debug, Args)]
pub struct ClusterArgs {
    /// A kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// Use the in-cluster service account, ignoring kubeconfig files.
    #[arg(long, conflicts_with_all = ["kubeconfig", "context"])]
    pub in_cluster: bool,

    /// Whose Tiers to ensure: Antrea's (`tiers.crd.antrea.io`, its six system Tiers by
    /// default) or Calico's (`tiers.projectcalico.org`, its three built-in Tiers by default; no
    /// Tier webhook, so the webhook's flags are refused).
    #[arg(long, value_enum, value_name = "NAME", default_value_t = ControllerKind::Antrea, env = "TIERD_CONTROLLER")]
    pub controller: ControllerKind,

    /// With --controller calico: the group/version of Calico's Tier API,
    /// `projectcalico.org/v3` (what current installs serve) or `crd.projectcalico.org/v1`
    /// (the CRD storage, for clusters without the calico-apiserver).
    #[arg(
        long,
        value_name = "GROUP/VERSION",
        default_value = "projectcalico.org/v3",
        value_parser = parse_calico_api,
        env = "TIERD_CALICO_API"
    )]
    pub calico_api: CalicoApi,

    /// A YAML file of desired Tiers replacing the controller's defaults, in its fields (Antrea:
    /// name, priority, description; Calico: name, order, defaultAction), validated before any
    /// API call.
    #[arg(long, value_name = "FILE", env = "TIERD_TIERS")]
    pub tiers: Option<PathBuf>,

    /// The longest one API call may take: each Tier write, and `run`'s SelfSubjectReview.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub call_timeout: Duration,

    /// Antrea feature gates, as Antrea is configured: comma-separated `Name=bool`
    /// (`ClusterNetworkPolicy=true` reserves priority 220 for new Tiers). Default: all off; an
    /// unknown gate is invalid input (exit 2).
    #[arg(
        long,
        value_name = "NAME=BOOL,...",
        default_value = "",
        value_parser = FeatureGates::parse,
        env = "TIERD_FEATURE_GATES"
    )]
    pub feature_gates: FeatureGates,
}

/// The controllers whose Tiers tierd ensures (`--controller`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ControllerKind {
    /// Antrea's Tiers (`tiers.crd.antrea.io/v1beta1`).
    #[default]
    Antrea,
    /// Calico's Tiers (`tiers.projectcalico.org/v3`, or `--calico-api`).
    Calico,
}

/// Parses `--calico-api`.
fn parse_calico_api(text: &str) -> Result<CalicoApi, String> {
    text.parse()
        .map_err(|e: tier_kube::calico::UnknownCalicoApi| e.to_string())
}

/// Antrea's feature gates that change which Tiers may exist, parsed from `--feature-gates`
/// (Kubernetes' convention: comma-separated `Name=bool`, later entries win).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// `ClusterNetworkPolicy` (alpha in Antrea, off by default): priority 220 is reserved for
    /// the upstream ClusterNetworkPolicy API, so no new Tier may take it.
    pub cluster_network_policy: bool,
}

impl FeatureGates {
    /// The gates tierd knows.
    pub const KNOWN: &'static [&'static str] = &["ClusterNetworkPolicy"];

    /// Parses `Name=bool,Name=bool`; an unknown name or a value that is not a boolean
    /// (Go's `strconv.ParseBool`: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False) is an
    /// error naming it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut gates = Self::default();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((name, value)) = entry.split_once('=') else {
                return Err(format!(
                    "missing bool value for {entry:?}; write {entry}=true or {entry}=false"
                ));
            };
            let (name, value) = (name.trim(), value.trim());
            let enabled = match value {
                "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
                "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
                _ => {
                    return Err(format!(
                        "invalid value of {name}: {value:?}, expected true or false"
                    ));
                }
            };
            match name {
                "ClusterNetworkPolicy" => gates.cluster_network_policy = enabled,
                _ => {
                    return Err(format!(
                        "unrecognized feature gate: {name}; known gates: {}",
                        Self::KNOWN.join(", ")
                    ));
                }
            }
        }
        Ok(gates)
    }

    /// The validation rules (Antrea's defaults) with these gates applied.
    pub fn rules(self) -> tier_core::ValidationRules {
        tier_core::ValidationRules {
            cluster_network_policy: self.cluster_network_policy,
            ..tier_core::ValidationRules::default()
        }
    }
}

/// Flags of `tierd run`.
#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// Cluster and desired Tiers.
    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// Address of Antrea's Tier webhook server (`POST /validate/tier`; TLS when --tls-cert is
    /// given); default 0.0.0.0:9443. Empty (`--webhook-listen ""`): no webhook port at all, for
    /// installs where no ValidatingWebhookConfiguration calls tierd (beside Antrea). With
    /// --controller calico there is no webhook: only "" is accepted.
    #[arg(
        long = "webhook-listen",
        alias = "listen",
        value_name = "ADDR",
        value_parser = Listen::parse,
        env = "TIERD_WEBHOOK_LISTEN"
    )]
    pub listen: Option<Listen>,

    /// Address of the probe server (`/livez`, `/readyz`; plain HTTP, for the kubelet).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:8081",
        env = "TIERD_PROBE_LISTEN"
    )]
    pub probe_listen: SocketAddr,

    /// Address of the metrics server (`/metrics`). Localhost by default; to let Prometheus
    /// scrape it from another pod, listen on 0.0.0.0 with --metrics-auth.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:8080",
        env = "TIERD_METRICS_LISTEN"
    )]
    pub metrics_listen: SocketAddr,

    /// Protect /metrics as controller-runtime does: the scraper's bearer token must pass a
    /// TokenReview, and a SubjectAccessReview for `get /metrics` (results cached, see
    /// tier_server::auth). Requires --tls-cert: bearer tokens are never accepted over plain
    /// HTTP.
    #[arg(long, env = "TIERD_METRICS_AUTH")]
    pub metrics_auth: bool,

    /// Connection limits of every server.
    #[command(flatten)]
    pub http: HttpArgs,

    /// PEM certificate chain of the webhook port (and of the metrics port with --metrics-auth),
    /// reloaded when the file changes; without it every port speaks plain HTTP.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert, reloaded with it.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// PEM CA certificates: the webhook port then requires a client certificate chained to
    /// them and naming one of --client-names (kube-apiserver's, see docs/SECURITY.md); the file
    /// is reloaded when it changes. Probes and metrics are unaffected. Needs --tls-cert.
    #[arg(long, value_name = "FILE", env = "TIERD_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,

    /// The client names --client-ca admits: the client certificate's subject CN or one of its
    /// DNS SANs must be exactly one of them.
    #[arg(
        long,
        value_name = "NAME,...",
        value_delimiter = ',',
        default_value = "kube-apiserver",
        env = "TIERD_CLIENT_NAMES"
    )]
    pub client_names: Vec<String>,

    /// The user the webhook lets change Tier priorities. Default: whoever tierd's own client
    /// authenticates as (asked of the API server: SelfSubjectReview, Kubernetes 1.28+); set it
    /// on older servers, or to exempt another controller.
    #[arg(long, value_name = "USER", env = "TIERD_CONTROLLER_USER")]
    pub controller_user: Option<String>,

    /// This pod's name, reported as the instance in Kubernetes Events and, with a random
    /// suffix, tierd's identity in leader election (default there: $HOSTNAME).
    #[arg(long, value_name = "NAME", env = "POD_NAME")]
    pub pod_name: Option<String>,

    /// Leader election among the replicas.
    #[command(flatten)]
    pub leader_elect: LeaderElectArgs,

    /// Make /readyz also wait for the system Tiers. Off by default: kube-apiserver reaches the
    /// webhook only through Ready pods, so a single replica that waited for Tiers whose creation
    /// needs its own webhook would never become ready.
    #[arg(long)]
    pub ready_requires_tiers: bool,

    /// Self-signed serving certificate, as antrea-controller's.
    #[command(flatten)]
    pub self_signed: Box<SelfSignedArgs>,

    /// Priority claims across the webhook's replicas.
    #[command(flatten)]
    pub claims: ClaimArgs,
}

/// `--priority-claims`: one admission decision per priority across replicas.
#[derive(Clone, Debug, Args)]
pub struct ClaimArgs {
    /// Claim the priority of every Tier CREATE the webhook admits, and of every write of
    /// tierd's own, in a Lease all replicas share (`tierd-priority-claims` in
    /// --priority-claims-namespace), so that replicas behind one Service admit one Tier per
    /// priority. A claim that cannot be made refuses the create retryably (code 503). Needs
    /// get/update on that Lease and create on Leases there. Off by default: one replica needs
    /// none.
    #[arg(long, env = "TIERD_PRIORITY_CLAIMS")]
    pub priority_claims: bool,

    /// The namespace of the claims' Lease: tierd's own.
    #[arg(
        long,
        value_name = "NAMESPACE",
        default_value = "kube-system",
        env = "POD_NAMESPACE"
    )]
    pub priority_claims_namespace: String,

    /// The longest one claim may take, every request included; a claim not made by then
    /// refuses the create retryably. Above zero and under the claims' 10 s TTL; keep it well
    /// under the webhook's timeoutSeconds (5 in deploy/).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "2s",
        value_parser = parse_claim_timeout,
        env = "TIERD_PRIORITY_CLAIMS_TIMEOUT"
    )]
    pub priority_claims_timeout: Duration,
}

impl ClaimArgs {
    /// The claims' configuration the flags select, written by `holder` (the pod), if on.
    pub fn config(&self, holder: Option<&str>) -> Option<tier_kube::claims::ClaimsConfig> {
        self.priority_claims
            .then(|| tier_kube::claims::ClaimsConfig {
                deadline: self.priority_claims_timeout,
                ..tier_kube::claims::ClaimsConfig::new(
                    &self.priority_claims_namespace,
                    holder.unwrap_or("tierd"),
                )
            })
    }
}

/// Parses `--priority-claims-timeout`: above zero, under the claims' TTL.
fn parse_claim_timeout(text: &str) -> Result<Duration, String> {
    let timeout = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    let ttl = tier_core::admission::Reservations::DEFAULT_TTL;
    if timeout.is_zero() || timeout >= ttl {
        return Err(format!(
            "{text} is out of range: give more than 0 s and less than the claims' TTL ({ttl:?})"
        ));
    }
    Ok(timeout)
}

impl RunArgs {
    /// Every problem with how `run`'s flags combine, one line each saying why: a flag that
    /// needs the TLS files given without them, or half of the TLS pair. Checked after parsing
    /// rather than by clap's `requires`, whose refusal says neither why nor every flag at once.
    /// Flags in `removed` (refused outright, so the fix is to remove them) are not checked for
    /// what they need.
    pub fn combination_problems(&self, removed: &[&str]) -> Vec<String> {
        let kept = |flag: &str| !removed.contains(&flag);
        let mut problems = Vec::new();
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) if kept("--tls-cert") => {
                problems.push(
                    "--tls-cert needs --tls-key, the private key of that certificate".to_owned(),
                );
            }
            (None, Some(_)) if kept("--tls-key") => {
                problems.push(
                    "--tls-key needs --tls-cert, the certificate chain of that key".to_owned(),
                );
            }
            _ => {}
        }
        if self.tls_cert.is_none() && self.tls_key.is_none() {
            let needs_tls = [
                (
                    self.metrics_auth,
                    "--metrics-auth",
                    "/metrics would take bearer tokens, and tierd never accepts them over plain \
                     HTTP",
                ),
                (
                    self.self_signed.self_signed_cert,
                    "--self-signed-cert",
                    "they name the files it writes the certificate and key to",
                ),
                (
                    self.client_ca.is_some(),
                    "--client-ca",
                    "client certificates are asked for in the webhook port's TLS handshake",
                ),
            ];
            for (_, flag, why) in needs_tls.iter().filter(|(on, flag, _)| *on && kept(flag)) {
                problems.push(format!("{flag} needs --tls-cert and --tls-key: {why}"));
            }
        }
        problems
    }
}

/// The refusal of `problems` (one line each), or `None` without any: what `tierd run` prints
/// before it exits 2, having sent no request.
pub fn refusal(problems: &[String]) -> Option<String> {
    if problems.is_empty() {
        return None;
    }
    let mut message = format!(
        "the flags cannot be used as given ({} problem(s)); nothing was sent to the API server:",
        problems.len()
    );
    for problem in problems {
        message.push_str("\n  - ");
        message.push_str(problem);
    }
    Some(message)
}

/// `--leader-elect` and its timing, with kube-scheduler's names and defaults.
#[derive(Clone, Debug, Args)]
pub struct LeaderElectArgs {
    /// Elect one writer among the replicas by a Lease (coordination.k8s.io/v1, client-go's
    /// rules): only its holder writes Tiers, and it stops writing when it cannot renew within
    /// the renew deadline, before the Lease can expire for the others; released on SIGTERM.
    /// Every replica keeps its caches, serves the webhook, probes and metrics, and stays Ready.
    #[arg(long, env = "TIERD_LEADER_ELECT")]
    pub leader_elect: bool,

    /// How long a standby waits after the last change it saw of the Lease before it takes
    /// over (written to the Lease in whole seconds, rounded up).
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = humantime::parse_duration)]
    pub leader_elect_lease_duration: Duration,

    /// How long the leader may go without a renewal before it stops writing; shorter than
    /// --leader-elect-lease-duration (each Lease call is cut after half of it).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub leader_elect_renew_deadline: Duration,

    /// The time between attempts to acquire or renew the Lease; the renew deadline must exceed
    /// 1.2 of it. A standby takes over a released Lease within one retry period.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    pub leader_elect_retry_period: Duration,

    /// The Lease's name.
    #[arg(long, value_name = "NAME", default_value = "tierd")]
    pub leader_elect_resource_name: String,

    /// The Lease's namespace: the pod's (the downward API's POD_NAMESPACE), else kube-system.
    #[arg(
        long,
        value_name = "NAMESPACE",
        default_value = "kube-system",
        env = "POD_NAMESPACE"
    )]
    pub leader_elect_resource_namespace: String,
}

/// A listen address, or none (the empty string): `--webhook-listen ""` turns the port off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listen(pub Option<SocketAddr>);

impl Listen {
    /// Parses `HOST:PORT`, or the empty string for no listener.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Self(None));
        }
        text.parse().map(|addr| Self(Some(addr))).map_err(|e| {
            format!("{e}: expected HOST:PORT such as 0.0.0.0:9443, or \"\" for no listener")
        })
    }

    /// The port, if listening (the tests compare it with the manifests' ports).
    #[cfg(test)]
    pub fn port(self) -> Option<u16> {
        self.0.map(|addr| addr.port())
    }
}

/// `--self-signed-cert` and its names: tierd signs its own webhook certificate.
#[derive(Clone, Debug, Args)]
pub struct SelfSignedArgs {
    /// Sign the serving certificate itself: a CA and a certificate for the Service, kept in a
    /// Secret (shipped empty by the install, filled once, checked, renewed before expiry) and
    /// written to --tls-cert/--tls-key; with --webhook-configuration, keep that
    /// configuration's caBundle equal to the CA.
    #[arg(long, env = "TIERD_SELF_SIGNED_CERT")]
    pub self_signed_cert: bool,

    /// The Secret holding the CA and the serving certificate, in --self-signed-cert-namespace.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "tierd-self-signed-cert",
        env = "TIERD_SELF_SIGNED_CERT_SECRET"
    )]
    pub self_signed_cert_secret: String,

    /// The Service the webhook is reached through: the certificate is for NAME, NAME.NAMESPACE,
    /// NAME.NAMESPACE.svc and NAME.NAMESPACE.svc.cluster.local.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "tierd",
        env = "TIERD_SELF_SIGNED_CERT_SERVICE"
    )]
    pub self_signed_cert_service: String,

    /// tierd's namespace (the Secret's and the Service's).
    #[arg(
        long = "self-signed-cert-namespace",
        value_name = "NAMESPACE",
        default_value = "kube-system",
        env = "POD_NAMESPACE"
    )]
    pub namespace: String,

    /// The ValidatingWebhookConfiguration whose caBundle tierd keeps equal to its CA (with
    /// --self-signed-cert); empty or absent: none.
    #[arg(long, value_name = "NAME", env = "TIERD_WEBHOOK_CONFIGURATION")]
    pub webhook_configuration: Option<String>,
}

/// Connection limits, the same on every port (see tier_server::conn).
#[derive(Clone, Debug, Args)]
pub struct HttpArgs {
    /// The longest from accepting a TLS connection to its ClientHello.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    pub client_hello_timeout: Duration,

    /// The longest a TLS handshake may take.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    pub handshake_timeout: Duration,

    /// The longest a connection may wait for the first byte of a request.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,

    /// The longest from a request's first byte to the end of its headers.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    pub header_timeout: Duration,

    /// The longest from the end of the headers to the response (body read and handling).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub body_timeout: Duration,

    /// The most connections open at once per port; beyond it the longest-waiting is shed.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_connections: usize,

    /// The most TLS handshakes in progress at once per port; beyond it the oldest is shed.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_handshakes: usize,

    /// The most bytes held in unfinished request bodies per port, beyond each body's first
    /// 16 KiB; a body that does not fit waits 1 s, then gets 503.
    #[arg(long, value_name = "BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_body_bytes_held: usize,
}

impl HttpArgs {
    /// The limits these flags describe.
    pub fn limits(&self) -> tier_server::conn::Limits {
        tier_server::conn::Limits {
            client_hello_timeout: self.client_hello_timeout,
            handshake_timeout: self.handshake_timeout,
            idle_timeout: self.idle_timeout,
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            max_connections: self.max_connections,
            max_handshakes: self.max_handshakes,
            max_body_bytes_held: self.max_body_bytes_held,
            ..tier_server::conn::Limits::default()
        }
    }
}

/// Flags of `tierd ensure`.
#[derive(Clone, Debug, Args)]
pub struct EnsureArgs {
    /// Cluster and desired Tiers.
    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// Give up after this long (e.g. `2m`), naming every Tier not converged; default: never.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
}

/// Flags of `tierd plan`.
#[derive(Clone, Debug, Args)]
pub struct PlanArgs {
    /// Cluster and desired Tiers.
    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// Give up waiting for the Tier cache after this long (the error says what the cache saw).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,

    /// Output format: an aligned table, or one record per Tier as JSON or YAML.
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Output formats of `tierd plan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// An aligned table for people.
    Table,
    /// A JSON list of records.
    Json,
    /// A YAML list of records.
    Yaml,
}

/// Flags of `tierd demo`.
#[derive(Clone, Debug, Args)]
pub struct DemoArgs {
    /// Whose Tiers the demo ensures: Antrea's six or Calico's three built-in Tiers.
    #[arg(long, value_enum, value_name = "NAME", default_value_t = ControllerKind::Antrea, env = "TIERD_CONTROLLER")]
    pub controller: ControllerKind,

    /// Seed of the initializer's jitter (the same seed tells the same story).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_durations_and_defaults() {
        let cli = Cli::try_parse_from(["tierd", "ensure", "--timeout", "90s"]).unwrap();
        let Command::Ensure(args) = cli.command else {
            panic!("not ensure");
        };
        assert_eq!(args.timeout, Some(Duration::from_secs(90)));
        assert_eq!(args.cluster.call_timeout, Duration::from_secs(10));
        assert!(Cli::try_parse_from(["tierd", "run", "--in-cluster", "--context", "x"]).is_err());
    }

    /// `run`'s arguments from `flags`.
    fn run_args(flags: &[&str]) -> RunArgs {
        let cli = Cli::try_parse_from(["tierd", "run"].iter().chain(flags)).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        args
    }

    /// What `tierd run FLAGS` prints before it exits 2 (Antrea), if it refuses them.
    fn refused(flags: &[&str]) -> Option<(u8, String)> {
        let args = run_args(flags);
        <tier_core::Antrea as crate::controller::ControllerMode>::webhook_listen(&args)
            .err()
            .map(|e| (e.exit_code(), e.to_string()))
    }

    #[test]
    fn half_of_the_tls_pair_is_refused_saying_which_half_is_missing() {
        let (code, message) = refused(&["--tls-cert", "c.pem"]).unwrap();
        assert_eq!(code, exit::USAGE);
        assert!(
            message.contains("--tls-cert needs --tls-key, the private key of that certificate"),
            "{message}"
        );
        let (_, message) = refused(&["--tls-key", "k.pem"]).unwrap();
        assert!(message.contains("--tls-key needs --tls-cert"), "{message}");
        assert_eq!(
            refused(&["--tls-cert", "c.pem", "--tls-key", "k.pem"]),
            None
        );
    }

    #[test]
    fn flags_that_need_tls_are_refused_together_each_saying_why() {
        let (code, message) = refused(&[
            "--metrics-auth",
            "--self-signed-cert",
            "--client-ca",
            "ca.pem",
        ])
        .unwrap();
        assert_eq!(code, exit::USAGE);
        assert_eq!(
            message,
            "the flags cannot be used as given (3 problem(s)); nothing was sent to the API \
             server:\n  \
             - --metrics-auth needs --tls-cert and --tls-key: /metrics would take bearer \
             tokens, and tierd never accepts them over plain HTTP\n  \
             - --self-signed-cert needs --tls-cert and --tls-key: they name the files it writes \
             the certificate and key to\n  \
             - --client-ca needs --tls-cert and --tls-key: client certificates are asked for in \
             the webhook port's TLS handshake"
        );
        // With only the key, the pair is what is missing: one problem, not four.
        let (_, message) = refused(&["--metrics-auth", "--tls-key", "k.pem"]).unwrap();
        assert!(message.contains("(1 problem(s))"), "{message}");
        assert!(message.contains("--tls-key needs --tls-cert"), "{message}");
    }

    #[test]
    fn worker_threads_default_to_two_and_stay_within_bounds() {
        let cli = Cli::try_parse_from(["tierd", "plan"]).unwrap();
        assert_eq!(cli.worker_threads, 2);
        let cli = Cli::try_parse_from(["tierd", "run", "--worker-threads", "4"]).unwrap();
        assert_eq!(cli.worker_threads, 4);
        // tokio refuses a runtime without workers by panicking: clap refuses 0 first (exit 2).
        for bad in ["0", "65", "-1", "many"] {
            let err = Cli::try_parse_from(["tierd", "run", "--worker-threads", bad]).unwrap_err();
            assert_eq!(err.exit_code(), i32::from(exit::USAGE), "{bad}: {err}");
        }
    }

    #[test]
    fn client_ca_needs_tls_and_defaults_to_kube_apiserver() {
        let (code, message) = refused(&["--client-ca", "ca.pem"]).unwrap();
        assert_eq!(code, exit::USAGE);
        assert!(
            message.contains("--client-ca needs --tls-cert and --tls-key"),
            "{message}"
        );
        let tls = [
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--client-ca",
            "ca.pem",
        ];
        let cli = Cli::try_parse_from(["tierd", "run"].into_iter().chain(tls)).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        assert_eq!(args.client_ca, Some(PathBuf::from("ca.pem")));
        assert_eq!(args.client_names, ["kube-apiserver"]);
        let names = ["--client-names", "kube-apiserver,apiserver.example"];
        let cli =
            Cli::try_parse_from(["tierd", "run"].into_iter().chain(tls).chain(names)).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        assert_eq!(args.client_names, ["kube-apiserver", "apiserver.example"]);
    }

    #[test]
    fn plan_output_formats_and_version() {
        let cli = Cli::try_parse_from(["tierd", "plan", "-o", "json", "--timeout", "5s"]).unwrap();
        let Command::Plan(args) = cli.command else {
            panic!("not plan");
        };
        assert_eq!(args.output, Output::Json);
        assert_eq!(args.timeout, Duration::from_secs(5));
        assert!(Cli::try_parse_from(["tierd", "plan", "-o", "xml"]).is_err());
        let version = Cli::command().render_version();
        assert!(
            version.starts_with(&format!("tierd {}", env!("CARGO_PKG_VERSION"))),
            "{version}"
        );
        assert!(version.contains("built "), "{version}");
        let mut command = Cli::command();
        let plan = command.find_subcommand_mut("plan").unwrap();
        let help = plan.render_long_help().to_string();
        for line in [
            "  0  every Tier is in sync",
            "  1  changes are pending",
            "  2  error or invalid input",
            "  blocked   {by, message}",
        ] {
            assert!(help.contains(line), "{line:?} not in {help}");
        }
    }

    #[test]
    fn self_signed_cert_needs_the_files_it_writes() {
        let (code, message) = refused(&["--self-signed-cert"]).unwrap();
        assert_eq!(code, exit::USAGE);
        assert!(
            message.contains("--self-signed-cert needs --tls-cert and --tls-key"),
            "{message}"
        );
        let cli = Cli::try_parse_from([
            "tierd",
            "run",
            "--self-signed-cert",
            "--tls-cert=/t/tls.crt",
            "--tls-key=/t/tls.key",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        assert!(args.self_signed.self_signed_cert);
        assert_eq!(
            args.self_signed.self_signed_cert_secret,
            "tierd-self-signed-cert"
        );
        assert_eq!(args.self_signed.self_signed_cert_service, "tierd");
        assert_eq!(args.self_signed.webhook_configuration, None);
    }

    #[test]
    fn ports_default_to_controller_runtimes_and_limits_to_the_servers() {
        let cli = Cli::try_parse_from(["tierd", "run"]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        assert_eq!(args.listen, None);
        assert_eq!(
            <tier_core::Antrea as crate::controller::ControllerMode>::webhook_listen(&args)
                .unwrap()
                .map(|a| a.port()),
            Some(9443)
        );
        assert_eq!(args.probe_listen.port(), 8081);
        assert!(args.metrics_listen.ip().is_loopback());
        assert!(!args.metrics_auth);
        assert_eq!(args.http.limits(), tier_server::conn::Limits::default());
        // The old flag still works.
        let cli = Cli::try_parse_from(["tierd", "run", "--listen", "127.0.0.1:1"]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        assert_eq!(args.listen.and_then(Listen::port), Some(1));
    }

    #[test]
    fn an_empty_webhook_listen_turns_the_webhook_port_off() {
        let cli = Cli::try_parse_from(["tierd", "run", "--webhook-listen", ""]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        assert_eq!(args.listen, Some(Listen(None)));
        let cli = Cli::try_parse_from(["tierd", "run", "--webhook-listen="]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        assert_eq!(args.listen.and_then(Listen::port), None);
        let err = Cli::try_parse_from(["tierd", "run", "--webhook-listen", "nope"]).unwrap_err();
        assert_eq!(err.exit_code(), i32::from(exit::USAGE));
        assert!(err.to_string().contains("for no listener"), "{err}");
    }

    #[test]
    fn leader_election_has_kube_schedulers_flags_and_defaults() {
        let cli = Cli::try_parse_from(["tierd", "run"]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        let flags = &args.leader_elect;
        assert!(!flags.leader_elect, "off by default in the binary");
        assert_eq!(flags.leader_elect_lease_duration, Duration::from_secs(15));
        assert_eq!(flags.leader_elect_renew_deadline, Duration::from_secs(10));
        assert_eq!(flags.leader_elect_retry_period, Duration::from_secs(2));
        assert_eq!(flags.leader_elect_resource_name, "tierd");
        let cli = Cli::try_parse_from([
            "tierd",
            "run",
            "--leader-elect",
            "--leader-elect-lease-duration=4s",
            "--leader-elect-renew-deadline=3s",
            "--leader-elect-retry-period=500ms",
            "--leader-elect-resource-name=mine",
            "--leader-elect-resource-namespace=tierd-system",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        let flags = &args.leader_elect;
        assert!(flags.leader_elect);
        assert_eq!(flags.leader_elect_lease_duration, Duration::from_secs(4));
        assert_eq!(flags.leader_elect_renew_deadline, Duration::from_secs(3));
        assert_eq!(flags.leader_elect_retry_period, Duration::from_millis(500));
        assert_eq!(flags.leader_elect_resource_name, "mine");
        assert_eq!(flags.leader_elect_resource_namespace, "tierd-system");
    }

    #[test]
    fn leader_election_timing_that_cannot_fence_is_invalid_input() {
        let run = |extra: &[&str]| {
            let cli = Cli::try_parse_from(
                ["tierd", "run", "--leader-elect", "--pod-name", "tierd-0"]
                    .into_iter()
                    .chain(extra.iter().copied()),
            )
            .unwrap();
            let Command::Run(args) = cli.command else {
                panic!("not run");
            };
            crate::daemon::leadership(&args)
        };
        for bad in [
            &["--leader-elect-renew-deadline=15s"][..],
            &["--leader-elect-lease-duration=10s"],
            &["--leader-elect-retry-period=9s"],
            &["--leader-elect-resource-name=Not_A_Name"],
        ] {
            let err = run(bad).unwrap_err();
            assert_eq!(err.exit_code(), exit::USAGE, "{bad:?}");
            assert!(
                err.to_string()
                    .starts_with("invalid --leader-elect-* flags: "),
                "{err}"
            );
        }
        let message = run(&["--leader-elect-renew-deadline=15s"])
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("must be shorter than the lease duration"),
            "{message}"
        );
        // The identity is the pod's name and a suffix unique to the process.
        let identity = |leadership| match leadership {
            tierd::Leadership::Lease(config) => config.identity,
            other => panic!("no Lease: {other:?}"),
        };
        let (one, two) = (identity(run(&[]).unwrap()), identity(run(&[]).unwrap()));
        assert!(
            one.starts_with("tierd-0_") && one.len() == "tierd-0_".len() + 16,
            "{one}"
        );
        assert_ne!(one, two);
    }

    #[test]
    fn metrics_auth_without_tls_is_refused_with_exit_2_saying_why() {
        let (code, message) = refused(&["--metrics-auth"]).unwrap();
        assert_eq!(code, exit::USAGE);
        assert!(
            message.contains(
                "--metrics-auth needs --tls-cert and --tls-key: /metrics would take bearer \
                 tokens, and tierd never accepts them over plain HTTP"
            ),
            "{message}"
        );
        let tls = [
            "--metrics-auth",
            "--tls-cert=/t/tls.crt",
            "--tls-key=/t/tls.key",
        ];
        assert_eq!(refused(&tls), None);
    }

    #[test]
    fn feature_gates_follow_the_kubernetes_convention() {
        let gates = |text: &str| FeatureGates::parse(text);
        assert_eq!(gates(""), Ok(FeatureGates::default()));
        assert!(
            gates("ClusterNetworkPolicy=true")
                .unwrap()
                .cluster_network_policy
        );
        assert!(
            !gates("ClusterNetworkPolicy=true, ClusterNetworkPolicy=False")
                .unwrap()
                .cluster_network_policy
        );
        assert!(
            gates(" ClusterNetworkPolicy = T ,")
                .unwrap()
                .cluster_network_policy
        );
        let unknown = gates("ClusterNetworkPolicy=true,Traceflow=true").unwrap_err();
        assert!(
            unknown.contains("unrecognized feature gate: Traceflow"),
            "{unknown}"
        );
        assert!(gates("ClusterNetworkPolicy=yes").is_err());
        assert!(gates("ClusterNetworkPolicy").is_err());
        // Clap turns a bad value into a usage error: exit code 2.
        let err =
            Cli::try_parse_from(["tierd", "run", "--feature-gates", "Nope=true"]).unwrap_err();
        assert_eq!(err.exit_code(), i32::from(exit::USAGE));
        let cli = Cli::try_parse_from([
            "tierd",
            "plan",
            "--feature-gates",
            "ClusterNetworkPolicy=true",
        ])
        .unwrap();
        let Command::Plan(args) = cli.command else {
            panic!("not plan");
        };
        assert!(args.cluster.feature_gates.rules().cluster_network_policy);
    }
}
