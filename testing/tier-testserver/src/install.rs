//! Objects exactly as tierd's install ships them, read from `deploy/`, so tests follow the
//! manifests instead of copying them.

use crate::objects::ObjectKind;
use crate::store::Store;

/// `deploy/components/self-signed-cert/secret.yaml`: the Secret tierd fills with its CA and
/// serving certificate, shipped empty.
const SHIPPED_SECRET: &str =
    include_str!("../../../deploy/components/self-signed-cert/secret.yaml");

/// The shipped self-signed certificate Secret could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The manifest is not the YAML object it should be.
    #[error("deploy/components/self-signed-cert/secret.yaml is not valid YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// The store refused it.
    #[error("the store refused the shipped Secret: {0:?}")]
    Store(crate::status::StatusError),
}

/// Puts the self-signed certificate's Secret, as the install ships it (empty, in
/// `kube-system`), into `store`.
///
/// # Errors
///
/// [`InstallError`] when the manifest does not parse or the store refuses it.
pub fn install_shipped_secret(store: &Store) -> Result<(), InstallError> {
    let secret: serde_json::Value = serde_yaml::from_str(SHIPPED_SECRET)?;
    store
        .put_object(ObjectKind::Secret, "kube-system", secret)
        .map_err(InstallError::Store)?;
    Ok(())
}
