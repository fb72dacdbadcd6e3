//! The operator's view of the real `tierd` binary: field errors for a bad Tiers file, `plan`'s
//! exit codes and records, why a Tier cache never synced, plain logs, `--version`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use tier_tests::{Cluster, Finished, PATIENCE, TempFile, USER, tierd_binary};
use tier_testserver::{Fault, ServerConfig, Verb};
use tokio::process::Command;

/// Runs `tierd <args> --kubeconfig <cluster>` with `RUST_LOG` as given (`None`: unset).
async fn tierd_with_log(cluster: &Cluster, args: &[&str], rust_log: Option<&str>) -> Finished {
    let mut command = Command::new(tierd_binary());
    command
        .args(args)
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig.0)
        .env_remove("NO_COLOR")
        .kill_on_drop(true);
    match rust_log {
        Some(filter) => command.env("RUST_LOG", filter),
        None => command.env_remove("RUST_LOG"),
    };
    let output = tokio::time::timeout(PATIENCE, command.output())
        .await
        .unwrap()
        .unwrap();
    Finished {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Drifted Antrea Tiers: baseline right, application and platform wrong, three missing.
fn seed_drifted(cluster: &Cluster) {
    cluster.seed(
        "baseline",
        253,
        Some("[READ-ONLY]: System generated Baseline Tier"),
    );
    cluster.seed("application", 249, Some("edited"));
    cluster.seed("platform", 200, None);
}

/// A kubeconfig for `cluster`'s user pointing at a loopback port nothing listens on.
fn unreachable(cluster: &Cluster) -> (TempFile, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let yaml = cluster
        .server
        .kubeconfig_yaml(USER, "gone")
        .unwrap()
        .replace(&cluster.server.url(), &url);
    (TempFile::with("kubeconfig", "yaml", &yaml), url)
}

#[tokio::test]
async fn a_bad_tiers_file_prints_one_field_error_per_problem_exits_2_and_sends_nothing() {
    let cluster = Cluster::antrea().await;
    let file = TempFile::with(
        "tiers",
        "yaml",
        "tiers:\n  - {name: Bad_Name, priority: 10}\n  - {name: networkops, priority: 300}\n  \
         - {name: b, priority: 254}\n  - {name: c, priority: 11, colour: red}\n  \
         - {priority: 20}\n  - {name: d, priority: 10}\n  - {name: e, priority: high}\n",
    );
    let path = file.0.to_str().unwrap();
    let expected = format!(
        "tierd: the Tiers file {path} is invalid (7 problem(s)):\n\
         \x20 - tiers[3] (c): colour: Forbidden: unknown field; the fields are name, priority and description\n\
         \x20 - tiers[4]: metadata.name: Required value: name is required\n\
         \x20 - tiers[6] (e): spec.priority: Invalid value: \"high\": must be an integer between 0 and 255, not a string\n\
         \x20 - tiers[0] (Bad_Name): metadata.name: Invalid value: \"Bad_Name\": must be a lowercase RFC 1123 subdomain: each label must start and end with a lowercase letter or a digit\n\
         \x20 - tiers[1] (networkops): spec.priority: Invalid value: 300: must be less than or equal to 255\n\
         \x20 - tiers[2] (b): spec.priority: Invalid value: 254: is reserved; choose another priority\n\
         \x20 - tiers[5] (d): spec.priority: Duplicate value: 10: already used by tiers[0] (Bad_Name)\n"
    );
    for command in [
        vec!["ensure"],
        vec!["plan"],
        vec!["plan", "-o", "json"],
        vec!["run", "--listen", "127.0.0.1:0"],
    ] {
        let mut args = command.clone();
        args.extend(["--tiers", path]);
        let done = cluster.tierd(&args).await;
        assert_eq!(done.code(), 2, "{command:?}: {}", done.stderr);
        assert_eq!(done.stderr, expected, "{command:?}");
        assert_eq!(done.stdout, "", "{command:?}");
    }
    assert_eq!(cluster.server.requests().len(), 0, "no request sent");
}

#[tokio::test]
async fn plan_exits_0_in_sync_1_pending_2_on_error_and_prints_records() {
    let cluster = Cluster::antrea().await;
    seed_drifted(&cluster);

    let pending = cluster.tierd(&["plan"]).await;
    assert_eq!(pending.code(), 1, "{}", pending.stderr);
    assert!(
        pending
            .stdout
            .contains("application      250       249  update priority and description"),
        "{}",
        pending.stdout
    );
    assert!(
        pending
            .stdout
            .contains("emergency         50         -  create\n"),
        "{}",
        pending.stdout
    );

    let json = cluster.tierd(&["plan", "-o", "json"]).await;
    assert_eq!(json.code(), 1, "{}", json.stderr);
    let records: Value = serde_json::from_str(&json.stdout).unwrap();
    let records = records.as_array().unwrap();
    let names: Vec<&str> = records
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "baseline",
            "application",
            "platform",
            "networkops",
            "securityops",
            "emergency"
        ]
    );
    assert_eq!(
        records[1],
        serde_json::json!({
            "name": "application",
            "desired": {
                "priority": 250,
                "description": "[READ-ONLY]: System generated default Application Tier"
            },
            "observed": {"priority": 249, "description": "edited"},
            "action": "update",
            "reason": "priority is 249, want 250; description is \"edited\", want \"[READ-ONLY]: System generated default Application Tier\"",
            "blocked": null,
        })
    );
    assert_eq!(records[0]["action"], "none");
    assert_eq!(records[5]["action"], "create");
    assert_eq!(records[5]["observed"], Value::Null);
    let log = cluster.server.requests();
    assert_eq!(
        log.count(Verb::Create, None) + log.count(Verb::Update, None),
        0,
        "plan writes nothing"
    );

    assert_eq!(cluster.tierd(&["ensure"]).await.code(), 0);
    let synced = cluster.tierd(&["plan"]).await;
    assert_eq!(synced.code(), 0, "{}", synced.stdout);
    let yaml = cluster.tierd(&["plan", "-o", "yaml"]).await;
    assert_eq!(yaml.code(), 0, "{}", yaml.stderr);
    assert_eq!(
        yaml.stdout.matches("action: none").count(),
        6,
        "{}",
        yaml.stdout
    );

    let (kubeconfig, url) = unreachable(&cluster);
    let down = Cluster {
        server: tier_testserver::TestApiServer::start(ServerConfig::default())
            .await
            .unwrap(),
        kubeconfig,
    };
    let failed = down.tierd(&["plan", "--timeout", "1s"]).await;
    assert_eq!(failed.code(), 2, "{}", failed.stderr);
    assert!(
        failed.stderr.contains(&format!(
            "tierd: the Tier cache did not sync within 1s from {url}/: last error: listing Tiers \
             failed: connection refused: is the API server running, and is the address right?"
        )),
        "{}",
        failed.stderr
    );
    let ensure = down.tierd(&["ensure", "--timeout", "1s"]).await;
    assert_eq!(ensure.code(), 1, "{}", ensure.stderr);
    assert!(
        ensure.stderr.contains(&format!(
            "not every Tier converged within 1s:\n  - the Tier cache never synced; last error: \
             listing Tiers failed: connection refused: is the API server running, and is the \
             address right? (API server {url}/)"
        )),
        "{}",
        ensure.stderr
    );
}

