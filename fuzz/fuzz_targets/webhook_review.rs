//! Any bytes as the body of `POST /validate/tier`: never a panic; an error, or a response
//! review that echoes the uid.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    tierd_fuzz::check_review(body);
});
