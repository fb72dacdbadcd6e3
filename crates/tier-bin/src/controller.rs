//! `--controller antrea|calico`: what the commands do differently per controller, one
//! implementation each ([`ControllerMode`]); `main` picks the implementation once, from the
//! flag, and every command is generic over it.
//!
//! In Calico mode tierd has no Tier webhook (Calico's API pins its built-in Tiers and refuses
//! their deletion itself), so the flags that only configure Antrea's webhook are refused with
//! exit 2 rather than silently ignored: `--webhook-listen ADDR` (only `--webhook-listen ""` is
//! accepted), `--self-signed-cert`, `--client-ca`, `--controller-user`, `--priority-claims`, `--feature-gates`
//! (Antrea's), and `--tls-cert`/`--tls-key` without `--metrics-auth` (TLS would serve nothing
//! else). `run` names every refused flag in one message, together with the flags that lack
//! what they need ([`RunArgs::combination_problems`]), before any request.

use std::net::SocketAddr;

use tier_core::calico::{self, Calico};
use tier_core::{Antrea, DesiredSet};
use tierd::calico::CalicoSettings;
use tierd::tiers_file;

use crate::cli::FeatureGates;
use crate::cli::{ClusterArgs, RunArgs};
use crate::commands::CommandError;
use crate::daemon;
use crate::plan::Planned;

/// The webhook port's address when `--webhook-listen` is not given (Antrea mode).
pub const DEFAULT_WEBHOOK_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 9443);

/// What a command needs to know about the controller `--controller` selects.
pub trait ControllerMode: tierd::backend::Backend + Planned {
    /// The desired set: the `--tiers` file in this controller's fields, or its default Tiers.
    /// Refuses flags of another controller first (exit 2, before any request).
    fn desired(args: &ClusterArgs) -> Result<DesiredSet<Self>, CommandError>;

    /// The assembly's settings the flags select (the Tier API, for Calico).
    fn settings_from(args: &ClusterArgs) -> Self::Settings;

    /// Refuses `run`'s flags this controller has no use for, and flags given without what they
    /// need, every one in one message (exit 2, before any request); the webhook's address, if
    /// it has a webhook port.
    fn webhook_listen(args: &RunArgs) -> Result<Option<SocketAddr>, CommandError>;

    /// The builder with this controller's own settings from the flags.
    fn configure(builder: tierd::Builder<Self>, args: &RunArgs) -> tierd::Builder<Self>;
}

impl ControllerMode for Antrea {
    /// The `--tiers` file, read by Antrea's parser and checked against the rules the
    /// `--feature-gates` select (a Tier at 220 with `ClusterNetworkPolicy=true` is an input
    /// error, exit 2), or Antrea's six.
    fn desired(args: &ClusterArgs) -> Result<DesiredSet, CommandError> {
        let Some(path) = &args.tiers else {
            return Ok(DesiredSet::antrea());
        };
        let rules = args.feature_gates.rules();
        Ok(tiers_file::load(path, |text| {
            tiers_file::parse_with(text, &rules)
        })?)
    }

    fn settings_from(_args: &ClusterArgs) -> tierd::antrea::AntreaSettings {
        tierd::antrea::AntreaSettings::default()
    }

    fn webhook_listen(args: &RunArgs) -> Result<Option<SocketAddr>, CommandError> {
        refuse(args.combination_problems(&[]))?;
        Ok(args.listen.map_or(Some(DEFAULT_WEBHOOK_LISTEN), |l| l.0))
    }

    fn configure(builder: tierd::Builder, args: &RunArgs) -> tierd::Builder {
        let mut builder = builder.rules(args.cluster.feature_gates.rules());
        if let Some(user) = &args.controller_user {
            builder = builder.controller_user(user);
        }
        if let Some(self_signed) = daemon::self_signed(args) {
            builder = builder.self_signed_cert(self_signed);
        }
        if let Some(claims) = args.claims.config(args.pod_name.as_deref()) {
            builder = builder.priority_claims(claims);
        }
        builder
    }
}

impl ControllerMode for Calico {
    /// The `--tiers` file in Calico's fields (`name`, `order`, `defaultAction`), the built-in
    /// Tiers pinned to Calico's values, or Calico's three built-in Tiers.
    fn desired(args: &ClusterArgs) -> Result<DesiredSet<Calico>, CommandError> {
        if args.feature_gates != FeatureGates::default() {
            return Err(refused(&["--feature-gates (Antrea's feature gates)"]));
        }
        let Some(path) = &args.tiers else {
            return Ok(DesiredSet::<Calico>::calico());
        };
        let rules = calico::Rules::default();
        Ok(tiers_file::load(path, |text| {
            tiers_file::parse_calico(text, &rules)
        })?)
    }

