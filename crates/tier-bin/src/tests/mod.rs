//! The shipped manifests in `deploy/` checked against the command line they run, and the
//! generated tables of `docs/REFERENCE.md` against the code (`reference`).

mod deploy;
mod kustomize;
mod policy;
mod reference;
