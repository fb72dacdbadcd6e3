//! The test API server's Calico rules (`tier_testserver::calico`, an independent oracle written
//! from Calico's CRD and admission policy) and tierd's (`tier_core::calico::Admission`) agree,
//! verdict and message, on arbitrary Tier writes and deletes: built-in and other names, omitted,
//! pinned and arbitrary orders, both default actions.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use tier_core::calico::{Admission, DefaultAction, TierSpec};
use tier_testserver::calico::{self, BUILTIN_TIERS, CalicoApi};
use tier_testserver::{ServerConfig, StatusError, TestApiServer};

const API: CalicoApi = CalicoApi::V3;
const TOKEN: &str = "admin-token";

#[derive(Debug, Clone)]
struct Case {
    name: String,
    order: Option<f64>,
    action: DefaultAction,
}

fn case() -> impl Strategy<Value = Case> {
    let name = prop_oneof![
        prop::sample::select(vec!["default", "kube-admin", "kube-baseline"])
            .prop_map(str::to_owned),
        "[a-z]{1,8}",
    ];
    let order = prop_oneof![
        Just(None),
        prop::sample::select(vec![1_000.0, 1_000_000.0, 10_000_000.0, 0.0, 999.5]).prop_map(Some),
        (-1.0e9f64..1.0e9).prop_map(Some),
    ];
    let action = prop::sample::select(vec![DefaultAction::Deny, DefaultAction::Pass]);
    (name, order, action).prop_map(|(name, order, action)| Case {
        name,
        order,
        action,
    })
}

/// The first cause of a 422 from the CRD rules, without kube-apiserver's value prefix.
fn rule_message(error: &StatusError) -> String {
    let cause = &error.details.as_ref().unwrap()["causes"][0]["message"];
    cause
        .as_str()
        .unwrap()
        .trim_start_matches("Invalid value: \"object\": ")
        .to_owned()
}

fn object(case: &Case) -> Value {
    calico::tier(API, &case.name, case.order, Some(case.action.as_str()))
}

#[test]
fn writes_get_the_same_verdict_and_message_from_both() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime
        .block_on(TestApiServer::start(ServerConfig::default().calico(API)))
        .unwrap();
    let tiers = server.store().calico();
    let core = Admission::calico();
    let mut runner = TestRunner::new(Config::with_cases(512));
    runner
        .run(&case(), |case| {
            let spec = TierSpec::new(case.name.clone(), case.order, case.action);
            let expected = core.review_write(&spec).map_err(|d| d.0);
            // A create.
            let _ = tiers.delete(&case.name);
            let created = match tiers.create(object(&case)) {
                Ok(_) => Ok(()),
                Err(e) => {
                    prop_assert_eq!(e.code, 422, "{:?}", e);
                    Err(rule_message(&e))
                }
            };
            prop_assert_eq!(&created, &expected, "create {:?}", case);
            // An update of a stored Tier that differs (no ratcheting applies).
            let mut stored = object(&case);
            stored["metadata"]["labels"] = json!({"before": "update"});
            tiers.put_raw(stored).unwrap();
            let updated = match tiers.update(object(&case)) {
                Ok(_) => Ok(()),
                Err(e) => {
                    prop_assert_eq!(e.code, 422, "{:?}", e);
                    Err(rule_message(&e))
                }
            };
            prop_assert_eq!(&updated, &expected, "update {:?}", case);
            Ok(())
        })
        .unwrap();
}

#[test]
fn deletes_get_the_same_verdict_and_message_from_both() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let server = TestApiServer::start(ServerConfig::default().calico(API).user(TOKEN, "admin"))
            .await
            .unwrap();
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Full<bytes::Bytes>>();
        let core = Admission::calico();
        let names = BUILTIN_TIERS.iter().map(|b| b.name).chain([
            "mine",
            "adminnetworkpolicy",
            "baselineadminnetworkpolicy",
        ]);
        for name in names {
            server
                .store()
                .calico()
                .put_raw(calico::tier(API, name, None, None))
                .unwrap();
            let request = http::Request::delete(format!(
                "{}/apis/projectcalico.org/v3/tiers/{name}",
                server.url()
            ))
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(http_body_util::Full::default())
            .unwrap();
            let response = client.request(request).await.unwrap();
            let code = response.status().as_u16();
            let body = http_body_util::BodyExt::collect(response.into_body())
                .await
                .unwrap()
                .to_bytes();
            let status: Value = serde_json::from_slice(&body).unwrap();
            let served = if code == 200 {
                Ok(())
            } else {
                assert_eq!(code, 422, "{status}");
                let cause = status["details"]["causes"][0]["message"].as_str().unwrap();
                Err(cause
                    .rsplit_once("denied request: ")
                    .map(|(_, m)| m.to_owned())
                    .unwrap())
            };
            assert_eq!(served, core.review_delete(name).map_err(|d| d.0), "{name}");
        }
    });
}
