//! [`ControllerIdentity`]: learned in the background, retried while the API server is away,
//! known as soon as it answers; the state says what failed meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use tier_kube::identity::{ControllerIdentity, IdentityState};
use tier_testserver::{ServerConfig, TestApiServer};

const USER: &str = "system:serviceaccount:kube-system:tierd";
const PATIENCE: Duration = Duration::from_secs(30);

async fn client_for(url: &str) -> kube::Client {
    let yaml = tier_testserver::kubeconfig_for(url, USER, "tierd-token", "test");
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    tier_kube::client::client_from_config(config).unwrap()
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
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = client_for(&format!("http://127.0.0.1:{port}")).await;
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

    let _server =
        TestApiServer::start(ServerConfig::default().user("tierd-token", USER).port(port))
            .await
            .unwrap();
    let appeared = Instant::now();
    let user = tokio::time::timeout(PATIENCE, identity.wait())
        .await
        .unwrap();
    assert_eq!(user, USER);
    assert!(
        appeared.elapsed() < Duration::from_secs(3),
        "{:?}",
        appeared.elapsed()
    );
    assert_eq!(identity.state(), IdentityState::Known(USER.to_owned()));
}

#[tokio::test]
async fn an_api_server_without_self_subject_review_is_named_and_retried() {
    let server = TestApiServer::start(
        ServerConfig::default()
            .user("tierd-token", USER)
            .without_self_subject_review(),
    )
    .await
    .unwrap();
    let identity =
        ControllerIdentity::discover(client_for(&server.url()).await, Duration::from_secs(5))
            .unwrap();
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
