//! Helpers: a test server with a proxy in front, kube clients through the proxy, Tiers.

use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject};
use tier_faultproxy::{FaultProxy, Limits, ProxyConfig};
use tier_testserver::{ServerConfig, TestApiServer};

pub const ADMIN: &str = "admin";
pub const ADMIN_TOKEN: &str = "admin-token";
pub const TIERS: &str = "tiers.crd.antrea.io";
/// How long a test waits for something that should happen at once.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A test server (an admin user, no bookmarks: watch events are only changes).
pub async fn server() -> TestApiServer {
    TestApiServer::start(
        ServerConfig::default()
            .user(ADMIN_TOKEN, ADMIN)
            .bookmark_interval(None),
    )
    .await
    .unwrap()
}

/// A proxy in front of `server`.
pub async fn proxy(server: &TestApiServer) -> FaultProxy {
    proxy_with(server, Limits::default()).await
}

/// A proxy in front of `server` with `limits`.
pub async fn proxy_with(server: &TestApiServer, limits: Limits) -> FaultProxy {
    FaultProxy::start(ProxyConfig::new(server.url()).limits(limits))
        .await
        .unwrap()
}

/// A kube client through `proxy` with bearer `token`; kube's own retries of 429/503/504 are
/// off unless `retries`.
pub async fn client(proxy: &FaultProxy, token: &str, retries: bool) -> kube::Client {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let yaml = proxy.kubeconfig_yaml(ADMIN, Some(token));
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.default_retry = retries;
    kube::Client::try_from(config).unwrap()
}

/// An admin kube client through `proxy`, without kube's retries.
pub async fn admin(proxy: &FaultProxy) -> kube::Client {
    client(proxy, ADMIN_TOKEN, false).await
}

pub fn tiers(client: kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "crd.antrea.io".into(),
        version: "v1beta1".into(),
        api_version: "crd.antrea.io/v1beta1".into(),
        kind: "Tier".into(),
        plural: "tiers".into(),
    };
    Api::all_with(client, &resource)
}

/// A Tier as a `DynamicObject`.
pub fn tier(name: &str, priority: i64) -> DynamicObject {
    serde_json::from_value(tier_testserver::tier::tier(name, priority, None)).unwrap()
}

/// The `Status` of an API error; panics on any other error.
pub fn api_error(error: kube::Error) -> (u16, String, String) {
    match error {
        kube::Error::Api(status) => (status.code, status.reason.clone(), status.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The `io::ErrorKind`s in `error`'s source chain, looking inside wrapped `io::Error`s too
/// (their `source` skips the error they wrap).
pub fn io_kinds(error: &(dyn std::error::Error + 'static)) -> Vec<std::io::ErrorKind> {
    let mut kinds = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        next = e.source();
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            kinds.push(io.kind());
            if let Some(inner) = io.get_ref() {
                next = Some(inner);
            }
        }
    }
    kinds
}
