# tierd's recipes; CI runs exactly `just ci` (see .ci/run).

# List the recipes.
default:
    @just --list

# Run every test (the README's test command).
test:
    cargo test --workspace

# Format check and clippy with warnings as errors.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

# The README's main job: the real initializer on the in-memory backend.
demo:
    cargo run -p tier-bin -- demo

# The deterministic simulation: 10,000 seeds of tierd, Antrea's old and new initializers.
sim seeds="10000":
    cargo run -p tier-sim --release -- --seeds {{seeds}} --strategy all

# The numbers docs/RELIABILITY.md and docs/PERFORMANCE.md quote: writes and failed writes per
# seed of tierd and of Antrea's fixed initializer, without an adversary and on all seeds.
sim-numbers seeds="10000":
    cargo build --release -p tier-sim
    nice target/release/tier-sim --seeds {{seeds}} --numbers

# Calico's worlds: tierd's fleet vs Calico's own EnsureInitialized on the same seeds.
sim-calico seeds="1000":
    cargo run -p tier-sim --release -- --controller calico --strategy all --seeds {{seeds}}

# The worlds of issue 15 and its per-Tier invariants (liveness, write bound, fleet probe).
sim-issue-15 seeds="100":
    cargo run -p tier-sim --release -- --seeds {{seeds}} --world issue-15

# Benchmarks (numbers printed as tables; see docs/PERFORMANCE.md).
bench *args:
    cargo build --release -p tier-bin --bin tierd
    cargo run --release -p tier-bench -- {{args}}

# Fuzz each target for `seconds` (stable toolchain, needs cargo-fuzz; see fuzz/README.md).
fuzz seconds="60" *targets:
    fuzz/run.sh {{seconds}} {{targets}}

# Exactly what CI runs: fmt, clippy, the tier-core dependency check, the tests, the API docs
# (warnings as errors), a short simulation and short benchmarks.
ci:
    bash .ci/run
