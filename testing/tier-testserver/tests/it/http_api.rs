//! The HTTP protocol with plain requests: authentication, discovery, CRUD, paging, errors,
//! Events and the request log.

use http::Method;
use serde_json::json;
use tier_testserver::tier::tier;
use tier_testserver::{Endpoint, ServerConfig, Verb};

use crate::common::{ADMIN, Http, TIERS, server};

fn item(name: &str) -> String {
    format!("{TIERS}/{name}")
}

#[tokio::test]
async fn requests_without_a_known_token_get_401() {
    let server = server(ServerConfig::default()).await;
    for http in [Http::new(&server, None), Http::new(&server, Some("wrong"))] {
        let reply = http.get(TIERS).await;
        assert_eq!(reply.code, 401);
        assert_eq!(reply.body["kind"], "Status");
        assert_eq!(reply.body["reason"], "Unauthorized");
        assert_eq!(reply.body["status"], "Failure");
    }
    assert_eq!(Http::new(&server, None).get("/version").await.code, 200);
    assert_eq!(Http::new(&server, None).get("/readyz").await.code, 200);
    let log = server.requests();
    assert_eq!(log.records()[0].user, None);
    assert_eq!(log.records()[0].code, Some(401));
}

#[tokio::test]
async fn serves_discovery_and_404s_unknown_paths() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    let groups = http.get("/apis").await;
    assert_eq!(groups.code, 200);
    assert_eq!(groups.body["groups"][0]["name"], "crd.antrea.io");
    let resources = http.get("/apis/crd.antrea.io/v1beta1").await;
    assert_eq!(resources.body["resources"][0]["name"], "tiers");
    assert_eq!(resources.body["resources"][0]["namespaced"], false);
    let missing = http.get("/apis/apps/v1/deployments").await;
    assert_eq!(missing.code, 404);
    assert_eq!(missing.body["kind"], "Status");
    assert_eq!(missing.body["reason"], "NotFound");
    let sub = http.get(&format!("{TIERS}/a/status")).await;
    assert_eq!(sub.code, 404);
    let not_allowed = http.send(Method::DELETE, TIERS, None, None).await;
    assert_eq!(not_allowed.code, 405);
    assert_eq!(
        server
            .requests()
            .count_where(|r| r.endpoint == Endpoint::Unknown),
        2
    );
}

#[tokio::test]
async fn create_sets_server_fields_and_get_list_return_them() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    let created = http.post(TIERS, &tier("mine", 10, Some("d"))).await;
    assert_eq!(created.code, 201);
    let meta = &created.body["metadata"];
    assert_eq!(meta["generation"], 1);
    assert!(meta["uid"].as_str().unwrap().len() == 36);
    assert!(meta["creationTimestamp"].as_str().unwrap().ends_with('Z'));
    let rv: u64 = meta["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert_eq!(rv, server.store().resource_version());

    let got = http.get(&item("mine")).await;
    assert_eq!(got.code, 200);
    assert_eq!(got.body, created.body);

    let list = http.get(TIERS).await;
    assert_eq!(list.body["kind"], "TierList");
    assert_eq!(list.body["apiVersion"], "crd.antrea.io/v1beta1");
    assert_eq!(list.body["metadata"]["resourceVersion"], rv.to_string());
    assert_eq!(list.body["items"][0], created.body);
}

#[tokio::test]
async fn list_pages_are_consistent_with_the_first_page() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    for (i, name) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        assert_eq!(
            http.post(TIERS, &tier(name, i as i64, None)).await.code,
            201
        );
    }
    let first = http.get(&format!("{TIERS}?limit=2")).await;
    let rv = first.body["metadata"]["resourceVersion"].clone();
    assert_eq!(first.body["items"].as_array().unwrap().len(), 2);
    assert_eq!(first.body["metadata"]["remainingItemCount"], 3);
    let token = first.body["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_owned();

    // Writes between pages do not show up in the continued list.
    http.delete(&item("c"), None).await;
    http.post(TIERS, &tier("cc", 20, None)).await;

    let second = http.get(&format!("{TIERS}?limit=2&continue={token}")).await;
    assert_eq!(second.body["metadata"]["resourceVersion"], rv);
    let names: Vec<_> = second.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["c", "d"]);
    let token = second.body["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_owned();
    let third = http.get(&format!("{TIERS}?limit=2&continue={token}")).await;
    assert_eq!(third.body["items"].as_array().unwrap().len(), 1);
    assert!(third.body["metadata"].get("continue").is_none());

    // A token older than the retained history is Expired.
    server.store().compact();
    let expired = http.get(&format!("{TIERS}?limit=2&continue={token}")).await;
    assert_eq!(expired.code, 410);
    assert_eq!(expired.body["reason"], "Expired");
    let garbage = http.get(&format!("{TIERS}?limit=2&continue=zz")).await;
    assert_eq!(garbage.code, 400);
}

