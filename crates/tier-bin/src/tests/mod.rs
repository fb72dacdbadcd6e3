//! The shipped manifests in `deploy/` checked against the command line they run.

mod deploy;
mod kustomize;
mod policy;
