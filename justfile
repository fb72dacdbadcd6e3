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

# What CI runs.
ci: lint test
