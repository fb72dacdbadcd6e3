//! Outages: connections refused (or reset at accept) and the open ones severed, until resumed.

use std::io::ErrorKind;

use tier_faultproxy::{Outage, Verb};

use crate::common::{admin, io_kinds, proxy, server, tiers};

/// Lists until the error chain holds `kind` (a pooled connection may first fail otherwise).
async fn fails_with(api: &kube::Api<kube::api::DynamicObject>, kind: ErrorKind) {
    let mut seen = Vec::new();
    for _ in 0..5 {
        let error = api.list(&Default::default()).await.unwrap_err();
        assert!(!matches!(error, kube::Error::Api(_)), "{error:?}");
        let kinds = io_kinds(&error);
        if kinds.contains(&kind) {
            return;
        }
        seen.push(format!("{error:?}"));
    }
    panic!("never {kind:?}: {seen:#?}");
}

#[tokio::test]
async fn a_refusing_outage_severs_open_connections_until_resumed() {
    let server = server().await;
    let proxy = proxy(&server).await;
    let api = tiers(admin(&proxy).await);
    api.list(&Default::default()).await.unwrap();
    assert_eq!(proxy.open_connections(), 1);
    proxy.outage(Outage::Refuse).await;
    fails_with(&api, ErrorKind::ConnectionRefused).await;
    assert_eq!(proxy.open_connections(), 0);
    proxy.resume().await.unwrap();
    api.list(&Default::default()).await.unwrap();
    // The requests during the outage never reached the proxy.
    assert_eq!(proxy.requests().count(Verb::List), 2);
}

#[tokio::test]
async fn an_outage_at_accept_resets_every_new_connection() {
    let server = server().await;
    let proxy = proxy(&server).await;
    let api = tiers(admin(&proxy).await);
    api.list(&Default::default()).await.unwrap();
    proxy.outage(Outage::ResetAtAccept).await;
    fails_with(&api, ErrorKind::ConnectionReset).await;
    assert!(proxy.connections_reset_at_accept() >= 1);
    proxy.resume().await.unwrap();
    api.list(&Default::default()).await.unwrap();
    assert_eq!(proxy.requests().count(Verb::List), 2);
}
