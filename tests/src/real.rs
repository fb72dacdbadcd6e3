//! End-to-end support on a real kube-apiserver and etcd ([`tier_testcluster`]): an install shape
//! rendered from `deploy/` with `kubectl kustomize` and applied with `kubectl apply`, and tierd
//! run as the rendered Deployment says (its arguments, its environment, its mounted files),
//! authenticated with a TokenRequest token of the install's ServiceAccount, so the shipped RBAC
//! is all it has.
//!
//! What a pod would have is mapped onto the test machine: each of the Deployment's volume mounts
//! becomes a temporary directory (a ConfigMap volume filled with its data), `--in-cluster`
//! becomes `--kubeconfig` with the token, the listen addresses are on 127.0.0.1, and the
//! downward API's `metadata.name` / `metadata.namespace` are [`POD_NAME`] / [`NAMESPACE`].
//! kube-apiserver reaches the webhook through the shipped `service` reference: its egress proxy
//! routes the Service's ClusterIP and port to tierd ([`Install::route_webhook`]).
//!
//! Without `kubectl` on PATH nothing can be rendered: [`Install::new`] says so on stderr and
//! returns `None` (as the rendering tests of `tier-bin` do), and the test returns.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{ApiResource, DynamicObject};
use serde_json::Value;
use tier_testcluster::TestCluster;
use tokio::process::Command;

use crate::{PATIENCE, Tierd, tierd_binary};

/// The namespace every shape installs into.
pub const NAMESPACE: &str = "kube-system";
/// The ServiceAccount the install gives tierd.
pub const ACCOUNT: &str = "tierd";
/// The pod name tierd is given (the downward API's `metadata.name`).
pub const POD_NAME: &str = "tierd-0";

/// kube-controller-manager's controller that fills a ValidatingAdmissionPolicy's
/// `status.typeChecking` (kube-apiserver alone never does).
pub const TYPE_CHECKER: &str = "validatingadmissionpolicy-status-controller";

/// The repository's `deploy/` directory.
pub fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .canonicalize()
        .unwrap()
}

/// `kubectl` on PATH.
pub fn kubectl() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|candidate| candidate.is_file())
}

/// `kubectl kustomize dir`, or `None` without kubectl (said on stderr).
pub fn render(dir: &Path) -> Option<String> {
    let Some(kubectl) = kubectl() else {
        eprintln!(
            "no kubectl on PATH: cannot render {}; skipping",
            dir.display()
        );
        return None;
    };
    let output = std::process::Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    Some(String::from_utf8(output.stdout).unwrap())
}

/// `to` as a path relative to `from` (both absolute), as kustomize wants its paths.
pub fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path = PathBuf::new();
    for _ in common..from.len() {
        path.push("..");
    }
    for part in &to[common..] {
        path.push(part);
    }
    path
}

/// The non-empty YAML documents of `text`, as JSON values.
pub fn documents(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// The Tier resource of Antrea (`tiers.crd.antrea.io/v1beta1`).
pub fn antrea_tiers() -> ApiResource {
    ApiResource {
        group: "crd.antrea.io".into(),
        version: "v1beta1".into(),
        api_version: "crd.antrea.io/v1beta1".into(),
        kind: "Tier".into(),
        plural: "tiers".into(),
    }
}

/// The Tier resource of Calico (`tiers.projectcalico.org/v3`).
pub fn calico_tiers() -> ApiResource {
    ApiResource {
        group: "projectcalico.org".into(),
        version: "v3".into(),
        api_version: "projectcalico.org/v3".into(),
        kind: "Tier".into(),
        plural: "tiers".into(),
    }
}

/// How an install is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Apply {
    /// `kubectl apply -f` (client-side, the last-applied annotation).
    ClientSide,
    /// `kubectl apply --server-side` (field manager `kubectl`), conflicts refused.
    ServerSide,
    /// `kubectl apply --server-side --force-conflicts`, as GitOps tools apply.
    ServerSideForced,
}

/// A real control plane with an install shape applied.
pub struct Install {
    /// The control plane.
    pub cluster: TestCluster,
    /// The rendered shape.
    pub rendered: String,
    /// Its documents.
    pub docs: Vec<Value>,
    manifest: PathBuf,
}

