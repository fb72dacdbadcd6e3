//! Property tests over random desired sets, observations and outcome sequences.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use support::{FakeCache, TestClock};
use tier_core::{
    Action, Decision, DesiredSet, Driver, DriverConfig, ErrorClass, MachineConfig, MockTierWriter,
    Mode, Observed, ObservedTier, TierLister, TierMachine, TierSpec, TierState, WriteError, decide,
};

fn desired_set() -> impl Strategy<Value = DesiredSet> {
    proptest::sample::subsequence((0i64..30).collect::<Vec<_>>(), 1..6).prop_map(|priorities| {
        let tiers = priorities
            .into_iter()
            .map(|p| TierSpec::new(format!("t{p}"), p, if p % 2 == 0 { "even" } else { "" }))
            .collect();
        DesiredSet::new(tiers, &Default::default()).unwrap()
    })
}

/// Observed Tiers: some desired names with random fields, plus names outside the desired set.
fn observed_rows() -> impl Strategy<Value = Vec<(String, i64, String)>> {
    proptest::collection::vec(
        (
            0i64..40,
            0i64..30,
            prop_oneof![Just(""), Just("even"), Just("x")],
        ),
        0..10,
    )
    .prop_map(|rows| {
        rows.into_iter()
            .map(|(n, p, d)| (format!("t{n}"), p, d.to_owned()))
            .collect()
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

proptest! {
    #[test]
    fn in_sync_exactly_when_fields_match(
        priority in 0i64..256, description in "[a-c]{0,2}",
        observed_priority in 0i64..256, observed_description in "[a-c]{0,2}",
    ) {
        let desired = TierSpec::new("t", priority, description.clone());
        let observed = Observed::Present(ObservedTier {
            name: "t".into(),
            priority: observed_priority,
            description: observed_description.clone(),
            resource_version: "1".into(),
            last_writer: None,
        });
        let matches = priority == observed_priority && description == observed_description;
        prop_assert_eq!(decide(&desired, &observed) == Decision::InSync, matches);
    }

    /// The driver writes only desired names, only after sync, and converges in `once` mode.
    #[test]
    fn the_driver_writes_only_desired_names_after_sync(
        desired in desired_set(),
        rows in observed_rows(),
        faults in proptest::collection::vec(0u8..4, 0..8),
    ) {
        let cache = FakeCache::unsynced();
        let names: BTreeSet<String> = desired.tiers().iter().map(|t| t.name.clone()).collect();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let faults = Arc::new(Mutex::new(faults));
        let mut writer = MockTierWriter::new();
        let (c, l, f) = (cache.clone(), log.clone(), faults.clone());
        let synced = move |c: &FakeCache| c.snapshot().tiers.is_some();
        let fault = move |f: &Mutex<Vec<u8>>| -> Option<WriteError> {
            match f.lock().unwrap().pop()? {
                0 => Some(WriteError::transient("503")),
                1 => Some(WriteError::stale("conflict")),
                2 => Some(WriteError::denied("denied")),
                _ => None,
            }
        };
        writer.expect_create().returning(move |t| {
            assert!(synced(&c), "create before sync");
            l.lock().unwrap().push(t.name.clone());
            if let Some(e) = fault(&f) { return Err(e); }
            c.apply(t);
            Ok(())
        });
        let (c, l, f) = (cache.clone(), log.clone(), faults.clone());
        writer.expect_update().returning(move |t, _| {
            assert!(synced(&c), "update before sync");
            l.lock().unwrap().push(t.name.clone());
            if let Some(e) = fault(&f) { return Err(e); }
            c.apply(t);
            Ok(())
        });
        // The fake cache applies no admission rules, so the driver predicts none.
        let config = DriverConfig { admission: None, seed: Some(7), ..DriverConfig::default() };
        let driver = Driver::new(cache.clone(), writer, TestClock, desired, config).unwrap();
        let rt = runtime();
        let stopped = rt.block_on(async {
            let run = tokio::spawn(driver.run(Mode::Once, std::future::pending()));
            tokio::time::sleep(Duration::from_secs(5)).await;
            for (name, priority, description) in &rows {
                cache.put(name, *priority, description);
            }
            cache.sync();
            tokio::time::timeout(Duration::from_secs(600), run).await
        });
        prop_assert!(stopped.is_ok(), "did not converge within 10 virtual minutes");
        for name in log.lock().unwrap().iter() {
            prop_assert!(names.contains(name), "wrote {} outside the desired set", name);
        }
    }

    /// One machine against a model server: never two calls in flight, every wait within
    /// bounds, and once the faults stop it converges.
    #[test]
    fn a_machine_converges_once_faults_stop(
        initial in prop_oneof![Just(None), (0i64..5, 0u8..2).prop_map(Some)],
        faults in proptest::collection::vec((0u8..7, any::<bool>(), 0u64..20), 0..25),
        seed in any::<u64>(),
    ) {
        let config = MachineConfig::default();
        let desired = TierSpec::new("t", 3, "d");
        let mut machine = TierMachine::new(desired.clone(), config.clone(), seed).unwrap();
        let mut server = Model { tier: initial.map(|(p, d)| (p, if d == 0 { "d" } else { "" }.to_owned(), 1)), rv: 1 };
        let t0 = Instant::now();
        let mut now = t0;
        let mut faults = faults.into_iter();
        let mut faults_over: Option<Instant> = None;
        let mut writes = 0u64;
        machine.handle_observation(server.observe(), server.rv, now);
        for _ in 0..400 {
            if machine.is_converged() { break; }
            let Some(action) = machine.poll_action(now) else {
                let next = machine.poll_timeout().expect("stuck: no action and no timeout");
                let wait = next - now;
                let status = machine.status();
                let bound = match status.state {
                    // A spent write budget holds any write up to its cap, visibly.
                    _ if status.held.is_some() => config.contest.hold_cap.max(config.backoff.cap),
                    TierState::Contested { .. } => config.contest.hold_cap,
                    TierState::Denied { .. } => config.backoff.cap,
                    TierState::Forbidden { .. } => config.forbidden_backoff.cap,
                    TierState::NotInstalled { .. } => config.not_installed_retry,
                    _ => config.backoff.cap,
                };
                prop_assert!(wait <= bound, "wait {:?} over {:?}", wait, bound);
                now = next;
                machine.handle_timeout(now);
                continue;
            };
            prop_assert!(machine.poll_action(now).is_none(), "two calls in flight");
            writes += 1;
            prop_assert!(writes <= config.contest.max_writes(now - t0),
                "{} writes in {:?}: over the write budget", writes, now - t0);
            let outcome = match faults.next() {
                Some((kind, applied, retry_after)) => {
                    if applied { let _ = server.perform(&action); }
                    match kind {
                        0 => Err(WriteError::transient("503").with_retry_after(Duration::from_secs(retry_after))),
                        1 => Err(WriteError::stale("conflict")),
                        2 => Err(WriteError::denied("denied")),
                        3 => Err(WriteError::transient("timeout")),
                        4 => Err(WriteError::forbidden("forbidden", None)),
                        5 => Err(WriteError::not_installed("404")),
                        _ => server.perform(&action),
                    }
                }
                None => {
                    faults_over.get_or_insert(now);
                    server.perform(&action)
                }
            };
            now += Duration::from_millis(5);
            machine.handle_outcome(outcome, now);
            machine.handle_observation(server.observe(), server.rv, now);
        }
        prop_assert!(machine.is_converged(), "not converged: {:?}", machine.status());
        if let Some(over) = faults_over {
            // Bound: the slowest wait (a forbidden backoff at its cap) plus one call.
            prop_assert!(now - over <= config.forbidden_backoff.cap + Duration::from_millis(5),
                "converged {:?} after the faults stopped", now - over);
        }
    }
}

/// A one-Tier server: (priority, description, resourceVersion).
struct Model {
    tier: Option<(i64, String, u64)>,
    rv: u64,
}

impl Model {
    fn observe(&self) -> Observed {
        match &self.tier {
            None => Observed::Absent,
            Some((priority, description, rv)) => Observed::Present(ObservedTier {
                name: "t".into(),
                priority: *priority,
                description: description.clone(),
                resource_version: rv.to_string(),
                last_writer: None,
            }),
        }
    }

    fn perform(&mut self, action: &Action) -> Result<(), WriteError> {
        match (action, &self.tier) {
            (Action::Create(_), Some(_)) => Err(WriteError::stale("already exists")),
            (Action::Update { .. }, None) => Err(WriteError::stale("not found")),
            (
                Action::Update {
                    resource_version, ..
                },
                Some((_, _, rv)),
            ) if *resource_version != rv.to_string() => {
                Err(WriteError::new(ErrorClass::Stale, "conflict"))
            }
            (action, _) => {
                self.rv += 1;
                let tier = action.tier();
                self.tier = Some((tier.priority, tier.description.clone(), self.rv));
                Ok(())
            }
        }
    }
}
