//! Shared helpers of the integration tests: a test API server with a kubeconfig on disk and a
//! real kube client built by `tier_kube::client`.

#![allow(dead_code)]

pub mod real;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tier_core::{Generation, Snapshot, TierLister, TierSpec};
use tier_kube::client::ClientOptions;
use tier_kube::lister::KubeLister;
use tier_kube::writer::{KubeWriter, WriterConfig};
use tier_testserver::{ServerConfig, TestApiServer};

/// The user tierd runs as (Antrea's controller service account in the built-in admission).
pub const USER: &str = "system:serviceaccount:kube-system:antrea-controller";
pub const TOKEN: &str = "tierd-token";

/// How long any wait in these tests may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A running test API server and a kube client pointed at it through a kubeconfig file.
pub struct Harness {
    pub server: TestApiServer,
    /// The shared client: kube's defaults, retries on.
    pub client: kube::Client,
    /// The writer's client from the same configuration: retries off.
    pub writer_client: kube::Client,
    pub kubeconfig: TempFile,
}

/// A file removed on drop.
pub struct TempFile(pub PathBuf);

impl TempFile {
    pub fn new(stem: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Self(std::env::temp_dir().join(format!("tier-kube-{stem}-{}-{n}.yaml", std::process::id())))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Starts a server with `config` plus the tierd user, and a client through its kubeconfig.
pub async fn start(config: ServerConfig) -> Harness {
    let server = TestApiServer::start(config.user(TOKEN, USER))
        .await
        .unwrap();
    let kubeconfig = TempFile::new("kubeconfig");
    server.write_kubeconfig(&kubeconfig.0, USER).unwrap();
    let config = tier_kube::client::config(&ClientOptions {
        kubeconfig: Some(kubeconfig.0.clone()),
        ..ClientOptions::default()
    })
    .await
    .unwrap();
    let client = tier_kube::client::client_from_config(config.clone()).unwrap();
    let writer_client = tier_kube::client::writer_client(config).unwrap();
    Harness {
        server,
        client,
        writer_client,
        kubeconfig,
    }
}

/// Antrea's built-in admission, with tierd as the controller allowed to change priorities.
pub fn antrea_admission() -> ServerConfig {
    ServerConfig::default().admission(tier_testserver::AdmissionMode::BuiltinAntrea {
        controller_user: USER.to_owned(),
    })
}

impl Harness {
    /// A writer with a short call timeout over an empty store that never fills: enough for
    /// creates; every update is stale (not cached). Use [`cached_writer`](Self::cached_writer)
    /// for updates.
    pub fn writer(&self) -> KubeWriter {
        let (store, _) = kube::runtime::reflector::store();
        KubeWriter::new(self.writer_client.clone(), store, writer_config())
    }

    /// A synced lister and a writer with a short call timeout over its store.
    pub async fn cached_writer(&self) -> (KubeLister, KubeWriter) {
        let lister = self.lister();
        synced(&lister).await;
        let writer = lister.writer(self.writer_client.clone(), writer_config());
        (lister, writer)
    }

    /// A started lister. It uses the no-retry client so that every failed list and watch
    /// reaches the watcher (and its stats), which is what these tests observe; on the shared
    /// client kube's retry layer would absorb a single 503.
    pub fn lister(&self) -> KubeLister {
        KubeLister::start(self.writer_client.clone()).unwrap()
    }

    /// Seeds a Tier as another actor would (no admission).
    pub fn seed(&self, name: &str, priority: i64, description: Option<&str>) -> Value {
        self.server
            .store()
            .create(tier_testserver::tier::tier(name, priority, description))
            .unwrap()
    }

    /// The stored Tier `name`: (priority, description).
    pub fn stored(&self, name: &str) -> Option<(i64, Option<String>)> {
        let obj = self.server.store().get(name)?;
        Some((
            obj.pointer("/spec/priority").and_then(Value::as_i64)?,
            obj.pointer("/spec/description")
                .and_then(Value::as_str)
                .map(str::to_owned),
        ))
    }

    /// The stored resourceVersion of `name`.
    pub fn rv(&self, name: &str) -> String {
        let obj = self.server.store().get(name).unwrap();
        obj.pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap()
            .to_owned()
    }
}

pub fn writer_config() -> WriterConfig {
    WriterConfig {
        call_timeout: Duration::from_secs(3),
        ..WriterConfig::default()
    }
}

pub fn spec(name: &str, priority: i64, description: &str) -> TierSpec {
    TierSpec::new(name, priority, description)
}

/// Waits until the lister's snapshot satisfies `pred`, waking on every generation change.
pub async fn until(lister: &KubeLister, pred: impl Fn(&Snapshot) -> bool) -> Snapshot {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let snapshot = lister.snapshot();
            if pred(&snapshot) {
                return snapshot;
            }
            lister.changed(snapshot.generation).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the lister never showed the expected state: {:?}",
            lister.snapshot()
        )
    })
}

/// Waits for the lister's first complete list.
pub async fn synced(lister: &KubeLister) -> Generation {
    tokio::time::timeout(PATIENCE, lister.wait_synced())
        .await
        .expect("the lister never synced");
    lister.generation()
}
