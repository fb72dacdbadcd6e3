//! Builds kube [`Client`]s the way kube users expect: [`client`] for everything an embedder
//! shares (kube's defaults, retries included), [`writer_client`] for tierd's writes (retries
//! off).
//!
//! Where the configuration comes from, in order:
//!
//! 1. [`ClientOptions::in_cluster`]: the pod's service account only
//!    (`KUBERNETES_SERVICE_HOST`/`_PORT`, `/var/run/secrets/kubernetes.io/serviceaccount/`).
//! 2. [`ClientOptions::kubeconfig`]: that file, with the selected context (or its
//!    current-context).
//! 3. [`ClientOptions::context`] alone: `KUBECONFIG` or `~/.kube/config`, that context.
//! 4. Nothing set: `Config::infer` (`KUBECONFIG` or `~/.kube/config`, else in-cluster).
//!
//! # Retries
//!
//! kube 5 wraps every client in a retry layer that repeats 429, 503 and 504 answers up to 15 times.
//! For tierd's writes that would hide failures from the core (and its status) for minutes, so
//! [`KubeWriter`](crate::writer::KubeWriter) should get a client from [`writer_client`], which sets
//! `kube::Config::default_retry` to `false`: every failure reaches the core once, and the core's
//! backoff is the only retry loop for writes.
//!
//! Nothing else changes: [`client`] and [`client_from_config`] keep kube's defaults, so an
//! embedder's shared client (its own calls, the Tier watch, Events) keeps its retries. tierd
//! itself builds both from one [`config`]: the shared one (Events, the metrics reviews), and a
//! second without retries for its writes and for its own retry loops (the watches, the
//! identity, the certificate), which pace themselves
//! ([`RetryBackoff`](crate::backoff::RetryBackoff)): under a watch, kube's 15 retries of a 503
//! would hide an outage from it for minutes and delay its recovery.
//!
//! # TLS
//!
//! kube uses rustls. `install_crypto_provider` selects `ring` as the process-wide rustls
//! provider (a no-op if one is installed already), so building a client never panics for lack
//! of, or ambiguity between, providers. [`client`] and [`client_from_config`] call it.
//!
//! ```no_run
//! # async fn example() -> Result<(), tier_kube::client::ClientError> {
//! let options = tier_kube::client::ClientOptions {
//!     context: Some("kind-antrea".into()),
//!     ..Default::default()
//! };
//! let client = tier_kube::client::client(&options).await?;
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Where to find the cluster and credentials. The default infers both, like `kubectl`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientOptions {
    /// A kubeconfig file to read instead of `KUBECONFIG` / `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use instead of the current-context.
    pub context: Option<String>,
    /// Use only the in-cluster service account (ignores the two fields above).
    pub in_cluster: bool,
}

/// Building a client failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file given could not be read or parsed.
    #[error("cannot read kubeconfig {path}: {source}; check the path and the file's YAML")]
    ReadKubeconfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig holds no usable context, cluster or user for the selection.
    #[error("cannot use the kubeconfig: {0}; check the context name and its cluster and user")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    /// The in-cluster configuration is missing or incomplete.
    #[error(
        "cannot load the in-cluster configuration: {0}; run in a pod with a service account, \
         or pass a kubeconfig"
    )]
    InCluster(#[source] kube::config::InClusterError),
    /// Neither a kubeconfig nor an in-cluster configuration was found.
    #[error(
        "no Kubernetes configuration found: {0}; set KUBECONFIG, pass a kubeconfig or run in a pod"
    )]
    Infer(#[source] kube::config::InferConfigError),
    /// The configuration was loaded but the client could not be built (TLS, credentials).
    #[error(
        "cannot build the Kubernetes client: {0}; check the kubeconfig's certificates and credentials"
    )]
    Build(#[source] kube::Error),
}

