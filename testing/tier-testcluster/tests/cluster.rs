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
