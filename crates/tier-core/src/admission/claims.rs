//! Priority claims: one admission decision across webhook replicas ([`ClaimSet`]).

use std::time::{Duration, SystemTime};

use super::{Denial, ReservationConfigError, Reservations, Truncated};

/// One priority claimed for a Tier, as the replicas read it from the store they share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The Tier whose create claimed the priority.
    pub tier: String,
    /// The priority claimed.
    pub priority: i64,
    /// When the claim was made or last renewed, on the clock of the replica that wrote it.
    pub at: SystemTime,
}

/// What a successful [`ClaimSet::take`] did to the set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimChange {
    /// The Tier already held a fresh claim at the priority (younger than half the TTL): nothing
    /// to write.
    Unchanged,
    /// The claim was added or renewed: write the set back.
    Changed,
}

/// The claims of every replica: at most one per priority; pure.
///
/// A [`Reservations`](super::Reservations) table closes the overlap window inside one process.
/// kube-apiserver calls the webhook through a Service, so two creates at one priority can be
/// reviewed by two replicas, each with its own table and its own lagging cache. A [`ClaimSet`] is
/// the rule for the one store all replicas share (the API server): before a replica admits a
/// CREATE, it claims the priority there for the Tier's name, and a priority claimed by another
/// name within the TTL is denied. The adapter reads the set, applies [`ClaimSet::take`], and
/// writes it back on the resourceVersion it read, so of two replicas claiming at once one write
/// wins and the other re-reads and sees the claim (the [`PriorityClaims`](crate::PriorityClaims)
/// port).
///
/// Claims are compared across processes, so their times are wall-clock values
/// ([`SystemTime`], written by whichever replica made the claim and passed in as `now`: nothing
/// here reads a clock). Replicas' clocks may differ by less than the TTL minus the time a
/// create takes to reach every cache (about a second): a claim made on a clock that is behind
/// looks older elsewhere by that much, and one dated more than a TTL ahead of `now` is dropped
/// as bogus, so no claim outlives twice its TTL.
///
/// What bounds the set: one claim per priority; a claim that lapsed is dropped at the next
/// [`take`](ClaimSet::take); and no claim is added while [`ClaimSet::MAX_CLAIMS`] others are
/// live. Replicas add claims only for CREATEs their own table admitted, at most the priority
/// limit each (20) within one TTL, so a set written only by tierd holds far fewer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimSet {
    ttl: Duration,
    claims: Vec<Claim>,
}

impl ClaimSet {
    /// The most live claims of other Tiers a claim is added beside: as many as Antrea has
    /// priorities (0 to 255). Far above what replicas make (each adds at most the 20-priority
    /// limit within one TTL); it bounds the stored set against whatever else wrote it.
    pub const MAX_CLAIMS: usize = 256;

    /// The set read from the store, claims lasting `ttl`. Of several claims at one priority
    /// (only a writer other than tierd makes them) the newest is kept.
    ///
    /// # Errors
    ///
    /// [`ReservationConfigError::TtlOutOfRange`] unless `0 < ttl <= Reservations::MAX_TTL`.
    pub fn new(
        ttl: Duration,
        claims: impl IntoIterator<Item = Claim>,
    ) -> Result<Self, ReservationConfigError> {
        if ttl.is_zero() || ttl > Reservations::MAX_TTL {
            return Err(ReservationConfigError::TtlOutOfRange { ttl });
        }
        let mut set = Self {
            ttl,
            claims: Vec::new(),
        };
        for claim in claims {
            match set.claims.iter_mut().find(|c| c.priority == claim.priority) {
                Some(held) if held.at >= claim.at => {}
                Some(held) => *held = claim,
                None => set.claims.push(claim),
            }
        }
        Ok(set)
    }

    /// How long a claim lasts.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The claims, as read or as last taken (lapsed ones included until a
    /// [`take`](Self::take)).
    pub fn claims(&self) -> &[Claim] {
        &self.claims
    }

    /// Whether `claim` still holds its priority at `now`: made less than a TTL ago, and dated
    /// at most a TTL ahead of `now` (clock skew; a later date is bogus).
    pub fn is_live(&self, claim: &Claim, now: SystemTime) -> bool {
        is_live(self.ttl, claim, now)
    }

