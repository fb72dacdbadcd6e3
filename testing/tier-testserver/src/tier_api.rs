//! The Tier resources as the Tier verbs see them ([`TierApi`]): where the objects are stored,
//! their schema, and the admission that runs between schema validation and storage. One
//! implementation per controller: [`AntreaTiers`] (the configurable admission: none, Antrea's
//! rules in process, or a real webhook) and [`CalicoTiers`] (Calico's admission policy).

use std::future::Future;

use crate::admission::AdmissionInput;
use crate::antrea::Operation;
use crate::calico::{self, CalicoApi};
use crate::context::Shared;
use crate::crd::Schema;
use crate::status::StatusError;
use crate::store::TableId;
use crate::tier;

/// A Tier resource served by the Tier verbs.
pub(crate) trait TierApi: Sync {
    /// The table its objects live in.
    fn table(&self) -> TableId;
    /// Its CRD schema.
    fn schema(&self) -> &dyn Schema;
    /// Validating admission of one write (after schema validation, before storage).
    fn review(
        &self,
        shared: &Shared,
        input: AdmissionInput<'_>,
    ) -> impl Future<Output = Result<(), StatusError>> + Send;
}

/// Antrea's Tier, `tiers.crd.antrea.io`.
pub(crate) struct AntreaTiers;

impl TierApi for AntreaTiers {
    fn table(&self) -> TableId {
        TableId::Antrea
    }

    fn schema(&self) -> &dyn Schema {
        &tier::Schema
    }

    async fn review(&self, shared: &Shared, input: AdmissionInput<'_>) -> Result<(), StatusError> {
        let admission = shared.admission();
        admission.review(&shared.store, input).await
    }
}

/// Calico's Tier at the configured API.
pub(crate) struct CalicoTiers(pub(crate) CalicoApi);

impl TierApi for CalicoTiers {
    fn table(&self) -> TableId {
        TableId::Calico
    }

    fn schema(&self) -> &dyn Schema {
        &self.0
    }

    async fn review(&self, _: &Shared, input: AdmissionInput<'_>) -> Result<(), StatusError> {
        match input.operation {
            Operation::Delete => calico::review_delete(self.0, input.name),
            Operation::Create | Operation::Update => Ok(()),
        }
    }
}
