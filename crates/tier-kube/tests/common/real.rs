//! The harness on a real control plane: one kube-apiserver and etcd per test
//! ([`tier_testcluster::TestCluster`]) with Antrea's Tier CRD installed, tierd's
//! ServiceAccount holding only the RBAC a test grants it, and a fault proxy
//! ([`tier_faultproxy::FaultProxy`]) between tierd's clients and the server that counts
//! requests and injects faults. Other actors (seeding, drift) write through the admin client,
//! straight to the server.

use std::path::PathBuf;

use kube::api::{Api, DeleteParams, PostParams};
use serde_json::Value;
use tier_faultproxy::{FaultProxy, ProxyConfig};
use tier_kube::client::ClientOptions;
use tier_kube::crd::{Tier, TierSpec};
use tier_kube::lister::KubeLister;
use tier_kube::writer::KubeWriter;
use tier_testcluster::TestCluster;

use super::{PATIENCE, synced, writer_config};

/// tierd's ServiceAccount: namespace and name.
pub const SA_NAMESPACE: &str = "kube-system";
/// tierd's ServiceAccount name (Antrea's controller, as in the fake server's harness).
pub const SA_NAME: &str = "antrea-controller";

/// Antrea's Tier CRD as Antrea ships it.
pub const ANTREA_TIER_CRD: &str = include_str!("../fixtures/antrea-tier-crd.yaml");

