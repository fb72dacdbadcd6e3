//! The families of worlds a seed can be drawn from: the random worlds of the first issues, and
//! the adversarial worlds of issue 15, each aimed at one cross-Tier or cross-time mechanism.
//!
//! Every generator is deterministic in its seed. The issue-15 worlds share a plain base: one
//! initializer whose cache syncs within 2 s and lags at most 1 s (unless the world is about the
//! lag), a webhook reading the store, no random faults. What each adds:
//!
//! | world | until `quiet_at` | what it tests |
//! |---|---|---|
//! | [`FailingTier`](World::FailingTier) | one Tier's creates and updates get 503; the other Tiers are deleted or drifted a few seconds in | a failing Tier does not starve the others (liveness) |
//! | [`HangingTier`](World::HangingTier) | one Tier's calls hang until the call timeout; the others change after it | the same with hangs |
//! | [`FastEditor`](World::FastEditor) | someone edits one Tier every 100 ms; tierd's cache lags 200 ms | a write loop is bounded and contested (write bound) |
//! | [`CoalescedDeleter`](World::CoalescedDeleter) | a prune controller deletes one Tier as soon as it exists; both reach tierd's cache together | a deletion the cache never shows is a correction (soft write bound) |
//! | [`UpdateForbidden`](World::UpdateForbidden) | RBAC refuses every update; drifted Tiers are deleted later | Forbidden on update does not delay a create (liveness) |
//! | [`CreateForbidden`](World::CreateForbidden) | RBAC refuses every create; some Tiers are missing | one create probe for the fleet ([`Invariant::FleetProbe`](crate::Invariant::FleetProbe)) |
//! | [`SlowingFighter`](World::SlowingFighter) | someone edits one Tier every second for a minute, then every 100 s | a contest ends when the fight slows down (liveness) |
//! | [`LagSpike`](World::LagSpike) | tierd's cache lags 8 s for a while, then 100 ms; slow edits before and after | adaptive waits come back down |

use std::time::Duration;

use tier_core::{DesiredSet, TierSpec};
use tier_memory::{AdmissionView, Verb};

use crate::scenario::{
    AdversaryAction, AdversaryEvent, FaultPlan, InitializerPlan, LagChange, Scenario,
    TargetedEffect, TargetedFault, WebhookPlan, as_millis, millis,
};

/// A family of worlds (`--world` on the command line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum World {
    /// The random worlds: drift, squatters, random faults, replicas, adversaries (the default).
    Random,
    /// One Tier's writes always get 503; the other Tiers change meanwhile.
    FailingTier,
    /// One Tier's calls hang until the call timeout; the other Tiers change meanwhile.
    HangingTier,
    /// An editor changes one Tier every 100 ms while tierd's cache lags 200 ms.
    FastEditor,
    /// A prune controller deletes one Tier as soon as it exists, unseen by tierd's cache.
    CoalescedDeleter,
    /// RBAC refuses updates but allows creates; drifted Tiers are deleted later.
    UpdateForbidden,
    /// RBAC refuses every create while Tiers are missing.
    CreateForbidden,
    /// A fighter edits one Tier every second, then every 100 s.
    SlowingFighter,
    /// tierd's cache lags 8 s for a while, then recovers.
    LagSpike,
}

impl World {
    /// The worlds of issue 15, in the order of the module docs.
    pub const ISSUE_15: [World; 8] = [
        World::FailingTier,
        World::HangingTier,
        World::FastEditor,
        World::CoalescedDeleter,
        World::UpdateForbidden,
        World::CreateForbidden,
        World::SlowingFighter,
        World::LagSpike,
    ];

    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            World::Random => "random",
            World::FailingTier => "failing-tier",
            World::HangingTier => "hanging-tier",
            World::FastEditor => "fast-editor",
            World::CoalescedDeleter => "coalesced-deleter",
            World::UpdateForbidden => "update-forbidden",
            World::CreateForbidden => "create-forbidden",
            World::SlowingFighter => "slowing-fighter",
            World::LagSpike => "lag-spike",
        }
    }
}