/// Selectors are not implemented (nothing here sends them): refused, never answered unfiltered.
#[tokio::test]
async fn selectors_are_refused_not_ignored() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    http.post(TIERS, &tier("a", 1, None)).await;
    for query in ["fieldSelector=metadata.name%3Da", "labelSelector=team%3Dx"] {
        let reply = http.get(&format!("{TIERS}?{query}")).await;
        assert_eq!(reply.code, 400, "{query}");
        assert!(
            reply.body["message"]
                .as_str()
                .unwrap()
                .contains("not implemented by tier-testserver"),
            "{:?}",
            reply.body
        );
    }
    let empty = http
        .get(&format!("{TIERS}?labelSelector=&fieldSelector="))
        .await;
    assert_eq!(empty.body["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn already_exists_and_conflict_share_409_but_not_the_reason() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    let created = http.post(TIERS, &tier("baseline", 253, None)).await.body;
    let again = http.post(TIERS, &tier("baseline", 253, None)).await;
    assert_eq!(again.code, 409);
    assert_eq!(again.body["reason"], "AlreadyExists");
    assert_eq!(
        again.body["message"],
        "tiers.crd.antrea.io \"baseline\" already exists"
    );
    assert_eq!(again.body["details"]["kind"], "tiers");

    let mut first = created.clone();
    first["spec"]["description"] = json!("one");
    assert_eq!(http.put(&item("baseline"), &first).await.code, 200);
    let mut stale = created;
    stale["spec"]["description"] = json!("two");
    let conflict = http.put(&item("baseline"), &stale).await;
    assert_eq!(conflict.code, 409);
    assert_eq!(conflict.body["reason"], "Conflict");
    assert!(
        conflict.body["message"]
            .as_str()
            .unwrap()
            .contains("the object has been modified")
    );
}

#[tokio::test]
async fn put_without_resource_version_is_invalid() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    http.post(TIERS, &tier("a", 1, None)).await;
    let reply = http.put(&item("a"), &tier("a", 2, None)).await;
    assert_eq!(reply.code, 422);
    assert_eq!(reply.body["reason"], "Invalid");
    assert_eq!(
        reply.body["details"]["causes"][0]["field"],
        "metadata.resourceVersion"
    );
    assert_eq!(
        reply.body["message"],
        "tiers.crd.antrea.io \"a\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
    let mismatch = http.put(&item("a"), &tier("b", 2, None)).await;
    assert_eq!(mismatch.code, 400);
}

#[tokio::test]
async fn schema_violations_are_422_with_causes() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    let reply = http.post(TIERS, &tier("t", 300, None)).await;
    assert_eq!(reply.code, 422);
    assert_eq!(reply.body["reason"], "Invalid");
    assert_eq!(reply.body["details"]["group"], "crd.antrea.io");
    assert_eq!(reply.body["details"]["kind"], "Tier");
    let cause = &reply.body["details"]["causes"][0];
    assert_eq!(cause["reason"], "FieldValueInvalid");
    assert_eq!(cause["field"], "spec.priority");
    assert_eq!(
        cause["message"],
        "Invalid value: 300: spec.priority in body should be less than or equal to 255"
    );

    let mut no_spec = tier("Not_A_Name", 1, None);
    no_spec.as_object_mut().unwrap().remove("spec");
    let reply = http.post(TIERS, &no_spec).await;
    assert_eq!(reply.code, 422);
    let fields: Vec<_> = reply.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(fields, ["metadata.name", "spec"]);

    let mut typed = tier("t", 1, None);
    typed["spec"]["priority"] = json!("1");
    let reply = http.post(TIERS, &typed).await;
    assert_eq!(
        reply.body["details"]["causes"][0]["reason"],
        "FieldValueTypeInvalid"
    );

    // A valid update that breaks the schema is rejected too.
    let created = http.post(TIERS, &tier("ok", 1, None)).await.body;
    let patch = http
        .merge_patch(&item("ok"), &json!({"spec": {"priority": -1}}))
        .await;
    assert_eq!(patch.code, 422);
    let mut put = created;
    put["spec"] = json!({});
    assert_eq!(http.put(&item("ok"), &put).await.code, 422);
    // Unknown fields are pruned.
    let mut extra = tier("pruned", 2, None);
    extra["spec"]["color"] = json!("red");
    extra["status"] = json!({});
    let reply = http.post(TIERS, &extra).await;
    assert_eq!(reply.code, 201);
    assert!(reply.body["spec"].get("color").is_none());
    assert!(reply.body.get("status").is_none());
}