/// What tierd may do to Tiers in the shipped install.
pub const TIER_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: tierd-tiers
rules:
  - apiGroups: ["crd.antrea.io"]
    resources: ["tiers"]
    verbs: ["get", "list", "watch", "create", "update", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: tierd-tiers
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: tierd-tiers
subjects:
  - kind: ServiceAccount
    namespace: kube-system
    name: antrea-controller
"#;

/// A real API server, tierd's token, and clients through a fault proxy.
pub struct Real {
    pub cluster: TestCluster,
    pub proxy: FaultProxy,
    /// The admin (system:masters), straight to the server.
    pub admin: kube::Client,
    /// tierd's ServiceAccount token.
    pub token: String,
    /// A kubeconfig for the proxy with tierd's token.
    pub kubeconfig: PathBuf,
    /// The shared client through the proxy: kube's defaults, retries on.
    pub client: kube::Client,
    /// The writer's client through the proxy: retries off.
    pub writer_client: kube::Client,
}

/// A cluster with Antrea's Tier CRD and tierd allowed to manage Tiers.
pub async fn start() -> Real {
    start_with(&[ANTREA_TIER_CRD, TIER_RBAC]).await
}

/// A cluster with `manifests` applied (in order) before tierd's clients are made.
pub async fn start_with(manifests: &[&str]) -> Real {
    let cluster = TestCluster::start().await.unwrap();
    for manifest in manifests {
        cluster.apply(manifest).await.unwrap();
    }
    if manifests.contains(&ANTREA_TIER_CRD) {
        warm_up(&cluster.client()).await;
    }
    let token = cluster.token(SA_NAMESPACE, SA_NAME).await.unwrap();
    let proxy =
        FaultProxy::start(ProxyConfig::new(cluster.url()).upstream_ca_pem(cluster.ca_pem()))
            .await
            .unwrap();
    let kubeconfig = cluster.dir().join("tierd-via-proxy.kubeconfig");
    proxy
        .write_kubeconfig(&kubeconfig, "tierd", Some(&token))
        .unwrap();
    let config = tier_kube::client::config(&ClientOptions {
        kubeconfig: Some(kubeconfig.clone()),
        ..ClientOptions::default()
    })
    .await
    .unwrap();
    let client = tier_kube::client::client_from_config(config.clone()).unwrap();
    let writer_client = tier_kube::client::writer_client(config).unwrap();
    Real {
        admin: cluster.client(),
        cluster,
        proxy,
        token,
        kubeconfig,
        client,
        writer_client,
    }
}

/// The first creates after a CRD is established took about 1 s on a loaded 2-core machine
/// (kube-apiserver builds the resource's storage and managedFields converter on first use),
/// longer than the 1 s call timeout the driver tests give the writer. A dry-run create as the
/// admin pays that once, before the code under test runs, and leaves nothing behind.
async fn warm_up(admin: &kube::Client) {
    let api: Api<Tier> = Api::all(admin.clone());
    let tier = Tier::new(
        "warm-up",
        TierSpec {
            priority: 0,
            description: None,
        },
    );
    let params = PostParams {
        dry_run: true,
        field_manager: Some("warm-up".to_owned()),
    };
    // Best effort: a 404 means the CRD is not served yet (under load it lags its Established
    // condition), so wait for it; any other answer (a webhook a test installed refusing, say)
    // means the request reached the resource's storage path, which is all the warm-up is for.
    for _ in 0..40 {
        match api.create(&params, &tier).await {
            Err(kube::Error::Api(status)) if status.code == 404 => {
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            _ => return,
        }
    }
}

impl Real {
    /// The admin's Tier API.
    pub fn tiers(&self) -> Api<Tier> {
        Api::all(self.admin.clone())
    }

    /// A writer over an empty store that never fills (creates only; every update is stale).
    pub fn writer(&self) -> KubeWriter {
        let (store, _) = kube::runtime::reflector::store();
        KubeWriter::new(self.writer_client.clone(), store, writer_config())
    }

    /// A started lister on the no-retry client, through the proxy.
    pub fn lister(&self) -> KubeLister {
        KubeLister::start(self.writer_client.clone()).unwrap()
    }

    /// A synced lister and a writer over its store.
    pub async fn cached_writer(&self) -> (KubeLister, KubeWriter) {
        let lister = self.lister();
        synced(&lister).await;
        let writer = lister.writer(self.writer_client.clone(), writer_config());
        (lister, writer)
    }

    /// Creates a Tier as another actor would (the admin, no proxy).
    pub async fn seed(&self, name: &str, priority: i32, description: Option<&str>) -> Tier {
        let tier = Tier::new(
            name,
            TierSpec {
                priority,
                description: description.map(str::to_owned),
            },
        );
        self.tiers()
            .create(&PostParams::default(), &tier)
            .await
            .unwrap()
    }

    /// The stored Tier `name` as JSON.
    pub async fn get(&self, name: &str) -> Option<Value> {
        let api: Api<kube::api::DynamicObject> = Api::all_with(
            self.admin.clone(),
            &kube::api::ApiResource::erase::<Tier>(&()),
        );
        let obj = api.get_opt(name).await.unwrap()?;
        Some(serde_json::to_value(obj).unwrap())
    }

    /// The stored Tier `name`: (priority, description).
    pub async fn stored(&self, name: &str) -> Option<(i64, Option<String>)> {
        let tier = self.tiers().get_opt(name).await.unwrap()?;
        Some((i64::from(tier.spec.priority), tier.spec.description))
    }

    /// The stored resourceVersion of `name`.
    pub async fn rv(&self, name: &str) -> String {
        self.tiers()
            .get(name)
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap()
    }

    /// Changes the stored Tier `name` as another actor would (admin, optimistic update).
    pub async fn modify(&self, name: &str, change: impl FnOnce(&mut Tier)) -> Tier {
        let mut tier = self.tiers().get(name).await.unwrap();
        tier.metadata.managed_fields = None;
        change(&mut tier);
        self.tiers()
            .replace(name, &PostParams::default(), &tier)
            .await
            .unwrap()
    }

    /// Deletes the Tier `name` as another actor would.
    pub async fn delete(&self, name: &str) {
        self.tiers()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// The end of kube-apiserver's log, for a failing assertion's message.
    pub fn log_tail(&self) -> String {
        self.cluster.apiserver_log_tail(40)
    }
}

/// How long a test waits for the real server's watch to show a write.
pub const WATCH_PATIENCE: std::time::Duration = PATIENCE;
