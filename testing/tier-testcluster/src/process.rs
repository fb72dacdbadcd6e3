//! The child processes of a control plane: spawned with their output in log files, killed and
//! reaped on drop, and recorded in their run directory so a later run can end what a killed
//! test process left behind ([`reap_orphans`]).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::Error;

/// A running child, killed (SIGKILL) and waited for on drop.
#[derive(Debug)]
pub struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Spawns `program` with `args`, its stdout and stderr appended to `<run>/<name>.log`, and
    /// records its pid in `<run>/pids`.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the log cannot be opened or the program cannot be spawned.
    pub fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        run: &Path,
    ) -> Result<Self, Error> {
        let log = run.join(format!("{name}.log"));
        let open = || {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .map_err(|e| Error::io(&log, e))
        };
        let (stdout, stderr) = (open()?, open()?);
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| Error::io(program, e))?;
        let pids = run.join("pids");
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&pids)
            .map_err(|e| Error::io(&pids, e))?;
        // The canonical path, as /proc/<pid>/exe shows it, for `reap_orphans` to compare.
        let exe = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_owned());
        writeln!(file, "{} {}", child.id(), exe.display()).map_err(|e| Error::io(&pids, e))?;
        Ok(Self { name, child, log })
    }

    /// Its log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, if it exited; the error names it and holds the end of its log.
    pub fn check_running(&mut self) -> Result<(), Error> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(Error::Exited {
                process: self.name,
                status: status.to_string(),
                log: self.log.clone(),
                tail: self.log_tail(30),
            }),
            Err(e) => Err(Error::io(&self.log, e)),
        }
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        crate::binaries::tail(&String::from_utf8_lossy(&text), lines)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The directory under which every run directory lives.
pub fn runs_root() -> PathBuf {
    std::env::temp_dir().join("tier-testcluster")
}

/// Ends the processes recorded in run directories whose owner (the test process that started
/// them) is gone, and removes those directories. A process is ended only if its pid still runs
/// the recorded executable. Linux only (it reads `/proc`); elsewhere it does nothing.
pub fn reap_orphans() {
    reap_orphans_in(&runs_root());
}

/// [`reap_orphans`] among the run directories under `root`.
pub fn reap_orphans_in(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    if !Path::new("/proc/self").exists() {
        return;
    }
    for entry in entries.flatten() {
        let dir = entry.path();
        let Some(owner) = std::fs::read_to_string(dir.join("owner"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        let pids = std::fs::read_to_string(dir.join("pids")).unwrap_or_default();
        for line in pids.lines() {
            let Some((pid, exe)) = line.split_once(' ') else {
                continue;
            };
            let Ok(pid) = pid.parse::<u32>() else {
                continue;
            };
            let running = std::fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|path| path.to_string_lossy().starts_with(exe));
            if running {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