    fn settings_from(args: &ClusterArgs) -> CalicoSettings {
        CalicoSettings::new(args.calico_api)
    }

    fn webhook_listen(args: &RunArgs) -> Result<Option<SocketAddr>, CommandError> {
        // (the flag, as the refusal names it)
        let mut refused: Vec<(&str, &str)> = Vec::new();
        if let Some(crate::cli::Listen(Some(_))) = args.listen {
            refused.push((
                "--webhook-listen",
                "--webhook-listen ADDR (give --webhook-listen \"\" or leave it out)",
            ));
        }
        if args.self_signed.self_signed_cert {
            refused.push(("--self-signed-cert", "--self-signed-cert"));
        }
        if args.client_ca.is_some() {
            refused.push(("--client-ca", "--client-ca"));
        }
        if args.controller_user.is_some() {
            refused.push(("--controller-user", "--controller-user"));
        }
        if args.cluster.feature_gates != FeatureGates::default() {
            refused.push((
                "--feature-gates",
                "--feature-gates (Antrea's feature gates)",
            ));
        }
        if args.claims.priority_claims {
            refused.push(("--priority-claims", "--priority-claims"));
        }
        if !args.metrics_auth {
            match (&args.tls_cert, &args.tls_key) {
                (Some(_), Some(_)) => refused.push((
                    "--tls-cert",
                    "--tls-cert and --tls-key without --metrics-auth (TLS would serve nothing else)",
                )),
                (Some(_), None) => refused.push((
                    "--tls-cert",
                    "--tls-cert without --metrics-auth (TLS would serve nothing else)",
                )),
                (None, Some(_)) => refused.push((
                    "--tls-key",
                    "--tls-key without --metrics-auth (TLS would serve nothing else)",
                )),
                (None, None) => {}
            }
        }
        let removed: Vec<&str> = refused.iter().map(|(flag, _)| *flag).collect();
        let named: Vec<&str> = refused.iter().map(|(_, named)| *named).collect();
        let mut problems = Vec::new();
        if !named.is_empty() {
            problems.push(no_webhook(&named));
        }
        problems.extend(args.combination_problems(&removed));
        refuse(problems)?;
        Ok(None)
    }

    fn configure(builder: tierd::Builder<Calico>, args: &RunArgs) -> tierd::Builder<Calico> {
        builder.calico_api(args.cluster.calico_api)
    }
}

/// Why flags of Antrea's webhook are refused in Calico mode, naming them all.
fn no_webhook(flags: &[&str]) -> String {
    format!(
        "--controller calico has no Tier webhook (Calico protects its built-in Tiers itself), \
         so these flags do nothing; remove them: {}",
        flags.join(", ")
    )
}

/// Flags of Antrea's webhook given in Calico mode (`plan` and `ensure`: only `--feature-gates`).
fn refused(flags: &[&str]) -> CommandError {
    CommandError::Flags(no_webhook(flags))
}

