//! The writer side: [`MemoryWriter`] implements [`TierWriter`] as one API client.
//!
//! A call is recorded in the call log, meets the scripted or random faults, and then goes
//! through the server path (schema, admission, store) of the cluster. Dropping a call before it
//! answers (a caller's timeout) is safe: it is recorded as dropped and never applied.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use tier_core::{TierSpec, TierWriter};
//! use tier_memory::MemoryCluster;
//!
//! let cluster = MemoryCluster::new();
//! let second = cluster.writer("init-2");
//! second.create(&TierSpec::new("a", 1, "")).await.unwrap();
//! assert_eq!(cluster.calls().for_client("init-2").total(), 1);
//! # }
//! ```

use std::sync::Arc;

use async_trait::async_trait;
use tier_core::{Antrea, DesiredTier, TierWriter, WriteError};

use crate::backend::Backend;

use crate::calls::{CallOutcome, Verb};
use crate::cluster::ClusterInner;
use crate::faults::Effect;

/// One API client writing Tiers to the cluster. Cheap to clone.
#[derive(Debug)]
pub struct MemoryWriter<C: Backend = Antrea> {
    cluster: Arc<ClusterInner<C>>,
    client: Arc<str>,
}

impl<C: Backend> Clone for MemoryWriter<C> {
    fn clone(&self) -> Self {
        Self {
            cluster: Arc::clone(&self.cluster),
            client: Arc::clone(&self.client),
        }
    }
}

impl<C: Backend> MemoryWriter<C> {
    pub(crate) fn new(cluster: Arc<ClusterInner<C>>, client: &str) -> Self {
        Self {
            cluster,
            client: Arc::from(client),
        }
    }

    /// The client name its calls are recorded under.
    pub fn client(&self) -> &str {
        &self.client
    }

    async fn call(
        &self,
        verb: Verb,
        tier: &C::Spec,
        resource_version: &str,
    ) -> Result<(), WriteError> {
        let cluster = &self.cluster;
        let guard = cluster.recorder.start(&self.client, verb, tier.name());
        let plan = cluster.faults.plan(verb, tier.name(), &self.client);
        if !plan.delay.is_zero() {
            tokio::time::sleep(plan.delay).await;
        }
        let apply = || match verb {
            Verb::Create => cluster.create(tier),
            Verb::Update => cluster.update(tier, resource_version),
        };
        let (result, outcome) = match plan.effect {
            Effect::Hang => return std::future::pending().await,
            Effect::Fail(error) => (
                Err(error.clone()),
                CallOutcome::Failed {
                    error,
                    applied: false,
                },
            ),
            Effect::LoseResponse(error) => {
                let applied = apply().is_ok_and(|written| written.change.is_some());
                (Err(error.clone()), CallOutcome::Failed { error, applied })
            }
            Effect::Proceed => match apply() {
                Ok(_) => (Ok(()), CallOutcome::Ok),
                Err(error) => {
                    let error = WriteError::from(error);
                    (
                        Err(error.clone()),
                        CallOutcome::Failed {
                            error,
                            applied: false,
                        },
                    )
                }
            },
        };
        tracing::debug!(client = %self.client, %verb, tier = %tier.name(), ?outcome, "call answered");
        guard.finish(outcome);
        result
    }
}

#[async_trait]
impl<C: Backend> TierWriter<C> for MemoryWriter<C> {
    async fn create(&self, tier: &C::Spec) -> Result<(), WriteError> {
        self.call(Verb::Create, tier, "").await
    }

    async fn update(&self, tier: &C::Spec, resource_version: &str) -> Result<(), WriteError> {
        self.call(Verb::Update, tier, resource_version).await
    }
}
