//! [`ControllerIdentity`]: learned in the background through a real kube-apiserver's
//! SelfSubjectReview (tier-testcluster, a ServiceAccount token, a fault proxy in front), retried
//! while the API server is away, known as soon as it answers; the state says what failed
//! meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use tier_faultproxy::{Fault, FaultProxy, Matcher, Outage, ProxyConfig};
use tier_kube::identity::{ControllerIdentity, IdentityState};
use tier_testcluster::TestCluster;

const USER: &str = "system:serviceaccount:kube-system:tierd";
const PATIENCE: Duration = Duration::from_secs(30);
const SELF_SUBJECT_REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// A real API server, a proxy in front of it, and a client through the proxy as tierd's
/// ServiceAccount (which holds no RBAC of its own: SelfSubjectReview is for everyone).
async fn start() -> (TestCluster, FaultProxy, kube::Client) {
    let cluster = TestCluster::start().await.unwrap();
    let token = cluster.token("kube-system", "tierd").await.unwrap();
    let proxy =
        FaultProxy::start(ProxyConfig::new(cluster.url()).upstream_ca_pem(cluster.ca_pem()))
            .await
            .unwrap();
    let yaml = proxy.kubeconfig_yaml("tierd", Some(&token));
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = tier_kube::client::client_from_config(config).unwrap();
    (cluster, proxy, client)
}

/// Polls `identity` until `done` holds for its state, within [`PATIENCE`].
async fn until(
    identity: &ControllerIdentity,
    done: impl Fn(&IdentityState) -> bool,
) -> IdentityState {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let state = identity.state();
        if done(&state) {
            return state;
        }
        assert!(Instant::now() < deadline, "stuck at {state:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn an_absent_api_server_is_asked_again_until_it_answers() {
    let (_cluster, proxy, client) = start().await;
    proxy.outage(Outage::Refuse).await;
    let identity = ControllerIdentity::discover(client, Duration::from_secs(5)).unwrap();
    let pending = until(
        &identity,
        |s| matches!(s, IdentityState::Pending { attempts, .. } if *attempts >= 2),
    )
    .await;
    let IdentityState::Pending {
        last_error: Some(error),
        ..
    } = pending
    else {
        panic!("{pending:?}");
    };
    assert!(
        error.contains("cannot ask the API server who this client is"),
        "{error}"
    );
    assert_eq!(identity.user(), None);

    proxy.resume().await.unwrap();
    let appeared = Instant::now();
    let user = tokio::time::timeout(PATIENCE, identity.wait())
        .await
        .unwrap();
    // The name the real authenticator gives a ServiceAccount token.
    assert_eq!(user, USER);
    assert!(
        appeared.elapsed() < Duration::from_secs(3),
        "{:?}",
        appeared.elapsed()
    );
    assert_eq!(identity.state(), IdentityState::Known(USER.to_owned()));
    let log = proxy.requests();
    assert_eq!(
        log.count_code(Matcher::any().at_path(SELF_SUBJECT_REVIEWS), 201),
        1,
        "{:?}",
        log.records()
    );
}

#[tokio::test]
async fn an_api_server_without_self_subject_review_is_named_and_retried() {
    let (_cluster, proxy, client) = start().await;
    // An API server older than 1.28 (or with the API off) answers 404 for the resource.
    proxy
        .inject(
            Fault::status(
                Matcher::any().at_path(SELF_SUBJECT_REVIEWS),
                404,
                "NotFound",
                "the server could not find the requested resource",
            )
            .forever(),
        )
        .unwrap();
    let identity = ControllerIdentity::discover(client, Duration::from_secs(5)).unwrap();
    let state = until(
        &identity,
        |s| matches!(s, IdentityState::Pending { attempts, .. } if *attempts >= 2),
    )
    .await;
    assert!(
        format!("{state:?}").contains("--controller-user"),
        "{state:?}"
    );
}

#[test]
fn a_known_identity_needs_no_runtime_and_no_request() {
    let identity = ControllerIdentity::known(USER);
    assert_eq!(identity.user().as_deref(), Some(USER));
}
