//! The model reaches what the webhook's properties need from random bytes (what proptest feeds
//! it): many well-formed reviews, and among them every kind of verdict.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tier_fuzz_model::arbitrary::{Arbitrary, Unstructured};
use tier_fuzz_model::{Expected, Review};

/// `len` bytes from a xorshift generator seeded with `seed` (deterministic, no dependency).
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

#[test]
fn random_bytes_give_well_formed_reviews_of_every_verdict() {
    let (mut well_formed, mut allowed, mut rules, mut reserved, mut overlaps, mut bad) =
        (0, 0, 0, 0, 0, 0);
    let mut updates_denied = 0;
    let mut deletes_denied = 0;
    let mut invalid_names = 0;
    const N: u64 = 2000;
    for seed in 0..N {
        let data = bytes(seed, usize::try_from(seed % 2048).unwrap());
        let review = Review::arbitrary_take_rest(Unstructured::new(&data)).unwrap();
        // Rendering never fails, whatever the bytes.
        assert!(!review.json().render().is_empty());
        if !review.is_well_formed() {
            continue;
        }
        well_formed += 1;
        match review.expected() {
            Expected::Allowed => allowed += 1,
            Expected::Rule(message) => {
                rules += 1;
                reserved += usize::from(message.ends_with("is reserved"));
                overlaps += usize::from(message.ends_with("overlaps with existing Tier"));
                updates_denied += usize::from(message == "update to Tier priority is not allowed");
                deletes_denied += usize::from(message.starts_with("cannot delete reserved tier"));
            }
            Expected::BadRequest(_) => bad += 1,
            Expected::InvalidName => invalid_names += 1,
        }
    }
    println!(
        "{well_formed}/{N} well-formed: {allowed} allowed, {rules} denied by a rule \
         ({reserved} reserved, {overlaps} overlaps, {updates_denied} updates, \
         {deletes_denied} deletes), {bad} without a priority, {invalid_names} invalid names"
    );
    // About one in six is well-formed (the rest has a part replaced, a number beyond f64, ...);
    // the verdict proptest runs 1024 cases for it.
    assert!(
        well_formed * 8 >= N,
        "under an eighth well-formed: {well_formed}/{N}"
    );
    for (what, count) in [
        ("allowed", allowed),
        ("reserved", reserved),
        ("overlap", overlaps),
        ("update", updates_denied),
        ("delete", deletes_denied),
        ("bad request", bad),
        ("invalid name", invalid_names),
    ] {
        assert!(count >= 5, "only {count} {what} verdicts in {N} reviews");
    }
}
