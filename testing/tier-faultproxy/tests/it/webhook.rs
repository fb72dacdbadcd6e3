//! The proxy between an API server and its validating webhook: reviews pass through, and a
//! hung webhook makes the API server fail the write by its failure policy.

use std::time::Duration;

use kube::api::PostParams;
use tier_faultproxy::{Fault, FaultProxy, Matcher, ProxyConfig};
use tier_testserver::{
    AdmissionMode, ServerConfig, TestApiServer, TestWebhook, WebhookBehaviour, WebhookConfig,
};

use crate::common::{ADMIN, ADMIN_TOKEN, PATIENCE, api_error, tier};

#[tokio::test]
async fn an_api_server_calls_its_webhook_through_the_proxy() {
    let server = TestApiServer::start(ServerConfig::default().user(ADMIN_TOKEN, ADMIN))
        .await
        .unwrap();
    let webhook = TestWebhook::start(
        server.store(),
        WebhookBehaviour::DenyAll {
            message: "denied behind the proxy".into(),
        },
    )
    .await
    .unwrap();
    let proxy = FaultProxy::start(
        ProxyConfig::new(webhook.url().trim_end_matches("/validate/tier"))
            .upstream_ca_pem(webhook.ca_pem()),
    )
    .await
    .unwrap();
    server
        .set_admission(AdmissionMode::Webhook(
            WebhookConfig::new(format!("{}/validate/tier", proxy.url()))
                .ca_pem(proxy.ca_pem())
                .timeout(Duration::from_secs(1)),
        ))
        .unwrap();
    let client = crate::common::tiers(kube_client(&server).await);

    let (code, _, message) = api_error(
        client
            .create(&PostParams::default(), &tier("a", 10))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 400);
    assert!(message.contains("denied behind the proxy"), "{message}");
    assert_eq!(webhook.reviews().len(), 1);

    let review = Matcher::any().at_path("/validate/tier");
    let hang = proxy.inject(Fault::hang(review.clone())).unwrap();
    let (code, _, message) = api_error(
        client
            .create(&PostParams::default(), &tier("b", 11))
            .await
            .unwrap_err(),
    );
    // Antrea's webhook fails closed: the API server gives up after its timeout.
    assert_eq!(code, 500);
    assert!(message.contains("failed calling webhook"), "{message}");
    assert_eq!(webhook.reviews().len(), 1);
    // The API server hung up: the held review went with its connection, unanswered.
    assert!(
        proxy
            .wait_for_requests(|log| log.count(review.clone()) == 2, PATIENCE)
            .await
    );
    assert_eq!(proxy.release(hang), 0);
    assert_eq!(proxy.requests().records()[1].code, None);
}

async fn kube_client(server: &TestApiServer) -> kube::Client {
    let yaml = server.kubeconfig_yaml(ADMIN, "direct").unwrap();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}