    /// Claims `priority` for `tier` at `now`: drops the claims that lapsed, then
    ///
    /// - denies it when a live claim of another Tier holds the priority, or when
    ///   [`MAX_CLAIMS`](Self::MAX_CLAIMS) live claims of other Tiers exist;
    /// - leaves the set as it is when `tier` holds a claim there younger than half the TTL
    ///   ([`ClaimChange::Unchanged`]: the claim outlasts the create by at least that much);
    /// - otherwise records `tier` at `priority` dated `now` ([`ClaimChange::Changed`]).
    ///
    /// A claim is never taken over while it is live, whatever the claimer: a Tier of the
    /// desired set waits out another Tier's claim like any other (the admission policy's
    /// desired priorities already keep other Tiers off its priority on every replica that shares
    /// the desired set).
    ///
    /// # Errors
    ///
    /// A [`Denial`] saying who holds the priority and since when.
    pub fn take(
        &mut self,
        tier: &str,
        priority: i64,
        now: SystemTime,
    ) -> Result<ClaimChange, Denial> {
        let ttl = self.ttl;
        self.claims.retain(|c| is_live(ttl, c, now));
        if let Some(held) = self.claims.iter().find(|c| c.priority == priority) {
            if held.tier != tier {
                let ago = now.duration_since(held.at).unwrap_or_default().as_millis();
                return Err(Denial(format!(
                    "tier {tier} priority {priority} is claimed by a create of Tier {} admitted \
                     {ago} ms ago by a tierd replica, not yet visible",
                    Truncated::new(&held.tier)
                )));
            }
            let age = now.duration_since(held.at).unwrap_or_default();
            if age < ttl / 2 {
                return Ok(ClaimChange::Unchanged);
            }
        }
        let others = self
            .claims
            .iter()
            .filter(|c| c.priority != priority)
            .count();
        if others >= Self::MAX_CLAIMS {
            return Err(Denial(format!(
                "tier {tier} priority {priority} cannot be claimed: {others} priorities are \
                 claimed by creates not yet visible (at most {}); retry shortly",
                Self::MAX_CLAIMS
            )));
        }
        let claim = Claim {
            tier: tier.to_owned(),
            priority,
            at: now,
        };
        match self.claims.iter_mut().find(|c| c.priority == priority) {
            Some(held) => *held = claim,
            None => self.claims.push(claim),
        }
        Ok(ClaimChange::Changed)
    }
}