impl Install {
    /// Starts a control plane, applies each of `fixtures` (YAML, e.g. a CRD the shape needs)
    /// server-side, renders `shape` and applies it the `how` way; panics with kubectl's output
    /// when an object is refused. `None` without kubectl.
    pub async fn new(shape: &Path, fixtures: &[&str], how: Apply) -> Option<Self> {
        Self::new_with(tier_testcluster::Options::default(), shape, fixtures, how).await
    }

    /// [`new`](Self::new) on a control plane started with `options` (e.g. with the
    /// controller that type-checks admission policies: [`TYPE_CHECKER`]).
    pub async fn new_with(
        options: tier_testcluster::Options,
        shape: &Path,
        fixtures: &[&str],
        how: Apply,
    ) -> Option<Self> {
        let rendered = render(shape)?;
        let cluster = TestCluster::start_with(options).await.unwrap();
        for fixture in fixtures {
            cluster.apply(fixture).await.unwrap();
            wait_established(&cluster, fixture).await;
        }
        let manifest = cluster.dir().join("install.yaml");
        std::fs::write(&manifest, &rendered).unwrap();
        let install = Self {
            docs: documents(&rendered),
            cluster,
            rendered,
            manifest,
        };
        let output = install.apply(how);
        assert!(output.0, "the install was refused:\n{}", output.1);
        Some(install)
    }

