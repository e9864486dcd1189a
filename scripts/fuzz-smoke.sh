#!/usr/bin/env bash
# Build every cargo-fuzz target under fuzz/ and run each for FUZZ_SECONDS
# (default 15) seconds, starting from the committed seeds in fuzz/seeds/.
# The smoke is reproducible: each run starts from the seeds alone (in a
# fresh temporary corpus) with a fixed libFuzzer seed (FUZZ_SEED, default
# 1), so a green run here is green on CI too; exploratory runs that keep a
# corpus use `cargo +nightly fuzz run <target>` directly.
#
# Needs a nightly toolchain (`cargo +nightly`) and cargo-fuzz. When nightly
# is absent the smoke is skipped with a message and exit status 0 (set
# FUZZ_INSTALL_NIGHTLY=1 to have rustup install it instead); a missing
# cargo-fuzz is installed with `cargo install cargo-fuzz --locked`, and
# skipped if that fails. With FUZZ_REQUIRED=1 (as .ci/run sets it) a smoke
# that cannot run fails instead of skipping. A crash or a broken invariant
# fails the script and leaves the input under fuzz/artifacts/<target>/.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
SECONDS_PER_TARGET="${FUZZ_SECONDS:-15}"
FUZZ_SEED="${FUZZ_SEED:-1}"

skip() {
    if [ "${FUZZ_REQUIRED:-0}" = 1 ]; then
        echo "fuzz-smoke: FAILED: cannot run: $*"
        exit 1
    fi
    echo "fuzz-smoke: SKIPPED: $*"
    exit 0
}

[ -d fuzz ] || skip "no fuzz/ directory"
command -v cargo >/dev/null 2>&1 || skip "cargo not found"

if ! cargo +nightly --version >/dev/null 2>&1; then
    if [ "${FUZZ_INSTALL_NIGHTLY:-0}" = 1 ] && command -v rustup >/dev/null 2>&1; then
        echo "fuzz-smoke: installing the nightly toolchain"
        rustup toolchain install nightly --profile minimal \
            || skip "the nightly toolchain could not be installed"
    else
        skip "no nightly toolchain (cargo-fuzz needs one; 'rustup toolchain install nightly' or FUZZ_INSTALL_NIGHTLY=1 enables this step)"
    fi
fi

if ! cargo +nightly fuzz --help >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz"
    cargo install cargo-fuzz --locked || skip "cargo-fuzz could not be installed"
fi

mapfile -t targets < <(cargo +nightly fuzz list 2>/dev/null)
[ "${#targets[@]}" -gt 0 ] || skip "fuzz/ has no targets"

echo "fuzz-smoke: building ${#targets[@]} target(s): ${targets[*]}"
cargo +nightly fuzz build

log="$(mktemp)"
work="$(mktemp -d)"
trap 'rm -rf "$log" "$work"' EXIT
summary=()
for target in "${targets[@]}"; do
    corpus="$work/$target"
    seeds="$ROOT/fuzz/seeds/$target"
    mkdir -p "$corpus"
    dirs=("$corpus")
    [ -d "$seeds" ] && dirs+=("$seeds")
    echo "fuzz-smoke: ${target} for ${SECONDS_PER_TARGET}s"
    if ! cargo +nightly fuzz run "$target" "${dirs[@]}" -- \
        -seed="$FUZZ_SEED" -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "fuzz-smoke: FAILED: ${target} found a crash (input saved under fuzz/artifacts/${target}/)"
        exit 1
    fi
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
    summary+=("${target}: ${runs:-?} executions")
done
printf 'fuzz-smoke: %s\n' "${summary[@]}"
echo "fuzz-smoke: ${#targets[@]} target(s) ran without a crash"