#[tokio::test]
async fn missing_objects_are_not_found() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    let mut with_rv = tier("ghost", 1, None);
    with_rv["metadata"]["resourceVersion"] = json!("5");
    for reply in [
        http.get(&item("ghost")).await,
        http.put(&item("ghost"), &with_rv).await,
        http.merge_patch(&item("ghost"), &json!({"spec": {"description": "x"}}))
            .await,
        http.delete(&item("ghost"), None).await,
    ] {
        assert_eq!(reply.code, 404);
        assert_eq!(reply.body["reason"], "NotFound");
        assert_eq!(
            reply.body["message"],
            "tiers.crd.antrea.io \"ghost\" not found"
        );
        assert_eq!(reply.body["details"]["name"], "ghost");
    }
}

#[tokio::test]
async fn malformed_requests_get_400_or_415() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    let bad_json = http
        .send(
            Method::POST,
            TIERS,
            Some("application/json"),
            Some("{nope".into()),
        )
        .await;
    assert_eq!(bad_json.code, 400);
    assert_eq!(bad_json.body["reason"], "BadRequest");
    let yaml = http
        .send(Method::POST, TIERS, Some("text/plain"), Some("{}".into()))
        .await;
    assert_eq!(yaml.code, 415);
    assert_eq!(yaml.body["reason"], "UnsupportedMediaType");
    let mut wrong_version = tier("t", 1, None);
    wrong_version["apiVersion"] = json!("crd.antrea.io/v1alpha1");
    assert_eq!(http.post(TIERS, &wrong_version).await.code, 400);
    http.post(TIERS, &tier("t", 1, None)).await;
    let strategic = http
        .send(
            Method::PATCH,
            &item("t"),
            Some("application/strategic-merge-patch+json"),
            Some("{}".into()),
        )
        .await;
    assert_eq!(strategic.code, 415);
    let bad_patch = http
        .send(
            Method::PATCH,
            &item("t"),
            Some("application/merge-patch+json"),
            Some("[".into()),
        )
        .await;
    assert_eq!(bad_patch.code, 400);
    let bad_options = http
        .send(
            Method::DELETE,
            &item("t"),
            Some("application/json"),
            Some("{".into()),
        )
        .await;
    assert_eq!(bad_options.code, 400);
    assert!(server.store().get("t").is_some());
}