fn is_live(ttl: Duration, claim: &Claim, now: SystemTime) -> bool {
    match now.duration_since(claim.at) {
        Ok(age) => age < ttl,
        Err(ahead) => ahead.duration() <= ttl,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    fn t(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + Duration::from_millis(ms)
    }

    fn empty() -> ClaimSet {
        ClaimSet::new(TTL, []).unwrap()
    }

    #[test]
    fn a_live_claim_of_another_tier_denies_and_says_who_holds_it() {
        let mut set = empty();
        assert_eq!(set.take("a", 10, t(0)), Ok(ClaimChange::Changed));
        assert_eq!(
            set.take("b", 10, t(120)).unwrap_err().0,
            "tier b priority 10 is claimed by a create of Tier a admitted 120 ms ago by a tierd \
             replica, not yet visible"
        );
        // Another priority is free.
        assert_eq!(set.take("b", 11, t(120)), Ok(ClaimChange::Changed));
        // Up to the last millisecond of the TTL the claim holds; then it is taken over.
        assert!(set.take("b", 10, t(9_999)).is_err());
        assert_eq!(set.take("b", 10, t(10_000)), Ok(ClaimChange::Changed));
        // Lapsed claims go at the next take: b's at 11 (made at 120 ms) by 10 120 ms.
        assert_eq!(set.take("c", 12, t(10_120)), Ok(ClaimChange::Changed));
        assert_eq!(
            set.claims()
                .iter()
                .map(|c| (c.tier.as_str(), c.priority))
                .collect::<Vec<_>>(),
            [("b", 10), ("c", 12)]
        );
    }

    #[test]
    fn the_same_tier_renews_only_once_half_the_ttl_passed() {
        let mut set = empty();
        assert_eq!(set.take("a", 10, t(0)), Ok(ClaimChange::Changed));
        // A retried create of `a`: no write while the claim outlasts it by half a TTL.
        assert_eq!(set.take("a", 10, t(4_999)), Ok(ClaimChange::Unchanged));
        assert_eq!(set.claims()[0].at, t(0));
        assert_eq!(set.take("a", 10, t(5_000)), Ok(ClaimChange::Changed));
        assert_eq!(set.claims()[0].at, t(5_000));
        // Renewed, it holds a TTL from the renewal.
        assert!(set.take("b", 10, t(14_999)).is_err());
    }

    #[test]
    fn skewed_clocks_and_bogus_dates() {
        // A claim dated 3 s ahead (its writer's clock is fast) holds, and is at least as young
        // as a fresh one.
        let ahead = Claim {
            tier: "a".into(),
            priority: 10,
            at: t(13_000),
        };
        let mut set = ClaimSet::new(TTL, [ahead.clone()]).unwrap();
        assert!(set.is_live(&ahead, t(10_000)));
        let denied = set.take("b", 10, t(10_000)).unwrap_err().0;
        assert!(denied.contains("admitted 0 ms ago"), "{denied}");
        // One dated more than a TTL ahead is bogus and dropped: it cannot hold a priority for
        // longer than twice the TTL.
        let bogus = Claim {
            at: t(20_001),
            ..ahead
        };
        let mut set = ClaimSet::new(TTL, [bogus]).unwrap();
        assert_eq!(set.take("b", 10, t(10_000)), Ok(ClaimChange::Changed));
        // The extremes of the clock do not overflow.
        let mut set = ClaimSet::new(
            TTL,
            [Claim {
                tier: "a".into(),
                priority: 1,
                at: SystemTime::UNIX_EPOCH,
            }],
        )
        .unwrap();
        assert_eq!(
            set.take(
                "b",
                1,
                SystemTime::UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX))
            ),
            Ok(ClaimChange::Changed)
        );
        assert_eq!(
            set.take("c", 2, SystemTime::UNIX_EPOCH),
            Ok(ClaimChange::Changed)
        );
    }

    #[test]
    fn the_set_stays_bounded() {
        let mut set = empty();
        let max = i64::try_from(ClaimSet::MAX_CLAIMS).unwrap();
        for p in 0..max {
            assert_eq!(
                set.take(&format!("t{p}"), p, t(0)),
                Ok(ClaimChange::Changed)
            );
        }
        let denied = set.take("one-more", max, t(1)).unwrap_err().0;
        assert!(denied.contains("256 priorities are claimed"), "{denied}");
        assert_eq!(set.claims().len(), ClaimSet::MAX_CLAIMS);
        // A renewal of a held claim is not one more.
        assert_eq!(set.take("t0", 0, t(6_000)), Ok(ClaimChange::Changed));
        // Once they lapse, there is room again.
        assert_eq!(
            set.take("one-more", max, t(10_000)),
            Ok(ClaimChange::Changed)
        );
        assert_eq!(set.claims().len(), 2);
    }

    #[test]
    fn duplicates_keep_the_newest_and_the_ttl_is_bounded() {
        let claim = |tier: &str, ms| Claim {
            tier: tier.into(),
            priority: 7,
            at: t(ms),
        };
        let set =
            ClaimSet::new(TTL, [claim("old", 0), claim("new", 5), claim("older", 1)]).unwrap();
        assert_eq!(set.claims(), [claim("new", 5)]);
        for ttl in [
            Duration::ZERO,
            Reservations::MAX_TTL + Duration::from_nanos(1),
        ] {
            assert_eq!(
                ClaimSet::new(ttl, []).unwrap_err(),
                ReservationConfigError::TtlOutOfRange { ttl }
            );
        }
        assert_eq!(ClaimSet::new(TTL, []).unwrap().ttl(), TTL);
    }

    #[test]
    fn a_forged_holder_name_is_shown_truncated() {
        let long = "x".repeat(10_000);
        let mut set = ClaimSet::new(
            TTL,
            [Claim {
                tier: long,
                priority: 3,
                at: t(0),
            }],
        )
        .unwrap();
        let denied = set.take("b", 3, t(1)).unwrap_err().0;
        assert!(denied.len() < 512, "{}", denied.len());
        assert!(denied.contains("[truncated, 10000 bytes]"), "{denied}");
    }
}