/// `Err` (exit 2) naming every problem, if there is one.
fn refuse(problems: Vec<String>) -> Result<(), CommandError> {
    match crate::cli::refusal(&problems) {
        Some(message) => Err(CommandError::Flags(message)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command, exit};

    fn run_args(args: &[&str]) -> RunArgs {
        let cli = Cli::try_parse_from(["tierd", "run"].iter().chain(args)).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        args
    }

    #[test]
    fn calico_mode_has_no_webhook_port_and_refuses_the_webhooks_flags_with_exit_2() {
        let calico = ["--controller", "calico"];
        assert_eq!(Calico::webhook_listen(&run_args(&calico)).unwrap(), None);
        let empty = run_args(&["--controller", "calico", "--webhook-listen", ""]);
        assert_eq!(Calico::webhook_listen(&empty).unwrap(), None);
        assert_eq!(
            Antrea::webhook_listen(&run_args(&[])).unwrap(),
            Some(DEFAULT_WEBHOOK_LISTEN)
        );
        for flags in [
            &["--webhook-listen", "0.0.0.0:9443"][..],
            &["--controller-user", "me"],
            &["--priority-claims"],
            &["--tls-cert", "c.pem", "--tls-key", "k.pem"],
            &["--tls-cert", "c", "--tls-key", "k", "--self-signed-cert"],
        ] {
            let args = run_args(&[&calico[..], flags].concat());
            let error = Calico::webhook_listen(&args).unwrap_err();
            assert_eq!(error.exit_code(), exit::USAGE, "{flags:?}");
            assert!(error.to_string().contains(flags[0]), "{error}");
        }
        // Metrics over TLS is not the webhook's: allowed.
        let metrics = run_args(&[
            "--controller",
            "calico",
            "--metrics-auth",
            "--tls-cert",
            "c",
            "--tls-key",
            "k",
        ]);
        assert_eq!(Calico::webhook_listen(&metrics).unwrap(), None);
        let gates = run_args(&[
            "--controller",
            "calico",
            "--feature-gates",
            "ClusterNetworkPolicy=true",
        ]);
        let error = Calico::desired(&gates.cluster).unwrap_err();
        assert_eq!(error.exit_code(), exit::USAGE);
    }

    #[test]
    fn calico_mode_names_every_refused_flag_in_one_message_and_only_what_to_remove() {
        let args = run_args(&[
            "--controller",
            "calico",
            "--self-signed-cert",
            "--client-ca",
            "ca.pem",
            "--controller-user",
            "me",
            "--feature-gates",
            "ClusterNetworkPolicy=true",
        ]);
        let error = Calico::webhook_listen(&args).unwrap_err();
        assert_eq!(error.exit_code(), exit::USAGE);
        // One problem: remove them. Not "--self-signed-cert needs --tls-cert", which would
        // send the operator the wrong way.
        assert_eq!(
            error.to_string(),
            "the flags cannot be used as given (1 problem(s)); nothing was sent to the API \
             server:\n  - --controller calico has no Tier webhook (Calico protects its built-in \
             Tiers itself), so these flags do nothing; remove them: --self-signed-cert, \
             --client-ca, --controller-user, --feature-gates (Antrea's feature gates)"
        );
        // A flag Calico keeps, without what it needs, is named beside the refused ones.
        let args = run_args(&[
            "--controller",
            "calico",
            "--metrics-auth",
            "--client-ca",
            "a",
        ]);
        let message = Calico::webhook_listen(&args).unwrap_err().to_string();
        assert!(message.contains("(2 problem(s))"), "{message}");
        assert!(message.contains("remove them: --client-ca"), "{message}");
        assert!(
            message.contains("--metrics-auth needs --tls-cert and --tls-key"),
            "{message}"
        );
        let key = run_args(&["--controller", "calico", "--tls-key", "k"]);
        let message = Calico::webhook_listen(&key).unwrap_err().to_string();
        assert!(
            message.contains("remove them: --tls-key without"),
            "{message}"
        );
        assert!(!message.contains("needs --tls-cert"), "{message}");
    }

    #[tokio::test]
    async fn run_refuses_the_flags_before_reading_the_tiers_file_or_the_kubeconfig() {
        let args = run_args(&[
            "--controller",
            "calico",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--tiers",
            "/nonexistent/tiers.yaml",
            "--feature-gates",
            "ClusterNetworkPolicy=true",
            "--self-signed-cert",
        ]);
        let error = daemon::run::<Calico>(&args).await.unwrap_err();
        assert!(matches!(error, CommandError::Flags(_)), "{error:?}");
        let message = error.to_string();
        assert!(
            message.contains("remove them: --self-signed-cert, --feature-gates"),
            "{message}"
        );
        let args = run_args(&["--kubeconfig", "/nonexistent/kubeconfig", "--metrics-auth"]);
        let error = daemon::run::<Antrea>(&args).await.unwrap_err();
        assert!(matches!(error, CommandError::Flags(_)), "{error:?}");
    }

    #[test]
    fn calico_mode_ensures_calicos_built_ins_at_the_api_chosen() {
        let args = run_args(&["--controller", "calico"]);
        assert_eq!(
            Calico::desired(&args.cluster).unwrap(),
            DesiredSet::<Calico>::calico()
        );
        assert_eq!(
            Calico::settings_from(&args.cluster).api,
            tier_kube::calico::CalicoApi::V3
        );
        let v1 = run_args(&[
            "--controller",
            "calico",
            "--calico-api",
            "crd.projectcalico.org/v1",
        ]);
        assert_eq!(
            Calico::settings_from(&v1.cluster).api,
            tier_kube::calico::CalicoApi::CrdV1
        );
        let wrong = Cli::try_parse_from(["tierd", "run", "--calico-api", "v3"]).unwrap_err();
        assert_eq!(wrong.exit_code(), i32::from(exit::USAGE));
    }
}