    /// Applies the rendered shape again, the `how` way: whether kubectl succeeded, and its
    /// output.
    pub fn apply(&self, how: Apply) -> (bool, String) {
        let mut kubectl = self.cluster.kubectl().unwrap();
        kubectl.arg("apply");
        match how {
            Apply::ClientSide => {}
            Apply::ServerSide => {
                kubectl.arg("--server-side");
            }
            Apply::ServerSideForced => {
                kubectl.args(["--server-side", "--force-conflicts"]);
            }
        }
        let output = kubectl.arg("-f").arg(&self.manifest).output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), text)
    }

    /// Every object of the rendered shape as the server stores it (`kubectl get -f`), by
    /// `Kind/name`; panics naming any that is missing.
    pub fn stored(&self) -> BTreeMap<String, Value> {
        let output = self
            .cluster
            .kubectl()
            .unwrap()
            .args(["get", "-o", "json", "-f"])
            .arg(&self.manifest)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "kubectl get -f: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let list: Value = serde_json::from_slice(&output.stdout).unwrap();
        let items = match list["items"].as_array() {
            Some(items) => items.clone(),
            None => vec![list],
        };
        items
            .into_iter()
            .map(|item| {
                (
                    format!(
                        "{}/{}",
                        item["kind"].as_str().unwrap(),
                        item["metadata"]["name"].as_str().unwrap()
                    ),
                    item,
                )
            })
            .collect()
    }

    /// The rendered Deployment `tierd`'s container.
    pub fn container(&self) -> &Value {
        &self.deployment()["spec"]["template"]["spec"]["containers"][0]
    }

    fn deployment(&self) -> &Value {
        self.docs
            .iter()
            .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "tierd")
            .expect("no Deployment tierd")
    }

    /// A kubeconfig authenticating as the install's ServiceAccount (TokenRequest).
    pub async fn tierd_kubeconfig(&self) -> PathBuf {
        let token = self.cluster.token(NAMESPACE, ACCOUNT).await.unwrap();
        self.cluster
            .write_token_kubeconfig(
                &format!("system:serviceaccount:{NAMESPACE}:{ACCOUNT}"),
                &token,
            )
            .unwrap()
    }

    /// Routes the webhook's Service (`kube-system/tierd`) to `to`, as kube-apiserver dials it.
    pub async fn route_webhook(&self, to: SocketAddr) {
        self.cluster
            .route_service(NAMESPACE, "tierd", to)
            .await
            .unwrap();
    }

    /// Starts tierd as the rendered Deployment runs it (see the [module docs](self)), with
    /// the webhook on `webhook` if the Deployment listens for one; returns once it serves.
    pub async fn run_tierd(&self, webhook: Option<SocketAddr>) -> RealTierd {
        self.run_tierd_with(webhook, &[]).await
    }

    /// [`run_tierd`](Self::run_tierd) with `extra` flags after the Deployment's.
    pub async fn run_tierd_with(&self, webhook: Option<SocketAddr>, extra: &[&str]) -> RealTierd {
        let kubeconfig = self.tierd_kubeconfig().await;
        let pod = &self.deployment()["spec"]["template"]["spec"];
        let container = self.container();
        let scratch = tempfile::tempdir().unwrap();
        // Each volume mount becomes a directory; ConfigMap volumes are filled.
        let mut mounts: Vec<(String, PathBuf)> = Vec::new();
        for (i, mount) in container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let dir = scratch.path().join(format!("mount-{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            let volume = pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == mount["name"])
                .unwrap();
            if let Some(map) = volume["configMap"]["name"].as_str() {
                let map = self
                    .docs
                    .iter()
                    .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == map)
                    .unwrap();
                for (file, text) in map["data"].as_object().into_iter().flatten() {
                    std::fs::write(dir.join(file), text.as_str().unwrap()).unwrap();
                }
            }
            mounts.push((mount["mountPath"].as_str().unwrap().to_owned(), dir));
        }
        let local = |value: &str| -> String {
            let value = value.replace("$(POD_NAMESPACE)", NAMESPACE);
            for (path, dir) in &mounts {
                if let Some(rest) = value.strip_prefix(path.as_str()) {
                    return format!("{}{rest}", dir.display());
                }
                if let Some((flag, rest)) = value.split_once('=')
                    && let Some(rest) = rest.strip_prefix(path.as_str())
                {
                    return format!("{flag}={}{rest}", dir.display());
                }
            }
            value
        };
        let mut command = Command::new(tierd_binary());
        let mut listens_for_webhook = false;
        for arg in container["args"].as_array().unwrap() {
            let arg = arg.as_str().unwrap();
            if arg == "--in-cluster"
                || ["--probe-listen=", "--metrics-listen=", "--log-format="]
                    .iter()
                    .any(|p| arg.starts_with(p))
            {
                continue;
            }
            if let Some(addr) = arg.strip_prefix("--webhook-listen=") {
                if addr.is_empty() {
                    command.arg(arg);
                } else {
                    let to =
                        webhook.expect("the Deployment listens for the webhook: give an address");
                    command.arg(format!("--webhook-listen={to}"));
                    listens_for_webhook = true;
                }
                continue;
            }
            command.arg(local(arg));
        }
        for var in container["env"].as_array().into_iter().flatten() {
            let name = var["name"].as_str().unwrap();
            let value = match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => POD_NAME.to_owned(),
                Some("metadata.namespace") => NAMESPACE.to_owned(),
                Some(other) => panic!("{name} from {other}: not mapped"),
                None => local(var["value"].as_str().unwrap_or_default()),
            };
            command.env(name, value);
        }
        let tierd = Tierd::start(command, &kubeconfig, extra, listens_for_webhook).await;
        RealTierd {
            tierd,
            _scratch: scratch,
        }
    }

    /// A dynamic API for `resource` (cluster-scoped) as the admin.
    pub fn api(&self, resource: &ApiResource) -> Api<DynamicObject> {
        Api::all_with(self.cluster.client(), resource)
    }

    /// Waits (within [`PATIENCE`]) until every `(name, priority)` Antrea Tier is stored.
    pub async fn has_antrea_tiers(&self, wanted: &[(&str, i64)]) -> bool {
        let api = self.api(&antrea_tiers());
        eventually(|| async {
            let Ok(list) = api.list(&Default::default()).await else {
                return false;
            };
            wanted.iter().all(|(name, priority)| {
                list.items.iter().any(|t| {
                    t.metadata.name.as_deref() == Some(name)
                        && t.data["spec"]["priority"].as_i64() == Some(*priority)
                })
            })
        })
        .await
    }
}

/// A tierd started by [`Install::run_tierd`], with the directories standing in for its mounts.
pub struct RealTierd {
    /// The process.
    pub tierd: Tierd,
    _scratch: tempfile::TempDir,
}

/// A free port on 127.0.0.1 (bound, then closed).
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Polls `cond` every 100 ms until it holds; false after [`PATIENCE`].
pub async fn eventually<F, Fut>(mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cond().await
}

/// Waits until every CustomResourceDefinition in `yaml` is Established.
async fn wait_established(cluster: &TestCluster, yaml: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(cluster.client());
    for doc in documents(yaml) {
        if doc["kind"] != "CustomResourceDefinition" {
            continue;
        }
        let name = doc["metadata"]["name"].as_str().unwrap().to_owned();
        let established = eventually(|| async {
            api.get(&name).await.is_ok_and(|crd| {
                crd.status
                    .and_then(|s| s.conditions)
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
        })
        .await;
        assert!(established, "CRD {name} never Established");
    }
}
