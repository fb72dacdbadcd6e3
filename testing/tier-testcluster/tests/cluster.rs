//! The control plane itself: it starts, its admin is `system:masters`, a ServiceAccount token
//! holds only what RBAC grants, and manifests apply server-side.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use tier_testcluster::TestCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_serves_its_version_and_tokens_hold_only_rbac() {
    let cluster = TestCluster::start().await.unwrap();
    eprintln!("started in {:?}", cluster.started_in());
    let version = cluster.client().apiserver_version().await.unwrap();
    assert_eq!(version.git_version, cluster.binaries().version);

    let token = cluster.token("kube-system", "probe").await.unwrap();
    let client = cluster.token_client(&token).await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let denied = maps.list(&Default::default()).await.unwrap_err();
    let kube::Error::Api(status) = denied else {
        panic!("{denied:?}")
    };
    assert_eq!(status.code, 403, "{status:?}");
    assert!(
        status
            .message
            .contains("system:serviceaccount:kube-system:probe"),
        "{status:?}"
    );

    cluster
        .apply(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: read\n  \
             namespace: default\nrules:\n- apiGroups: ['']\n  resources: [configmaps]\n  \
             verbs: [list]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata:\n  name: read\n  namespace: default\nroleRef:\n  apiGroup: \
             rbac.authorization.k8s.io\n  kind: Role\n  name: read\nsubjects:\n- kind: \
             ServiceAccount\n  name: probe\n  namespace: kube-system\n",
        )
        .await
        .unwrap();
    // RBAC is evaluated from an informer: the grant arrives shortly.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while maps.list(&Default::default()).await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the Role never took effect"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[test]
fn the_children_of_a_killed_test_process_are_reaped_and_no_other_process() {
    use std::process::Command;
    // A run directory as a killed test process leaves it: its owner gone, its child running.
    let mut owner = Command::new("true").spawn().unwrap();
    let owner_pid = owner.id();
    owner.wait().unwrap();
    let mut orphan = Command::new("sleep").arg("60").spawn().unwrap();
    let mut bystander = Command::new("sleep").arg("60").spawn().unwrap();
    let exe = std::fs::read_link(format!("/proc/{}/exe", orphan.id())).unwrap();
    // A root of its own: other test processes reap the shared one.
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("1-0-x");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("owner"), owner_pid.to_string()).unwrap();
    // The bystander's pid is recorded with another program: it is not ours to end.
    std::fs::write(
        run.join("pids"),
        format!(
            "{} {}\n{} /no/such/kube-apiserver\n",
            orphan.id(),
            exe.display(),
            bystander.id()
        ),
    )
    .unwrap();

    tier_testcluster::process::reap_orphans_in(root.path());

    let status = orphan.wait().unwrap();
    assert!(!status.success(), "the orphan was not ended: {status}");
    assert!(!run.exists(), "its run directory is left");
    assert!(
        bystander.try_wait().unwrap().is_none(),
        "a process that is not the recorded program was ended"
    );
    bystander.kill().unwrap();
    bystander.wait().unwrap();
}