#[tokio::test]
async fn generation_counts_spec_changes_and_no_op_writes_keep_the_version() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    let created = http.post(TIERS, &tier("t", 1, None)).await.body;
    let described = http
        .merge_patch(&item("t"), &json!({"spec": {"description": "d"}}))
        .await;
    assert_eq!(described.code, 200);
    assert_eq!(described.body["metadata"]["generation"], 2);
    assert_eq!(
        described.body["metadata"]["uid"],
        created["metadata"]["uid"]
    );
    let labeled = http
        .merge_patch(&item("t"), &json!({"metadata": {"labels": {"a": "b"}}}))
        .await;
    assert_eq!(labeled.body["metadata"]["generation"], 2);
    let rv = server.store().resource_version();
    let same = http
        .merge_patch(&item("t"), &json!({"spec": {"description": "d"}}))
        .await;
    assert_eq!(same.code, 200);
    assert_eq!(server.store().resource_version(), rv);
    assert_eq!(same.body, labeled.body);

    let priority = http
        .merge_patch(&item("t"), &json!({"spec": {"priority": 7}}))
        .await;
    assert_eq!(priority.code, 200);
    assert_eq!(priority.body["spec"]["priority"], 7);
    assert_eq!(priority.body["metadata"]["generation"], 3);
    // JSON patch is not implemented: refused with 415, listing what is accepted.
    let json_patch = http
        .send(
            Method::PATCH,
            &item("t"),
            Some("application/json-patch+json"),
            Some(json!([{"op": "replace", "path": "/spec/priority", "value": 9}]).to_string()),
        )
        .await;
    assert_eq!(json_patch.code, 415);
    let pinned = http
        .merge_patch(
            &item("t"),
            &json!({"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}, "spec": {"priority": 8}}),
        )
        .await;
    assert_eq!(pinned.code, 409);
    assert_eq!(pinned.body["reason"], "Conflict");
}

#[tokio::test]
async fn delete_honours_preconditions_and_returns_the_object() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    let created = http.post(TIERS, &tier("t", 1, None)).await.body;
    let wrong_uid = http
        .delete(&item("t"), Some(&json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "x"}})))
        .await;
    assert_eq!(wrong_uid.code, 409);
    assert_eq!(wrong_uid.body["reason"], "Conflict");
    let wrong_rv = http
        .delete(
            &item("t"),
            Some(&json!({"preconditions": {"resourceVersion": "1"}})),
        )
        .await;
    assert_eq!(wrong_rv.code, 409);
    let ok = http
        .delete(
            &item("t"),
            Some(&json!({"preconditions": {
                "uid": created["metadata"]["uid"],
                "resourceVersion": created["metadata"]["resourceVersion"],
            }})),
        )
        .await;
    assert_eq!(ok.code, 200);
    assert_eq!(ok.body["metadata"]["name"], "t");
    assert_eq!(http.get(&item("t")).await.code, 404);

    // Finalizers turn a delete into a deletionTimestamp (202).
    let mut held = tier("held", 2, None);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    http.post(TIERS, &held).await;
    let pending = http.delete(&item("held"), None).await;
    assert_eq!(pending.code, 202);
    assert!(pending.body["metadata"]["deletionTimestamp"].is_string());
    http.merge_patch(&item("held"), &json!({"metadata": {"finalizers": null}}))
        .await;
    assert_eq!(http.get(&item("held")).await.code, 404);
}

#[tokio::test]
async fn dry_run_writes_change_nothing() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    let rv = server.store().resource_version();
    let reply = http
        .post(&format!("{TIERS}?dryRun=All"), &tier("t", 1, None))
        .await;
    assert_eq!(reply.code, 201);
    assert!(server.store().get("t").is_none());
    assert_eq!(server.store().resource_version(), rv);
}

#[tokio::test]
async fn events_are_recorded_for_tests_to_read() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    let path = "/apis/events.k8s.io/v1/namespaces/default/events";
    let event = json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "baseline.1", "namespace": "default"},
        "reason": "Created",
        "note": "created Tier baseline",
        "regarding": {"kind": "Tier", "name": "baseline"},
    });
    assert_eq!(http.post(path, &event).await.code, 201);
    assert_eq!(http.post(path, &event).await.code, 409);
    let patched = http
        .merge_patch(
            &format!("{path}/baseline.1"),
            &json!({"series": {"count": 2}}),
        )
        .await;
    assert_eq!(patched.code, 200);
    let core = http
        .post(
            "/api/v1/namespaces/kube-system/events",
            &json!({"metadata": {"generateName": "x-"}, "reason": "R"}),
        )
        .await;
    assert_eq!(core.code, 201);
    assert_eq!(core.body["apiVersion"], "v1");
    let events = server.events();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["series"]["count"], 2);
    assert_eq!(events[0]["note"], "created Tier baseline");
    assert_eq!(
        http.get(path).await.body["items"].as_array().unwrap().len(),
        1
    );
    assert_eq!(
        server
            .requests()
            .count_where(|r| r.endpoint == Endpoint::Events),
        5
    );
}

