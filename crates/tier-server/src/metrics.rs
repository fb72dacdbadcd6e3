//! `/metrics`: Prometheus metrics read from the latest [`Status`](tier_core::Status) at scrape time.
//!
//! `TierCollector` is a prometheus-client [`Collector`]: every scrape reads the driver's
//! current status, so there is no background updater and a scrape never shows a value older
//! than the status itself. Not gated by any readiness check: the status is always valid (it
//! says when the cache is not synced yet).
//!
//! | metric | type | labels | value |
//! |---|---|---|---|
//! | `tierd_tier_state` | gauge | `tier`, `state` | 1 for the Tier's current state, 0 for the others ([`TierState::LABELS`]: `pending`, `converged`, `retrying`, `blocked`, `denied`, `forbidden`, `not-installed`, `contested`) |
//! | `tierd_tier_writes_total` | counter | `tier`, `outcome` | finished writes by outcome: `ok`, or the cause of the failure (`stale`, `transient`, `denied`, `forbidden`, `not-installed`) |
//! | `tierd_tier_corrections_total` | counter | `tier` | corrections: writes restoring a Tier that had been in sync |
//! | `tierd_tier_contested` | gauge | `tier` | 1 while someone keeps changing the Tier back; back to 0 after a quiet period |
//! | `tierd_tiers_blocked` | gauge | | Tiers that cannot be written right now (blocked, denied, forbidden or not installed) |
//! | `tierd_cache_synced` | gauge | | 1 once the Tier cache has completed its first list |
//! | `tierd_leader` | gauge | | 1 while this replica may write Tiers (it leads, or no leader is elected), 0 on standby |
//! | `tierd_system_tiers_initialized` | gauge | | 1 once every system Tier has converged (latched) |
//! | `tierd_converged_seconds` | gauge | | seconds from the driver's start to the first "initialized" ([`tier_core::Status::time_to_initialized`]); absent until then |
//!
//! The answer is the Prometheus text format 0.0.4, or OpenMetrics when the scraper's `Accept`
//! header asks for `application/openmetrics-text`.
//!
//! ```
//! use std::sync::Arc;
//!
//! use prometheus_client::registry::Registry;
//! use tier_server::metrics;
//!
//! let (_tx, status) = tokio::sync::watch::channel(tier_core::Status::default());
//! let mut registry = Registry::default();
//! metrics::register(&mut registry, status);
//! let router: axum::Router = metrics::routes(Arc::new(registry));
//! # let _ = router;
//! ```

use std::fmt;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tier_core::{ErrorClass, TierState};

use crate::readiness::StatusSource;

/// The prefix of every metric: `tierd_`.
pub(crate) const PREFIX: &str = "tierd";

/// A [`Collector`] of tierd's metrics, read from `source` at every scrape. See the
/// [module docs](self) for the metrics.
pub(crate) struct TierCollector<S> {
    source: S,
}

impl<S: StatusSource> fmt::Debug for TierCollector<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TierCollector")
            .field("source", &self.source)
            .finish()
    }
}

impl<S: StatusSource> TierCollector<S> {
    /// A collector reading `source`.
    pub fn new(source: S) -> Self {
        Self { source }
    }
}

/// Whether a Tier in `state` cannot be written right now: blocked, denied, forbidden or not
/// installed (what `tierd_tiers_blocked` counts).
pub(crate) fn cannot_be_written(state: &TierState) -> bool {
    matches!(
        state,
        TierState::Blocked { .. }
            | TierState::Denied { .. }
            | TierState::Forbidden { .. }
            | TierState::NotInstalled { .. }
    )
}

