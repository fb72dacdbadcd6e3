//! Instrumentation: every write call made through a [`MemoryWriter`](crate::MemoryWriter), with
//! its outcome, and how many calls were in flight at once per Tier.
//!
//! Tests assert exact call counts and the "never two calls in flight for one Tier" guarantee:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use tier_core::{TierSpec, TierWriter};
//! use tier_memory::{MemoryCluster, Verb};
//!
//! let cluster = MemoryCluster::new();
//! cluster.create(&TierSpec::new("a", 1, "")).await.unwrap();
//! let calls = cluster.calls();
//! assert_eq!(calls.count(Verb::Create), 1);
//! assert_eq!(calls.count_for(Verb::Create, "a"), 1);
//! assert_eq!(calls.failed(Verb::Create), 0);
//! assert_eq!(calls.peak_in_flight(), 1);
//! # }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tier_core::WriteError;

use crate::lock;

/// A write verb of the [`TierWriter`](tier_core::TierWriter) port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// `TierWriter::create`.
    Create,
    /// `TierWriter::update`.
    Update,
}

impl Verb {
    /// `"create"` or `"update"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Update => "update",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How one call ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallOutcome {
    /// It has not answered yet.
    InFlight,
    /// It succeeded (and was applied, unless it was a no-op).
    Ok,
    /// It reported `error`; `applied` tells whether the write took effect anyway (a lost
    /// response).
    Failed {
        /// The error the caller got.
        error: WriteError,
        /// Whether the store changed despite the error.
        applied: bool,
    },
    /// The caller dropped it before it answered (for example on its call timeout). Never
    /// applied.
    Dropped,
}

/// One call, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallRecord {
    /// The writer's client name (see [`MemoryCluster::writer`](crate::MemoryCluster::writer)).
    pub client: String,
    /// The verb.
    pub verb: Verb,
    /// The Tier's name.
    pub name: String,
    /// When the call started (tokio's clock).
    pub started: Instant,
    /// When it answered or was dropped.
    pub finished: Option<Instant>,
    /// How it ended.
    pub outcome: CallOutcome,
}

impl CallRecord {
    /// Whether the call reported an error (including lost responses).
    pub fn is_failed(&self) -> bool {
        matches!(self.outcome, CallOutcome::Failed { .. })
    }
}

/// (client, Tier name)
type Key = (String, String);

/// A copy of the call log at one moment, with counting helpers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallLog {
    records: Vec<CallRecord>,
    in_flight: BTreeMap<Key, usize>,
    peaks: BTreeMap<Key, usize>,
    concurrent_peaks: BTreeMap<String, usize>,
}

impl CallLog {
    /// Every call in start order.
    pub fn records(&self) -> &[CallRecord] {
        &self.records
    }

    /// The calls of one client only.
    pub fn for_client(&self, client: &str) -> CallLog {
        let mine = |key: &Key| key.0 == client;
        let peaks: BTreeMap<Key, usize> = self
            .peaks
            .iter()
            .filter(|(k, _)| mine(k))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        CallLog {
            records: self
                .records
                .iter()
                .filter(|r| r.client == client)
                .cloned()
                .collect(),
            in_flight: self
                .in_flight
                .iter()
                .filter(|(k, _)| mine(k))
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            concurrent_peaks: peaks.iter().map(|((_, n), v)| (n.clone(), *v)).collect(),
            peaks,
        }
    }

    /// All calls, of every verb.
    pub fn total(&self) -> usize {
        self.records.len()
    }

    /// Calls of `verb`.
    pub fn count(&self, verb: Verb) -> usize {
        self.matching(verb, None).count()
    }

    /// Calls of `verb` for the Tier `name`.
    pub fn count_for(&self, verb: Verb, name: &str) -> usize {
        self.matching(verb, Some(name)).count()
    }

    /// Calls of `verb` that reported an error.
    pub fn failed(&self, verb: Verb) -> usize {
        self.matching(verb, None).filter(|r| r.is_failed()).count()
    }

    /// Calls of `verb` for `name` that reported an error.
    pub fn failed_for(&self, verb: Verb, name: &str) -> usize {
        self.matching(verb, Some(name))
            .filter(|r| r.is_failed())
            .count()
    }

    /// Calls of `verb` that the caller dropped before they answered.
    pub fn dropped(&self, verb: Verb) -> usize {
        self.matching(verb, None)
            .filter(|r| r.outcome == CallOutcome::Dropped)
            .count()
    }

