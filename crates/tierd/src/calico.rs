//! Calico's part of the assembly ([`Backend`] for [`Calico`]): the Tier API to use, and no
//! part of its own. Calico protects its built-in Tiers itself (its API pins their order and
//! default action, an admission policy refuses their deletion), so tierd serves no Tier
//! webhook, keeps no policy caches, asks no identity and signs no certificate for Calico.

use axum::Router;
use tier_core::calico::Calico;
use tier_kube::calico::{CalicoApi, CalicoTier};
use tier_kube::{KubeLister, KubeWriter};
use tier_server::CheckState;
use tokio::sync::watch;

use crate::StartError;
use crate::backend::{Backend, Serving, Start};

/// What only Calico's assembly can be told: the Tier API
/// ([`Builder::calico_api`](crate::Builder::calico_api)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CalicoSettings {
    /// The group/version Calico's Tiers are read and written at.
    pub api: CalicoApi,
}

impl CalicoSettings {
    /// Settings for `api`.
    pub fn new(api: CalicoApi) -> Self {
        Self { api }
    }
}

impl Backend for Calico {
    type Object = CalicoTier;
    type Settings = CalicoSettings;
    type Parts = ();
    type Writer = KubeWriter<CalicoTier>;

    fn settings() -> CalicoSettings {
        CalicoSettings::default()
    }

    fn watch_tiers(
        client: &kube::Client,
        settings: &CalicoSettings,
    ) -> Result<KubeLister<CalicoTier>, tier_kube::ListerError> {
        crate::watch_resource(client, settings.api.resource())
    }

    fn start(_start: Start<'_, Self>) -> Result<(), StartError> {
        Ok(())
    }

    fn writer((): &(), writer: KubeWriter<CalicoTier>) -> Self::Writer {
        writer
    }

    fn serve((): &mut (), _serving: Serving<'_, Self>) {}

    fn webhook((): &()) -> Option<Router> {
        None
    }

    fn certificate((): &()) -> Option<watch::Receiver<CheckState>> {
        None
    }
}