/// Registers a `TierCollector` of `source` in `registry`, under the `tierd_` prefix.
pub fn register<S: StatusSource>(registry: &mut Registry, source: S) {
    registry
        .sub_registry_with_prefix(PREFIX)
        .register_collector(Box::new(TierCollector::new(source)));
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: i64,
) -> Result<(), fmt::Error> {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

impl<S: StatusSource> Collector for TierCollector<S> {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let status = self.source.current();

        let mut family = encoder.encode_descriptor(
            "tier_state",
            "Where each desired Tier stands: 1 for its current state, 0 for the others.",
            None,
            MetricType::Gauge,
        )?;
        for tier in &status.tiers {
            let current = tier.state.as_str();
            for state in TierState::LABELS {
                let labels = [("tier", tier.name.as_str()), ("state", state)];
                ConstGauge::new(i64::from(state == current))
                    .encode(family.encode_family(&labels)?)?;
            }
        }

        let mut family = encoder.encode_descriptor(
            "tier_writes",
            "Finished create and update calls per Tier, by outcome class.",
            None,
            MetricType::Counter,
        )?;
        for tier in &status.tiers {
            let o = tier.outcomes;
            let failed = ErrorClass::ALL.map(|class| (class.as_str(), o.of(class)));
            for (outcome, count) in std::iter::once(("ok", o.ok)).chain(failed) {
                let labels = [("tier", tier.name.as_str()), ("outcome", outcome)];
                ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
            }
        }

        let mut family = encoder.encode_descriptor(
            "tier_corrections",
            "Corrections: writes restoring a Tier that had been in sync (update or re-create).",
            None,
            MetricType::Counter,
        )?;
        for tier in &status.tiers {
            let labels = [("tier", tier.name.as_str())];
            ConstCounter::new(tier.corrections).encode(family.encode_family(&labels)?)?;
        }

        let mut family = encoder.encode_descriptor(
            "tier_contested",
            "1 while someone keeps changing the Tier back.",
            None,
            MetricType::Gauge,
        )?;
        for tier in &status.tiers {
            let labels = [("tier", tier.name.as_str())];
            ConstGauge::new(i64::from(tier.contested)).encode(family.encode_family(&labels)?)?;
        }

        let blocked = status
            .tiers
            .iter()
            .filter(|t| cannot_be_written(&t.state))
            .count();
        gauge(
            &mut encoder,
            "tiers_blocked",
            "Desired Tiers that cannot be written right now (blocked, denied, forbidden or not \
             installed; tier_state says which).",
            i64::try_from(blocked).unwrap_or(i64::MAX),
        )?;
        gauge(
            &mut encoder,
            "cache_synced",
            "1 once the Tier cache has completed its first list.",
            i64::from(status.synced),
        )?;
        gauge(
            &mut encoder,
            "leader",
            "1 while this replica may write Tiers (it holds the Lease, or no leader is elected), \
             0 on standby (as controller-runtime's leader_election_master_status).",
            i64::from(!status.standby),
        )?;
        gauge(
            &mut encoder,
            "system_tiers_initialized",
            "1 once every desired Tier has converged at least once.",
            i64::from(status.initialized),
        )?;
        if let Some(seconds) = status.time_to_initialized().map(|d| d.as_secs_f64()) {
            let metric = ConstGauge::new(seconds);
            metric.encode(encoder.encode_descriptor(
                "converged_seconds",
                "Seconds from start until every desired Tier had converged.",
                None,
                MetricType::Gauge,
            )?)?;
        }
        Ok(())
    }
}

/// The route `GET /metrics` over `registry`.
pub fn routes(registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(registry)
}

const OPENMETRICS: &str = "application/openmetrics-text";

async fn scrape(State(registry): State<Arc<Registry>>, headers: HeaderMap) -> Response {
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains(OPENMETRICS));
    let mut body = String::new();
    let (encoded, content_type) = if openmetrics {
        (
            prometheus_client::encoding::text::encode(&mut body, &registry),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )
    } else {
        (
            prometheus_client::encoding::prometheus_text::encode(&mut body, &registry),
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        )
    };
    if encoded.is_err() {
        tracing::error!("encoding the metrics failed");
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding the metrics failed; see tierd's log\n",
        )
            .into_response();
    }
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
