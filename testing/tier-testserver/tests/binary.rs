//! The `tier-testserver` binary, as a person runs it: it listens, writes a kubeconfig a real
//! kube client (so kubectl) can use, enforces Antrea's admission when asked, and serves
//! Calico's Tier when asked.

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

/// Runs the binary with `args` (and a fresh kubeconfig); returns it, its first stdout line and
/// a client of the kubeconfig it wrote.
async fn start(args: &[&str]) -> (Running, String, kube::Client, std::path::PathBuf) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let kubeconfig = std::env::temp_dir().join(format!(
        "tier-testserver-binary-{}-{}.kubeconfig",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_tier-testserver"))
        .args(["--port", "0"])
        .args(args)
        .arg("--kubeconfig")
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
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    (
        running,
        line,
        kube::Client::try_from(config).unwrap(),
        kubeconfig,
    )
}

#[tokio::test]
async fn the_binary_serves_calicos_tier_with_its_builtins() {
    let (running, line, client, kubeconfig) = start(&["--calico", "--calico-builtins"]).await;
    assert!(
        line.contains("Calico's Tier at projectcalico.org/v3"),
        "{line}"
    );
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let gvk = kube::api::GroupVersionKind::gvk("projectcalico.org", "v3", "Tier");
    let (found, _) = discovery
        .resolve_gvk(&gvk)
        .expect("Calico's tiers are discoverable");
    let tiers: Api<DynamicObject> = Api::all_with(client, &found);
    let names: Vec<String> = tiers
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|t| t.metadata.name)
        .collect();
    assert_eq!(names, ["default", "kube-admin", "kube-baseline"]);
    let error = tiers
        .delete("default", &Default::default())
        .await
        .unwrap_err();
    assert!(error.to_string().contains("cannot be deleted"), "{error}");
    drop(running);
    let _ = std::fs::remove_file(&kubeconfig);
}

#[tokio::test]
async fn the_binary_serves_a_cluster_a_kubeconfig_reaches() {
    let (running, line, client, kubeconfig) = start(&["--antrea-admission"]).await;
    assert!(line.contains("Antrea's Tier admission rules"), "{line}");
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
