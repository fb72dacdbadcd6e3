//! `tierd`: keeps a cluster's system Tiers present and correct. See `tierd --help`.

fn main() -> std::process::ExitCode {
    tier_bin::main()
}