#[tokio::test]
async fn plan_says_a_create_would_be_refused_and_by_whom() {
    let cluster = Cluster::antrea().await;
    for (name, priority, description) in tier_tests::antrea() {
        if name != "networkops" {
            cluster.seed(name, priority, Some(description));
        }
    }
    cluster.seed("team-a", 150, Some("a user's Tier"));
    let table = cluster.tierd(&["plan"]).await;
    assert_eq!(table.code(), 1, "{}", table.stderr);
    assert!(
        table.stdout.contains(
            "networkops       150         -  create would be refused by the Tier admission \
             webhook (tiervalidator.antrea.io rules): tier networkops priority 150 overlaps with \
             existing Tier (team-a holds priority 150"
        ),
        "{}",
        table.stdout
    );
    let json = cluster.tierd(&["plan", "-o", "json"]).await;
    let records: Value = serde_json::from_str(&json.stdout).unwrap();
    let networkops = &records[3];
    assert_eq!(networkops["action"], "create");
    assert_eq!(
        networkops["blocked"]["message"],
        "tier networkops priority 150 overlaps with existing Tier"
    );
    assert_eq!(
        networkops["blocked"]["by"],
        "the Tier admission webhook (tiervalidator.antrea.io rules)"
    );
    // And ensure meets exactly that refusal.
    let ensure = cluster.tierd(&["ensure", "--timeout", "2s"]).await;
    assert_eq!(ensure.code(), 1, "{}", ensure.stderr);
    assert!(
        ensure
            .stderr
            .contains("networkops blocked: priority 150 is held by Tier team-a"),
        "{}",
        ensure.stderr
    );
}