#[tokio::test]
async fn request_log_records_verb_name_user_and_code() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    http.post(TIERS, &tier("baseline", 253, None)).await;
    http.post(TIERS, &tier("baseline", 253, None)).await;
    http.get(&item("baseline")).await;
    http.get(TIERS).await;
    let log = server.requests();
    assert_eq!(log.count(Verb::Create, Some("baseline")), 2);
    assert_eq!(log.count(Verb::Create, None), 2);
    assert_eq!(log.count_code(Verb::Create, Some("baseline"), 409), 1);
    assert_eq!(log.count(Verb::Get, Some("baseline")), 1);
    assert_eq!(log.count(Verb::List, None), 1);
    let first = &log.records()[0];
    assert_eq!(first.user.as_deref(), Some(ADMIN));
    assert_eq!(first.method, "POST");
    assert_eq!(first.code, Some(201));
    assert_eq!(first.fault, None);
    server.clear_log();
    assert!(server.requests().is_empty());
    http.get(TIERS).await;
    assert_eq!(server.requests().records()[0].seq, 4);
}

#[tokio::test]
async fn other_actors_write_around_admission() {
    let server = server(ServerConfig::default().admission(
        tier_testserver::AdmissionMode::BuiltinAntrea {
            controller_user: "nobody".into(),
        },
    ))
    .await;
    let http = Http::admin(&server);
    let store = server.store();
    store.create(tier("baseline", 253, None)).unwrap();
    // Another actor grabs a priority the webhook would never allow twice.
    store.create(tier("squatter", 253, None)).unwrap();
    store
        .modify("baseline", |t| t["spec"]["priority"] = json!(10))
        .unwrap();
    assert_eq!(
        http.get(&item("baseline")).await.body["spec"]["priority"],
        10
    );
    store
        .put_raw(json!({"metadata": {"name": "raw"}, "spec": {}}))
        .unwrap();
    assert_eq!(
        http.get(TIERS).await.body["items"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    store.delete("baseline").unwrap();
    assert_eq!(http.get(&item("baseline")).await.code, 404);
    assert!(server.requests().count(Verb::Create, None) == 0);
}

#[tokio::test]
async fn shutdown_closes_the_listener() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    assert_eq!(http.get(TIERS).await.code, 200);
    let addr = server.addr();
    server.shutdown().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn writes_a_kubeconfig_file() {
    let server = server(ServerConfig::default()).await;
    let dir = std::env::temp_dir().join(format!("tier-testserver-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kubeconfig");
    server.write_kubeconfig(&path, ADMIN).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(&server.url()));
    assert!(text.contains("admin-token"));
    assert!(server.kubeconfig_yaml("stranger", "x").is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A connection that sends no request (a client that connected and went away without closing,
/// or one holding connections open on purpose) holds one of the `max_connections` slots only
/// until the idle timeout, as kube-apiserver's 90 s `IdleTimeout` closes it; then a waiting
/// client is served.
#[tokio::test(start_paused = true)]
async fn an_idle_connection_gives_its_slot_back_after_the_idle_timeout() {
    use tokio::io::AsyncReadExt;

    let limits = tier_testserver::Limits {
        max_connections: 1,
        ..Default::default()
    };
    let server = server(ServerConfig::default().limits(limits)).await;
    let mut idle = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    // Let the server accept it and take the one slot.
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    let started = tokio::time::Instant::now();
    let limit = tier_testserver::IDLE_TIMEOUT + std::time::Duration::from_secs(5);
    let reply = tokio::time::timeout(limit, Http::admin(&server).get(TIERS))
        .await
        .unwrap_or_else(|_| {
            panic!("not served within {limit:?}: the idle connection kept the slot")
        });
    assert_eq!(reply.code, 200);
    let waited = started.elapsed();
    assert!(
        (tier_testserver::IDLE_TIMEOUT.saturating_sub(std::time::Duration::from_secs(1))
            ..tier_testserver::IDLE_TIMEOUT + std::time::Duration::from_secs(1))
            .contains(&waited),
        "served after {waited:?}"
    );
    let mut buf = [0_u8; 16];
    assert_eq!(
        idle.read(&mut buf).await.unwrap(),
        0,
        "the idle connection was closed"
    );
}
