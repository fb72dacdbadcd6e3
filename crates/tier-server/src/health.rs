//! `/livez` and `/readyz`, with kube-apiserver's semantics and output format.
//!
//! | request | answer |
//! |---|---|
//! | `GET /readyz` | `200 ok` when every check of the readyz set passes; else 503 with the verbose listing |
//! | `GET /readyz?verbose` | one line per check, `[+]name ok` or `[-]name failed: reason`, then `readyz check passed` (200) or `readyz check failed` (503) |
//! | `GET /readyz?exclude=a&exclude=b` | the same without `a` and `b` (listed as `[+]a excluded: ok`) |
//! | `GET /readyz/{name}` | one registered check, even one outside the readyz set (e.g. `/readyz/system-tiers`); 404 for an unknown name |
//!
//! `/livez` works the same way over the livez set, which is empty by default: the process is
//! live while it serves.
//!
//! # Which checks `/readyz` includes
//!
//! The policy-cache checks (`acnp-cache-synced`, `annp-cache-synced`) are listed as
//! *informational* (`[+]name ok (informational)`): visible, never failing `/readyz`, because only
//! the webhook's DELETE needs them (see [`readiness`](crate::readiness)).
//!
//! Configurable with [`HealthConfig`]; the default is what the served handlers need,
//! `tier-cache-synced` (the webhook reads the Tier cache) and `shutdown`, and **not**
//! `system-tiers`. kube-apiserver reaches the webhook through a Service whose endpoints hold only
//! Ready pods, and creating a system Tier goes through that webhook. A single replica whose
//! readiness waited for its own Tiers would never become Ready, so its webhook would never be
//! reachable, so its Tiers could never be created: a deadlock. Tier initialization is visible at
//! `/readyz/system-tiers` and in the metrics instead.
//!
//! ```
//! use tier_server::{HealthConfig, Readiness, health};
//!
//! let router = health::routes(Readiness::new(), HealthConfig::default());
//! # let _: axum::Router = router;
//! ```

use std::collections::BTreeSet;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::readiness::{
    ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED, CheckResult, CheckState, Readiness, SHUTDOWN,
    TIER_CACHE_SYNCED, one_line,
};

/// Which registered checks `/livez` and `/readyz` include.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    /// The checks of `/livez`, in listing order (default: none).
    pub livez: Vec<String>,
    /// The checks of `/readyz`, in listing order (default: `tier-cache-synced`, `shutdown`).
    pub readyz: Vec<String>,
    /// Checks listed by `/readyz` (verbose, or on failure) after the readyz set, marked
    /// `(informational)`, that never fail it; skipped when not registered (default:
    /// `acnp-cache-synced`, `annp-cache-synced`, which only the webhook's DELETE needs).
    pub informational: Vec<String>,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            livez: Vec::new(),
            readyz: vec![TIER_CACHE_SYNCED.to_owned(), SHUTDOWN.to_owned()],
            informational: vec![ACNP_CACHE_SYNCED.to_owned(), ANNP_CACHE_SYNCED.to_owned()],
        }
    }
}

#[derive(Clone, Debug)]
struct Endpoint {
    name: &'static str,
    readiness: Readiness,
    checks: Vec<String>,
    informational: Vec<String>,
}

/// The routes `/livez`, `/livez/{name}`, `/readyz` and `/readyz/{name}` over `readiness`.
pub fn routes(readiness: Readiness, config: HealthConfig) -> Router {
    let livez = Endpoint {
        name: "livez",
        readiness: readiness.clone(),
        checks: config.livez,
        informational: Vec::new(),
    };
    let readyz = Endpoint {
        name: "readyz",
        readiness,
        checks: config.readyz,
        informational: config.informational,
    };
    Router::new()
        .route("/livez", get(all).with_state(livez.clone()))
        .route("/livez/{name}", get(one).with_state(livez))
        .route("/readyz", get(all).with_state(readyz.clone()))
        .route("/readyz/{name}", get(one).with_state(readyz))
}

/// The parsed query of a health request.
#[derive(Debug, Default)]
struct Query {
    verbose: bool,
    exclude: Vec<String>,
}

impl Query {
    fn parse(raw: Option<&str>) -> Self {
        let mut query = Query::default();
        for (key, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
            match &*key {
                "verbose" => query.verbose = true,
                "exclude" => query.exclude.push(value.into_owned()),
                _ => {}
            }
        }
        query
    }
}

async fn all(State(endpoint): State<Endpoint>, RawQuery(raw): RawQuery) -> Response {
    let query = Query::parse(raw.as_deref());
    let mut excluded: BTreeSet<&str> = query.exclude.iter().map(String::as_str).collect();
    let mut lines = String::new();
    let mut failed = false;
    for name in &endpoint.checks {
        if excluded.remove(name.as_str()) {
            lines.push_str(&format!("[+]{name} excluded: ok\n"));
            continue;
        }
        let result = endpoint.readiness.result(name);
        failed |= !result.state.is_ok();
        lines.push_str(&line(&result));
    }
    for name in &endpoint.informational {
        if endpoint.checks.contains(name) {
            continue;
        }
        match endpoint.readiness.state(name) {
            Some(CheckState::Ok) => lines.push_str(&format!("[+]{name} ok (informational)\n")),
            Some(CheckState::Failed(reason)) => lines.push_str(&format!(
                "[-]{name} failed (informational): {}\n",
                one_line(&reason)
            )),
            None => {}
        }
    }
    if !excluded.is_empty() {
        let quoted: Vec<String> = excluded.iter().map(|n| format!("{n:?}")).collect();
        lines.push_str(&format!(
            "warn: some {} checks cannot be excluded: no matches for {}\n",
            endpoint.name,
            quoted.join(",")
        ));
    }
    finish(endpoint.name, lines, failed, query.verbose)
}

async fn one(
    State(endpoint): State<Endpoint>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let query = Query::parse(raw.as_deref());
    let Some(state) = endpoint.readiness.state(&name) else {
        return text(
            StatusCode::NOT_FOUND,
            format!(
                "{} check {name:?} is not registered; GET /{}?verbose lists the checks\n",
                endpoint.name, endpoint.name
            ),
        );
    };
    let result = CheckResult { name, state };
    let failed = !result.state.is_ok();
    finish(endpoint.name, line(&result), failed, query.verbose)
}

fn line(result: &CheckResult) -> String {
    match &result.state {
        CheckState::Ok => format!("[+]{} ok\n", result.name),
        CheckState::Failed(reason) => format!("[-]{} failed: {}\n", result.name, one_line(reason)),
    }
}

/// As kube-apiserver: `ok` when passing and not verbose; the listing otherwise (always on
/// failure), closed by `<endpoint> check passed|failed`.
fn finish(endpoint: &str, mut lines: String, failed: bool, verbose: bool) -> Response {
    if failed {
        lines.push_str(&format!("{endpoint} check failed\n"));
        return text(StatusCode::SERVICE_UNAVAILABLE, lines);
    }
    if !verbose {
        return text(StatusCode::OK, "ok".to_owned());
    }
    lines.push_str(&format!("{endpoint} check passed\n"));
    text(StatusCode::OK, lines)
}

fn text(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parsing() {
        let q = Query::parse(Some("verbose&exclude=a&exclude=b%2Dc&other=1"));
        assert!(q.verbose);
        assert_eq!(q.exclude, ["a", "b-c"]);
        let q = Query::parse(None);
        assert!(!q.verbose);
        assert!(q.exclude.is_empty());
    }
}
