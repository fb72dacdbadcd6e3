//! Any UTF-8 text as a `--tiers` file: never a panic; a valid set, or problems that each name
//! a Tier, a field and a rule.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    tierd_fuzz::check_tiers_file(text);
});
