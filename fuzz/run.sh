#!/usr/bin/env bash
# Runs each fuzz target for SECONDS seconds on the stable toolchain (no sanitizer), with its
# seeds and dictionary; stops at the first target that crashes. See README.md.
#
#   fuzz/run.sh [SECONDS] [TARGET...]    (default: 60 s, every target)
set -euo pipefail
cd "$(dirname "$0")"

seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(webhook_review webhook_review_structured tiers_file)
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is missing: cargo install cargo-fuzz --locked" >&2
    exit 1
fi

for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    corpora=("corpus/$target")
    [ -d "seeds/$target" ] && corpora+=("seeds/$target")
    options=(-max_total_time="$seconds" -print_final_stats=1)
    case "$target" in
        webhook_review) options+=(-dict=dicts/json.dict) ;;
        tiers_file) options+=(-dict=dicts/yaml.dict) ;;
    esac
    echo "== $target: ${seconds}s"
    cargo fuzz run --sanitizer none "$target" "${corpora[@]}" -- "${options[@]}"
done
