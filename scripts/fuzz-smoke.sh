#!/usr/bin/env bash
# Run every cargo-fuzz target for FUZZ_SECONDS (default 20) seconds.
# Skips, with a message and exit 0, when there is no fuzz/ directory or no
# nightly toolchain / cargo-fuzz can be had; a crash found fails.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
SECONDS_PER_TARGET="${FUZZ_SECONDS:-20}"

skip() { echo "fuzz-smoke: skipped: $*"; exit 0; }

[ -d fuzz ] || skip "no fuzz/ directory"
command -v cargo >/dev/null 2>&1 || skip "cargo not found"

if ! cargo +nightly --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null 2>&1; then
        echo "fuzz-smoke: installing the nightly toolchain"
        rustup toolchain install nightly --profile minimal >/dev/null 2>&1 \
            || skip "nightly toolchain not installable here"
    else
        skip "no rustup, so no nightly toolchain"
    fi
fi

if ! cargo +nightly fuzz --help >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz"
    cargo install cargo-fuzz --locked || skip "cargo-fuzz not installable here"
fi

mapfile -t targets < <(cargo +nightly fuzz list 2>/dev/null)
[ "${#targets[@]}" -gt 0 ] || skip "fuzz/ has no targets"

for target in "${targets[@]}"; do
    echo "fuzz-smoke: ${target} for ${SECONDS_PER_TARGET}s"
    cargo +nightly fuzz run "${target}" -- -max_total_time="${SECONDS_PER_TARGET}" -print_final_stats=0
done
echo "fuzz-smoke: ${#targets[@]} target(s) ran without a crash"