/// Draws a scenario of `world` from `seed`.
pub(crate) fn generate(world: World, seed: u64) -> Scenario {
    // A different stream per family, so that seed n of two families are unrelated worlds.
    let mut rng =
        fastrand::Rng::with_seed(seed ^ (world as u64).wrapping_mul(0xA076_1D64_78BD_642F));
    match world {
        World::Random => Scenario::generate(seed),
        World::FailingTier => starved(&mut rng, seed, world, TargetedEffect::Unavailable),
        World::HangingTier => starved(&mut rng, seed, world, TargetedEffect::Hang),
        World::FastEditor => fast_editor(&mut rng, seed),
        World::CoalescedDeleter => coalesced_deleter(&mut rng, seed),
        World::UpdateForbidden => update_forbidden(&mut rng, seed),
        World::CreateForbidden => create_forbidden(&mut rng, seed),
        World::SlowingFighter => slowing_fighter(&mut rng, seed),
        World::LagSpike => lag_spike(&mut rng, seed),
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

/// The plain base of the issue-15 worlds: the six Tiers as desired, one initializer.
fn base(rng: &mut fastrand::Rng, seed: u64, world: World) -> Scenario {
    Scenario {
        seed,
        start: DesiredSet::antrea().tiers().to_vec(),
        initializers: vec![InitializerPlan {
            name: "tierd-0".to_owned(),
            start_at: Duration::ZERO,
            sync_after: if rng.bool() {
                Duration::ZERO
            } else {
                millis(rng, secs(2))
            },
            lag: millis(rng, secs(1)),
            seed: rng.u64(..),
        }],
        webhook: WebhookPlan {
            view: AdmissionView::Store,
            lag: Duration::ZERO,
            unreachable_until: Duration::ZERO,
        },
        faults: FaultPlan {
            fail: 0.0,
            lose_response: 0.0,
            max_latency: millis(rng, ms(50)),
            retry_after: None,
            hangs: 0,
        },
        quiet_at: secs(60),
        adversary: Vec::new(),
        world,
        targeted: Vec::new(),
        lag_changes: Vec::new(),
        pruned: None,
    }
}

/// A desired Tier drawn from `rng`.
fn pick(rng: &mut fastrand::Rng) -> TierSpec {
    let tiers = DesiredSet::antrea();
    tiers.tiers()[rng.usize(0..tiers.len())].clone()
}

/// The other desired Tiers than `name`, shuffled.
fn others(rng: &mut fastrand::Rng, name: &str) -> Vec<TierSpec> {
    let mut others: Vec<TierSpec> = DesiredSet::antrea()
        .tiers()
        .iter()
        .filter(|t| t.name != name)
        .cloned()
        .collect();
    rng.shuffle(&mut others);
    others
}

fn event(at: Duration, action: AdversaryAction) -> AdversaryEvent {
    AdversaryEvent { at, action }
}

/// A deletion or a priority or description drift of `tier`.
fn disturb(rng: &mut fastrand::Rng, tier: &TierSpec) -> AdversaryAction {
    match rng.u32(0..3) {
        0 => AdversaryAction::DeleteSystem {
            name: tier.name.clone(),
        },
        1 => AdversaryAction::EditPriority {
            name: tier.name.clone(),
            priority: free_priority(rng, tier.priority),
        },
        _ => AdversaryAction::EditDescription {
            name: tier.name.clone(),
            description: "changed by someone else".to_owned(),
        },
    }
}

/// A priority other than `desired` and not a system Tier's (so a drift blocks nothing).
fn free_priority(rng: &mut fastrand::Rng, desired: i64) -> i64 {
    let system: Vec<i64> = DesiredSet::antrea()
        .tiers()
        .iter()
        .map(|t| t.priority)
        .collect();
    loop {
        let p = rng.i64(1..=240);
        if p != desired && !system.contains(&p) {
            return p;
        }
    }
}

/// One Tier's writes fail (`effect`) until quiet; once it is the only one failing (after the
/// first answer, or the call timeout for a hang), one to five other Tiers are disturbed, once.
fn starved(rng: &mut fastrand::Rng, seed: u64, world: World, effect: TargetedEffect) -> Scenario {
    let mut s = base(rng, seed, world);
    let target = pick(rng);
    // The target needs a write from the start: absent or drifted.
    if rng.bool() {
        s.start.retain(|t| t.name != target.name);
    } else if let Some(t) = s.start.iter_mut().find(|t| t.name == target.name) {
        t.priority = free_priority(rng, target.priority);
    }
    for verb in [Verb::Create, Verb::Update] {
        s.targeted.push(TargetedFault {
            verb,
            name: Some(target.name.clone()),
            effect,
        });
    }
    // After the default 30 s call timeout for a hang.
    let first = match effect {
        TargetedEffect::Hang => rng.u64(35_000..=45_000),
        _ => rng.u64(3_000..=10_000),
    };
    let victims = others(rng, &target.name);
    let count = rng.usize(1..=victims.len());
    for (k, victim) in victims.iter().take(count).enumerate() {
        let at = ms(first + 100 * k as u64);
        let action = disturb(rng, victim);
        s.adversary.push(event(at, action));
    }
    s.quiet_at = ms(first + rng.u64(60_000..=120_000));
    s
}

/// Someone edits one Tier every 100 ms for about 300 s; tierd's cache lags 200 ms.
fn fast_editor(rng: &mut fastrand::Rng, seed: u64) -> Scenario {
    let mut s = base(rng, seed, World::FastEditor);
    s.initializers[0].lag = ms(200);
    let target = pick(rng);
    let start = rng.u64(2_000..=10_000);
    for k in 0..3_000u64 {
        s.adversary.push(event(
            ms(start + 100 * k),
            AdversaryAction::EditDescription {
                name: target.name.clone(),
                description: format!("mine {k}"),
            },
        ));
    }
    s.quiet_at = ms(start + 300_000);
    s
}

/// A prune controller deletes one Tier whenever it exists; tierd's cache lags 200 ms to 1 s, so
/// it sees the create and the deletion in one batch.
fn coalesced_deleter(rng: &mut fastrand::Rng, seed: u64) -> Scenario {
    let mut s = base(rng, seed, World::CoalescedDeleter);
    s.initializers[0].lag = ms(rng.u64(200..=1_000));
    let target = pick(rng);
    s.start.retain(|t| t.name != target.name);
    s.pruned = Some(target.name);
    s.quiet_at = secs(rng.u64(200..=400));
    s
}

/// RBAC refuses updates: one to three Tiers drifted cannot be corrected; 65 to 120 s in (the
/// Forbidden backoff has reached its cap), one to three of them are deleted, so they need creates, which
/// RBAC allows.
fn update_forbidden(rng: &mut fastrand::Rng, seed: u64) -> Scenario {
    let mut s = base(rng, seed, World::UpdateForbidden);
    let mut drifted = others(rng, "");
    drifted.truncate(rng.usize(1..=3));
    for d in &drifted {
        if let Some(t) = s.start.iter_mut().find(|t| t.name == d.name) {
            if rng.bool() {
                t.priority = free_priority(rng, d.priority);
            } else {
                t.description = "edited by hand".to_owned();
            }
        }
    }
    s.targeted.push(TargetedFault {
        verb: Verb::Update,
        name: None,
        effect: TargetedEffect::Forbidden,
    });
    let at = rng.u64(65_000..=120_000);
    let deleted = rng.usize(1..=drifted.len());
    for (k, d) in drifted.iter().take(deleted).enumerate() {
        s.adversary.push(event(
            ms(at + 100 * k as u64),
            AdversaryAction::DeleteSystem {
                name: d.name.clone(),
            },
        ));
    }
    s.quiet_at = ms(at + rng.u64(60_000..=120_000));
    s
}

/// RBAC refuses every create while two to six Tiers are missing.
fn create_forbidden(rng: &mut fastrand::Rng, seed: u64) -> Scenario {
    let mut s = base(rng, seed, World::CreateForbidden);
    let mut missing = others(rng, "");
    missing.truncate(rng.usize(2..=6));
    s.start
        .retain(|t| !missing.iter().any(|m| m.name == t.name));
    s.targeted.push(TargetedFault {
        verb: Verb::Create,
        name: None,
        effect: TargetedEffect::Forbidden,
    });
    s.quiet_at = secs(rng.u64(30..=120));
    s
}

/// Someone drifts one Tier every second for a minute (a contest), then every 100 s, five to
/// eight times: slower than the contest's refill, each change should be corrected at once.
fn slowing_fighter(rng: &mut fastrand::Rng, seed: u64) -> Scenario {
    let mut s = base(rng, seed, World::SlowingFighter);
    let target = pick(rng);
    let start = rng.u64(2_000..=10_000);
    let mut at = start;
    for _ in 0..60 {
        let action = disturb_in_place(rng, &target);
        s.adversary.push(event(ms(at), action));
        at += 1_000;
    }
    for _ in 0..rng.u64(5..=8) {
        at += 100_000;
        let action = disturb_in_place(rng, &target);
        s.adversary.push(event(ms(at), action));
    }
    s.quiet_at = ms(at + 50_000);
    s
}

/// A priority or description drift of `tier` (never a deletion).
fn disturb_in_place(rng: &mut fastrand::Rng, tier: &TierSpec) -> AdversaryAction {
    if rng.bool() {
        AdversaryAction::EditPriority {
            name: tier.name.clone(),
            priority: free_priority(rng, tier.priority),
        }
    } else {
        AdversaryAction::EditDescription {
            name: tier.name.clone(),
            description: format!("mine {}", rng.u16(..)),
        }
    }
}

/// tierd's cache lags 100 ms, then 8 s for 20 to 60 s, then 100 ms again; a slow editor drifts a
/// Tier every 30 to 60 s throughout, so writes meet the spike and the recovery.
fn lag_spike(rng: &mut fastrand::Rng, seed: u64) -> Scenario {
    let mut s = base(rng, seed, World::LagSpike);
    s.initializers[0].lag = ms(100);
    let spike = rng.u64(5_000..=20_000);
    let recover = spike + rng.u64(20_000..=60_000);
    s.lag_changes = vec![
        LagChange {
            at: ms(spike),
            lag: secs(8),
        },
        LagChange {
            at: ms(recover),
            lag: ms(100),
        },
    ];
    s.quiet_at = ms(recover + rng.u64(120_000..=240_000));
    let mut at = rng.u64(1_000..=10_000);
    while at < as_millis(s.quiet_at) {
        let target = pick(rng);
        let action = disturb(rng, &target);
        s.adversary.push(event(ms(at), action));
        at += rng.u64(30_000..=60_000);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_world_is_deterministic_and_varied() {
        for world in World::ISSUE_15 {
            assert_eq!(generate(world, 3), generate(world, 3), "{world:?}");
            assert_ne!(generate(world, 3), generate(world, 4), "{world:?}");
            for seed in 0..50 {
                let s = generate(world, seed);
                assert_eq!(s.world, world);
                assert!(
                    s.adversary.windows(2).all(|w| w[0].at <= w[1].at),
                    "{world:?}"
                );
                assert!(s.adversary.iter().all(|e| e.at < s.quiet_at), "{world:?}");
            }
        }
        assert_eq!(generate(World::Random, 9), Scenario::generate(9));
    }
}