#[tokio::test]
async fn a_cache_that_never_syncs_says_why() {
    // 403 on list: missing RBAC.
    let forbidden = Cluster::antrea().await;
    forbidden.server.inject(
        Fault::status(
            Verb::List,
            403,
            "Forbidden",
            "tiers.crd.antrea.io is forbidden: User \"system:serviceaccount:kube-system:tierd\" \
             cannot list resource \"tiers\" in API group \"crd.antrea.io\" at the cluster scope",
        )
        .forever(),
    );
    let url = forbidden.server.url();
    let plan = tierd_with_log(&forbidden, &["plan", "--timeout", "1s"], None).await;
    assert_eq!(plan.code(), 2, "{}", plan.stderr);
    assert!(
        plan.stderr.contains(&format!(
            "the Tier cache did not sync within 1s from {url}/: last error: listing Tiers failed: \
             403 Forbidden: tiers.crd.antrea.io is forbidden: User"
        )),
        "{}",
        plan.stderr
    );
    assert!(
        plan.stderr
            .contains("grant tierd's user get, list and watch on tiers.crd.antrea.io"),
        "{}",
        plan.stderr
    );
    let ensure = tierd_with_log(&forbidden, &["ensure", "--timeout", "1s"], None).await;
    assert_eq!(ensure.code(), 1, "{}", ensure.stderr);
    assert!(
        ensure.stderr.contains(
            "not every Tier converged within 1s:\n  - the Tier cache never synced; last error: \
             listing Tiers failed: 403 Forbidden: tiers.crd.antrea.io is forbidden"
        ),
        "{}",
        ensure.stderr
    );
    assert!(
        ensure.stderr.contains(&format!("(API server {url}/)")),
        "{}",
        ensure.stderr
    );

    // 404 on list: the CRD is not installed.
    let no_crd = Cluster::antrea().await;
    no_crd.server.inject(
        Fault::status(
            Verb::List,
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .forever(),
    );
    let plan = tierd_with_log(&no_crd, &["plan", "--timeout", "1s"], None).await;
    assert_eq!(plan.code(), 2, "{}", plan.stderr);
    assert!(
        plan.stderr.contains(
            "listing Tiers failed: 404 NotFound: the server could not find the requested \
             resource; the Tier CRD (tiers.crd.antrea.io) is not installed"
        ),
        "{}",
        plan.stderr
    );
    // In words: no Rust Debug of kube's Status anywhere (with the default log filter).
    for text in [&plan.stderr, &ensure.stderr] {
        assert!(!text.contains("Status {"), "{text}");
        assert!(!text.contains("ErrorResponse"), "{text}");
    }
}

#[tokio::test]
async fn logs_in_a_pipe_have_no_colour_and_no_kube_duplicates_by_default() {
    let run = |rust_log| async move {
        let cluster = Cluster::antrea().await;
        cluster
            .server
            .inject(Fault::unavailable(Verb::Create).times(3));
        let done = tierd_with_log(&cluster, &["ensure", "--timeout", "20s"], rust_log).await;
        assert_eq!(done.code(), 0, "{}", done.stderr);
        done.stderr
    };
    let quiet = run(None).await;
    assert!(
        !quiet.contains('\u{1b}'),
        "ANSI escape in a pipe: {quiet:?}"
    );
    assert!(quiet.contains("retrying after 1 failed attempt"), "{quiet}");
    assert!(quiet.contains("system Tiers initialized"), "{quiet}");
    assert!(!quiet.contains("failed with status"), "{quiet}");
    // RUST_LOG brings kube's per-request lines back: the default really drops something.
    let loud = run(Some("info")).await;
    assert!(loud.contains("failed with status 503"), "{loud}");
    assert!(!loud.contains('\u{1b}'), "{loud:?}");
}

#[tokio::test]
async fn version_names_the_commit_and_build_date() {
    let output = Command::new(tierd_binary())
        .arg("--version")
        .output()
        .await
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    let rest = text
        .trim_end()
        .strip_prefix(&format!("tierd {version}"))
        .unwrap_or_else(|| panic!("{text:?}"));
    // ` (commit <hex>, built YYYY-MM-DD)`, the commit only when built from a git checkout.
    let details = rest
        .strip_prefix(" (")
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{text:?}"));
    let date = details
        .rsplit_once("built ")
        .map(|(_, d)| d)
        .unwrap_or_else(|| panic!("{text:?}"));
    assert_eq!(date.len(), 10, "{text:?}");
    assert!(
        date.chars().all(|c| c.is_ascii_digit() || c == '-'),
        "{text:?}"
    );
    let git = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    if let Some(git) = git.ok().filter(|o| o.status.success()) {
        let head = String::from_utf8(git.stdout).unwrap();
        assert!(
            details.starts_with(&format!("commit {}, ", head.trim())),
            "{text:?} (HEAD {head})"
        );
    }
}
