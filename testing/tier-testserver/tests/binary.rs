//! The `tier-testserver` binary, as a person runs it: it listens, writes a kubeconfig a real
//! kube client (so kubectl) can use, and enforces Antrea's admission when asked.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;

/// Kills the child when the test ends, pass or fail.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tier(name: &str, priority: i64) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "crd.antrea.io/v1beta1",
        "kind": "Tier",
        "metadata": {"name": name},
        "spec": {"priority": priority},
    }))
    .unwrap()
}

#[tokio::test]
async fn the_binary_serves_a_cluster_a_kubeconfig_reaches() {
    let kubeconfig = std::env::temp_dir().join(format!(
        "tier-testserver-binary-{}.kubeconfig",
        std::process::id()
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_tier-testserver"))
        .args(["--port", "0", "--antrea-admission", "--kubeconfig"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let running = Running(child);
    // The first line says where it listens, once the kubeconfig is written.
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(30), line)
        .await
        .expect("the binary printed nothing")
        .unwrap()
        .unwrap();
    assert!(
        line.starts_with("tier-testserver listening on http://127.0.0.1:"),
        "{line}"
    );
    assert!(line.contains("Antrea's Tier admission rules"), "{line}");

    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    // Discovery, as kubectl runs it before `kubectl get tiers`, finds the Tier resource.
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let gvk = kube::api::GroupVersionKind::gvk("crd.antrea.io", "v1beta1", "Tier");
    let (found, _) = discovery.resolve_gvk(&gvk).expect("tiers are discoverable");
    assert_eq!(found.plural, "tiers");
    let resource = ApiResource {
        group: "crd.antrea.io".into(),
        version: "v1beta1".into(),
        api_version: "crd.antrea.io/v1beta1".into(),
        kind: "Tier".into(),
        plural: "tiers".into(),
    };
    let tiers: Api<DynamicObject> = Api::all_with(client, &resource);
    assert!(
        tiers
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    tiers
        .create(&PostParams::default(), &tier("team", 10))
        .await
        .unwrap();
    // Antrea's rules: a second Tier on the same priority is refused.
    let error = tiers
        .create(&PostParams::default(), &tier("other", 10))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("overlaps"), "{error}");
    drop(running);
    let _ = std::fs::remove_file(&kubeconfig);
}
