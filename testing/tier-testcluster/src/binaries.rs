//! The control plane's two binaries, built on first use from `testing/control-plane` (a Go
//! module pinning kube-apiserver and etcd) and cached by version under the cargo target dir.
//!
//! Where they come from, first match wins:
//! 1. `TIER_TESTCLUSTER_BIN`: a directory holding `kube-apiserver` and `etcd`, used as is;
//! 2. the cache `<root>/<kubernetes version>/bin/`, where `<root>` is `TIER_TESTCLUSTER_CACHE`,
//!    else `<target dir>/control-plane` (the target dir is `CARGO_TARGET_DIR`, else the
//!    ancestor of the running executable that holds cargo's `CACHEDIR.TAG`, else the
//!    workspace's `target/`). A stamp beside the binaries holds a digest of the module's
//!    `go.mod` and `go.sum`: when the pins change, the binaries are built again.
//!
//! Building holds an exclusive lock on `<root>/<version>/.lock`, so parallel test processes
//! build once and the others wait, then find the stamp. The build writes into a fresh
//! directory and renames each binary into place before writing the stamp: an interrupted build
//! leaves no half binary behind a valid stamp.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::Error;

/// Overrides where the binaries come from: a directory holding `kube-apiserver` and `etcd`.
pub const BIN_ENV: &str = "TIER_TESTCLUSTER_BIN";
/// Overrides the cache root (default `<target dir>/control-plane`).
pub const CACHE_ENV: &str = "TIER_TESTCLUSTER_CACHE";

/// kube-apiserver and etcd, ready to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binaries {
    /// The `kube-apiserver` executable.
    pub kube_apiserver: PathBuf,
    /// The `etcd` executable.
    pub etcd: PathBuf,
    /// The Kubernetes version they were built at (`v1.37.2`), or `custom` from [`BIN_ENV`].
    pub version: String,
}

/// The Go module that pins the control plane.
pub fn module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../control-plane")
}

/// The binaries, built (once per process, and once per machine and version) if needed; see the
/// [module docs](self). Blocks for the length of a build (minutes when cold).
///
/// # Errors
///
/// [`Error::GoMissing`] without `go`, [`Error::Build`] when the build fails,
/// [`Error::Io`] when the cache cannot be written.
pub fn binaries() -> Result<Binaries, Error> {
    static BUILT: OnceLock<Binaries> = OnceLock::new();
    static BUILDING: Mutex<()> = Mutex::new(());
    if let Some(built) = BUILT.get() {
        return Ok(built.clone());
    }
    // One thread of this process builds; the others wait here, then find BUILT set.
    let _guard = BUILDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(built) = BUILT.get() {
        return Ok(built.clone());
    }
    let built = locate()?;
    Ok(BUILT.get_or_init(|| built).clone())
}

fn locate() -> Result<Binaries, Error> {
    if let Some(dir) = std::env::var_os(BIN_ENV) {
        let dir = PathBuf::from(dir);
        let binaries = Binaries {
            kube_apiserver: dir.join("kube-apiserver"),
            etcd: dir.join("etcd"),
            version: "custom".to_owned(),
        };
        for path in [&binaries.kube_apiserver, &binaries.etcd] {
            if !path.is_file() {
                return Err(Error::Build(format!(
                    "{BIN_ENV}={} holds no {}; unset it to build the control plane from \
                     testing/control-plane",
                    dir.display(),
                    path.display()
                )));
            }
        }
        return Ok(binaries);
    }
    let module = module_dir();
    let go_mod = read(&module.join("go.mod"))?;
    let go_sum = read(&module.join("go.sum"))?;
    let version = kubernetes_version(&go_mod).ok_or_else(|| {
        Error::Build(format!(
            "{} requires no k8s.io/kubernetes version",
            module.join("go.mod").display()
        ))
    })?;
    let digest = stamp(&go_mod, &go_sum);
    let dir = cache_root().join(&version);
    let bin = dir.join("bin");
    let binaries = Binaries {
        kube_apiserver: bin.join("kube-apiserver"),
        etcd: bin.join("etcd"),
        version: version.clone(),
    };
    let stamp_file = bin.join("stamp");
    let fresh = |binaries: &Binaries| {
        std::fs::read_to_string(&stamp_file).ok().as_deref() == Some(digest.as_str())
            && binaries.kube_apiserver.is_file()
            && binaries.etcd.is_file()
    };
    if fresh(&binaries) {
        return Ok(binaries);
    }
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let lock_path = dir.join(".lock");
    let lock = File::create(&lock_path).map_err(|e| Error::io(&lock_path, e))?;
    lock.lock().map_err(|e| Error::io(&lock_path, e))?;
    // Another process may have built while this one waited for the lock.
    if fresh(&binaries) {
        return Ok(binaries);
    }
    build(&module, &dir, &version)?;
    std::fs::write(&stamp_file, &digest).map_err(|e| Error::io(&stamp_file, e))?;
    // The lock is released when `lock` is dropped.
    drop(lock);
    Ok(binaries)
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| Error::io(path, e))
}