/// Loads the configuration `options` select (see the module docs), as kube builds it.
pub async fn config(options: &ClientOptions) -> Result<Config, ClientError> {
    let selection = KubeConfigOptions {
        context: options.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = if options.in_cluster {
        Config::incluster().map_err(ClientError::InCluster)?
    } else if let Some(path) = &options.kubeconfig {
        let kubeconfig =
            Kubeconfig::read_from(path).map_err(|source| ClientError::ReadKubeconfig {
                path: path.clone(),
                source,
            })?;
        Config::from_custom_kubeconfig(kubeconfig, &selection)
            .await
            .map_err(ClientError::Kubeconfig)?
    } else if options.context.is_some() {
        Config::from_kubeconfig(&selection)
            .await
            .map_err(ClientError::Kubeconfig)?
    } else {
        Config::infer().await.map_err(ClientError::Infer)?
    };
    Ok(config)
}

/// A client for the configuration `options` select, with kube's defaults (retries on): the
/// one to share. Build the writer's from the same [`config`] with [`writer_client`].
pub async fn client(options: &ClientOptions) -> Result<Client, ClientError> {
    client_from_config(config(options).await?)
}

/// A client for `config` as it is, with the `ring` crypto provider installed. Must be called
/// within a tokio runtime.
pub fn client_from_config(config: Config) -> Result<Client, ClientError> {
    install_crypto_provider();
    Client::try_from(config).map_err(ClientError::Build)
}

/// A client for `config` with kube's retry layer off (whatever `config` said): the one for
/// [`KubeWriter`](crate::writer::KubeWriter). Must be called within a tokio runtime.
pub fn writer_client(mut config: Config) -> Result<Client, ClientError> {
    config.default_retry = false;
    client_from_config(config)
}

/// `client`, calling `answered` each time the API server answers a request with a success
/// (2xx). Requests, answers and errors pass through unchanged; the returned client has kube's
/// retries exactly when `client` has.
///
/// A watch that starts again after an outage yields nothing until something changes, so its
/// retry loop cannot see from the watch alone that the server is back: the listers and the
/// policy caches watch through such a client and end their outage log at the first answer.
/// Spawns a task (kube's request buffer), so it must be called within a tokio runtime; the
/// task ends when the last clone of the returned client is dropped.
pub(crate) fn observed(client: Client, answered: impl Fn() + Send + Sync + 'static) -> Client {
    let namespace = client.default_namespace().to_owned();
    Client::new(
        Observed {
            client,
            answered: Arc::new(answered),
        },
        namespace,
    )
}

/// The service of [`observed`]: the inner client's `send`, then the report.
#[derive(Clone)]
struct Observed {
    client: Client,
    answered: Arc<dyn Fn() + Send + Sync>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<http::Request<kube::client::Body>> for Observed {
    type Response = http::Response<kube::client::Body>;
    type Error = BoxError;
    type Future =
        Pin<Box<dyn Future<Output = Result<http::Response<kube::client::Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // The inner client's buffer is awaited in `send`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let client = self.client.clone();
        let answered = Arc::clone(&self.answered);
        Box::pin(async move {
            // kube's error goes back boxed; the outer client unboxes it as it was.
            let response = client.send(request).await.map_err(Box::new)?;
            if response.status().is_success() {
                answered();
            }
            Ok(response)
        })
    }
}

/// Installs rustls' `ring` provider as the process default, unless one is installed already.
/// Safe to call any number of times, from any thread.
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race against another installer is fine: a provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    const KUBECONFIG: &str = r#"
apiVersion: v1
kind: Config
current-context: one
clusters:
- name: c1
  cluster:
    server: http://127.0.0.1:6001
- name: c2
  cluster:
    server: http://127.0.0.1:6002
users:
- name: u
  user:
    token: abc
contexts:
- name: one
  context: {cluster: c1, user: u}
- name: two
  context: {cluster: c2, user: u}
"#;

    fn kubeconfig_file() -> (PathBuf, impl Drop) {
        struct Remove(PathBuf);
        impl Drop for Remove {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        let path = std::env::temp_dir().join(format!(
            "tier-kube-client-test-{}-{}.yaml",
            std::process::id(),
            fastrand_suffix()
        ));
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(KUBECONFIG.as_bytes()).unwrap();
        (path.clone(), Remove(path))
    }

    fn fastrand_suffix() -> u128 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    }

    #[tokio::test]
    async fn explicit_kubeconfig_uses_its_current_context() {
        let (path, _guard) = kubeconfig_file();
        let options = ClientOptions {
            kubeconfig: Some(path),
            ..Default::default()
        };
        let config = config(&options).await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:6001/");
        assert!(config.default_retry, "a shared client keeps kube's retries");
        client(&options).await.unwrap();
    }

    #[tokio::test]
    async fn context_selection() {
        let (path, _guard) = kubeconfig_file();
        let options = ClientOptions {
            kubeconfig: Some(path),
            context: Some("two".into()),
            ..Default::default()
        };
        let config = config(&options).await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:6002/");
    }

    #[tokio::test]
    async fn unknown_context_is_a_kubeconfig_error() {
        let (path, _guard) = kubeconfig_file();
        let options = ClientOptions {
            kubeconfig: Some(path),
            context: Some("three".into()),
            ..Default::default()
        };
        let error = config(&options).await.unwrap_err();
        assert!(matches!(error, ClientError::Kubeconfig(_)), "{error}");
        assert!(
            error.to_string().contains("check the context name"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn missing_kubeconfig_file_names_the_path() {
        let options = ClientOptions {
            kubeconfig: Some("/nonexistent/kubeconfig".into()),
            ..Default::default()
        };
        let error = config(&options).await.unwrap_err();
        assert!(
            matches!(error, ClientError::ReadKubeconfig { .. }),
            "{error}"
        );
        assert!(
            error.to_string().contains("/nonexistent/kubeconfig"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn only_the_writer_client_turns_retries_off() {
        let config = Config::new("http://127.0.0.1:1".parse().unwrap());
        assert!(config.default_retry, "kube's default is to retry");
        client_from_config(config.clone()).unwrap();
        writer_client(config).unwrap();
        // Behaviour (a 503 answered once to the writer, retried for the shared client) is
        // tested against the test API server in tests/writer.rs.
    }

    #[test]
    fn installing_the_provider_twice_is_fine() {
        install_crypto_provider();
        install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
