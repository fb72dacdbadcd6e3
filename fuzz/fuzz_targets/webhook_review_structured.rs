//! Structurally plausible AdmissionReviews with any part replaced: never a panic, and every
//! well-formed review is answered with a response review that echoes the uid.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tier_fuzz_model::Review;

fuzz_target!(|review: Review| {
    let body = review.json().render();
    if review.is_well_formed() {
        assert!(
            tierd_fuzz::now(tierd_fuzz::webhook().review_json(body.as_bytes())).is_ok(),
            "a well-formed review was refused: {body}"
        );
    }
    tierd_fuzz::check_review(body.as_bytes());
});