/// The version of `k8s.io/kubernetes` that `go.mod` requires.
fn kubernetes_version(go_mod: &str) -> Option<String> {
    go_mod.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let first = words.next()?;
        let module = if first == "require" {
            words.next()?
        } else {
            first
        };
        (module == "k8s.io/kubernetes")
            .then(|| words.next())
            .flatten()
            .map(str::to_owned)
    })
}

fn stamp(go_mod: &str, go_sum: &str) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    context.update(go_mod.as_bytes());
    context.update(b"\0");
    context.update(go_sum.as_bytes());
    context
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Where versions are cached; see the [module docs](self).
pub fn cache_root() -> PathBuf {
    if let Some(root) = std::env::var_os(CACHE_ENV) {
        return PathBuf::from(root);
    }
    target_dir().join("control-plane")
}

/// The cargo target dir this code runs from.
fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe
            .ancestors()
            .skip(1)
            .find(|dir| dir.join("CACHEDIR.TAG").is_file())
    {
        return dir.to_owned();
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target")
}

/// `go build` of both binaries into `dir/bin`.
fn build(module: &Path, dir: &Path, version: &str) -> Result<(), Error> {
    let go = find_go().ok_or(Error::GoMissing)?;
    let scratch = tempfile::Builder::new()
        .prefix("build-")
        .tempdir_in(dir)
        .map_err(|e| Error::io(dir, e))?;
    let started = std::time::Instant::now();
    eprintln!(
        "tier-testcluster: building kube-apiserver and etcd {version} from {} (minutes the \
         first time on a machine; cached in {})",
        module.display(),
        dir.display()
    );
    let mut out = scratch.path().as_os_str().to_owned();
    out.push("/");
    let output = Command::new(&go)
        .current_dir(module)
        .env("GOWORK", "off")
        .args(["build", "-trimpath", "-ldflags"])
        .arg(format!(
            "-s -w -X k8s.io/component-base/version.gitVersion={version}"
        ))
        .arg("-o")
        .arg(&out)
        .args([
            "k8s.io/kubernetes/cmd/kube-apiserver",
            "go.etcd.io/etcd/server/v3",
        ])
        .output()
        .map_err(|e| Error::io(&go, e))?;
    if !output.status.success() {
        return Err(Error::Build(format!(
            "`go build` in {} failed ({}): {}",
            module.display(),
            output.status,
            tail(&String::from_utf8_lossy(&output.stderr), 40)
        )));
    }
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| Error::io(&bin, e))?;
    // `go build` names a module root's binary after its last path element without the
    // major version: `server` for go.etcd.io/etcd/server/v3 (older Go: `v3`).
    let etcd = ["server", "v3"]
        .into_iter()
        .map(|name| scratch.path().join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::Build("`go build` wrote no etcd binary (server or v3)".to_owned()))?;
    for (from, to) in [
        (
            scratch.path().join("kube-apiserver"),
            bin.join("kube-apiserver"),
        ),
        (etcd, bin.join("etcd")),
    ] {
        std::fs::rename(&from, &to).map_err(|e| Error::io(&to, e))?;
    }
    eprintln!(
        "tier-testcluster: built the control plane in {:.0?}",
        started.elapsed()
    );
    Ok(())
}

/// `go` on PATH.
fn find_go() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("go"))
        .find(|candidate| candidate.is_file())
}

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_version_is_read_from_the_require_block_or_a_single_line() {
        let block = "module m\n\nrequire (\n\tk8s.io/api v0.37.2\n\tk8s.io/kubernetes v1.37.2\n)\n";
        assert_eq!(kubernetes_version(block).as_deref(), Some("v1.37.2"));
        let single = "module m\nrequire k8s.io/kubernetes v1.36.3\n";
        assert_eq!(kubernetes_version(single).as_deref(), Some("v1.36.3"));
        assert_eq!(kubernetes_version("module m\n"), None);
    }

    #[test]
    fn the_pinned_module_names_a_version() {
        let go_mod = std::fs::read_to_string(module_dir().join("go.mod")).unwrap();
        assert!(kubernetes_version(&go_mod).unwrap().starts_with("v1."));
    }

    #[test]
    fn the_stamp_follows_both_files() {
        assert_ne!(stamp("a", "b"), stamp("a", "c"));
        assert_ne!(stamp("ab", ""), stamp("a", "b"));
    }
}