    /// Calls for `name` in flight now, across clients.
    pub fn in_flight(&self, name: &str) -> usize {
        self.in_flight
            .iter()
            .filter(|((_, n), _)| n == name)
            .map(|(_, v)| v)
            .sum()
    }

    /// The most calls for `name` one client ever had in flight at once.
    pub fn max_in_flight(&self, name: &str) -> usize {
        self.peaks
            .iter()
            .filter(|((_, n), _)| n == name)
            .map(|(_, v)| *v)
            .max()
            .unwrap_or(0)
    }

    /// The most calls for any one Tier any one client ever had in flight at once: at most 1
    /// means no client ever overlapped two calls for a Tier.
    pub fn peak_in_flight(&self) -> usize {
        self.peaks.values().copied().max().unwrap_or(0)
    }

    /// The most calls for `name` in flight at once across all clients.
    pub fn max_concurrent(&self, name: &str) -> usize {
        self.concurrent_peaks.get(name).copied().unwrap_or(0)
    }

    fn matching<'a>(
        &'a self,
        verb: Verb,
        name: Option<&'a str>,
    ) -> impl Iterator<Item = &'a CallRecord> + 'a {
        self.records
            .iter()
            .filter(move |r| r.verb == verb && name.is_none_or(|n| r.name == n))
    }
}

/// The live, shared call log.
#[derive(Clone, Debug, Default)]
pub(crate) struct Recorder {
    state: Arc<Mutex<RecorderState>>,
}

#[derive(Debug, Default)]
struct RecorderState {
    log: CallLog,
    /// Bumped by every reset, so calls started before it do not write into the new log.
    epoch: u64,
    /// Calls in flight per Tier, across clients.
    concurrent: BTreeMap<String, usize>,
}

impl Recorder {
    /// Records the start of a call; the guard records its end (or its drop).
    pub(crate) fn start(&self, client: &str, verb: Verb, name: &str) -> CallGuard {
        let mut state = lock(&self.state);
        let key = (client.to_owned(), name.to_owned());
        let n = state.log.in_flight.entry(key.clone()).or_insert(0);
        *n += 1;
        let n = *n;
        let peak = state.log.peaks.entry(key.clone()).or_insert(0);
        *peak = (*peak).max(n);
        let all = state.concurrent.entry(name.to_owned()).or_insert(0);
        *all += 1;
        let all = *all;
        let peak = state
            .log
            .concurrent_peaks
            .entry(name.to_owned())
            .or_insert(0);
        *peak = (*peak).max(all);
        let index = state.log.records.len();
        state.log.records.push(CallRecord {
            client: key.0.clone(),
            verb,
            name: key.1.clone(),
            started: now(),
            finished: None,
            outcome: CallOutcome::InFlight,
        });
        CallGuard {
            recorder: self.clone(),
            epoch: state.epoch,
            index,
            key,
            done: false,
        }
    }

    /// A copy of the log.
    pub(crate) fn log(&self) -> CallLog {
        lock(&self.state).log.clone()
    }

    /// Forgets every finished call; calls in flight stay counted.
    pub(crate) fn reset(&self) {
        let mut state = lock(&self.state);
        let state = &mut *state;
        state.epoch += 1;
        state.log.records.clear();
        state.log.peaks = state.log.in_flight.clone();
        state.log.concurrent_peaks = state.concurrent.clone();
    }
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// One call in progress: finish it with its outcome, or drop it (recorded as dropped).
#[derive(Debug)]
pub(crate) struct CallGuard {
    recorder: Recorder,
    epoch: u64,
    index: usize,
    key: Key,
    done: bool,
}

impl CallGuard {
    /// Records how the call ended.
    pub(crate) fn finish(mut self, outcome: CallOutcome) {
        self.end(outcome);
    }

    fn end(&mut self, outcome: CallOutcome) {
        if self.done {
            return;
        }
        self.done = true;
        let mut state = lock(&self.recorder.state);
        if let Some(n) = state.log.in_flight.get_mut(&self.key) {
            *n = n.saturating_sub(1);
        }
        if let Some(n) = state.concurrent.get_mut(&self.key.1) {
            *n = n.saturating_sub(1);
        }
        if state.epoch == self.epoch
            && let Some(record) = state.log.records.get_mut(self.index)
        {
            record.finished = Some(now());
            record.outcome = outcome;
        }
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.end(CallOutcome::Dropped);
    }
}
