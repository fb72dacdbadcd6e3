//! `/livez` and `/readyz`, with kube-apiserver's semantics and output format.
//!
//! | request | answer |
//! |---|---|
//! | `GET /readyz` | `200 ok` when every required check passes; else 503 with the verbose listing |
//! | `GET /readyz?verbose` | one line per registered check, `[+]name ok` or `[-]name failed: reason` (an informational one: `[+]name ok (informational)` or `[-]name failed (informational): reason`), then `readyz check passed` (200) or `readyz check failed` (503) |
//! | `GET /readyz?exclude=a&exclude=b` | the same without `a` and `b` (listed as `[+]a excluded: ok`) |
//! | `GET /readyz/{name}` | one registered check, required or informational (e.g. `/readyz/system-tiers`); 404 for an unknown name |
//!
//! `/livez` lists the checks of [`HealthConfig::livez`], none by default: the process is live
//! while it serves.
//!
//! # Which checks `/readyz` includes
//!
//! Every check registered with the [`Readiness`] registry: a required one decides the answer,
//! an informational one is only listed (see [`Readiness::register_informational`]). The
//! standard registry requires what the served handlers need, `tier-cache-synced` (the webhook
//! reads the Tier cache) and `shutdown`, and registers `system-tiers` (latched) and
//! `tiers-unobstructed` (what stands in a Tier's way now) as informational; `tierd
//! run` also registers the policy-cache checks (`acnp-cache-synced`, `annp-cache-synced`) as
//! informational, because only the webhook's DELETE needs them (see
//! [`readiness`](crate::readiness)).
//! kube-apiserver reaches the webhook through a Service whose endpoints hold only
//! Ready pods, and creating a system Tier goes through that webhook. A single replica whose
//! readiness waited for its own Tiers would never become Ready, so its webhook would never be
//! reachable, so its Tiers could never be created: a deadlock. Tier initialization is visible at
//! `/readyz/system-tiers` and in the metrics instead.
//!
//! ```
//! use tier_server::health;
//! use tier_server::health::HealthConfig;
//! use tier_server::readiness::Readiness;
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

use crate::readiness::{CheckKind, CheckResult, CheckState, Readiness, one_line};

/// Which registered checks `/livez` includes (`/readyz` includes every registered check; see
/// the [module docs](self)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthConfig {
    /// The checks of `/livez`, in listing order (default: none).
    pub livez: Vec<String>,
}

/// The checks an endpoint lists.
#[derive(Clone, Debug)]
enum Checks {
    /// These names, all required.
    Fixed(Vec<String>),
    /// Every registered check, with its kind.
    Registered,
}

#[derive(Clone, Debug)]
struct Endpoint {
    name: &'static str,
    readiness: Readiness,
    checks: Checks,
}

impl Endpoint {
    fn checks(&self) -> Vec<(String, CheckKind)> {
        match &self.checks {
            Checks::Fixed(names) => names
                .iter()
                .map(|name| (name.clone(), CheckKind::Required))
                .collect(),
            Checks::Registered => self.readiness.kinds(),
        }
    }
}

/// The routes `/livez`, `/livez/{name}`, `/readyz` and `/readyz/{name}` over `readiness`.
pub fn routes(readiness: Readiness, config: HealthConfig) -> Router {
    let livez = Endpoint {
        name: "livez",
        readiness: readiness.clone(),
        checks: Checks::Fixed(config.livez),
    };
    let readyz = Endpoint {
        name: "readyz",
        readiness,
        checks: Checks::Registered,
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
    for (name, kind) in endpoint.checks() {
        if excluded.remove(name.as_str()) {
            lines.push_str(&format!("[+]{name} excluded: ok\n"));
            continue;
        }
        let result = endpoint.readiness.result(&name);
        match kind {
            CheckKind::Required => {
                failed |= !result.state.is_ok();
                lines.push_str(&line(&result));
            }
            CheckKind::Informational => lines.push_str(&informational(&result)),
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

fn informational(result: &CheckResult) -> String {
    match &result.state {
        CheckState::Ok => format!("[+]{} ok (informational)\n", result.name),
        CheckState::Failed(reason) => format!(
            "[-]{} failed (informational): {}\n",
            result.name,
            one_line(reason)
        ),
    }
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
