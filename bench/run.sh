#!/usr/bin/env bash
# Benchmark entry point (`make bench`): builds walnut and bench/loadgen,
# prepares bench/.venv (matplotlib), raises the open-file limit for the idle
# connection scenarios, and runs bench/bench.py. Extra arguments are passed
# through, e.g. `bench/run.sh --quick` or `make bench BENCH_ARGS=--quick`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
cd "$root"

for tool in redis-server redis-benchmark memcached memcaslap taskset /usr/sbin/nutcracker; do
    command -v "$tool" >/dev/null || { echo "bench: $tool not found" >&2; exit 1; }
done

cargo build --release
cargo build --release --manifest-path bench/loadgen/Cargo.toml --offline 2>/dev/null \
    || cargo build --release --manifest-path bench/loadgen/Cargo.toml

if [[ ! -x bench/.venv/bin/python ]]; then
    python3 -m venv bench/.venv
fi
bench/.venv/bin/python -c 'import matplotlib' 2>/dev/null \
    || bench/.venv/bin/pip install -q --disable-pip-version-check matplotlib \
    || echo "bench: matplotlib unavailable, the chart will be skipped" >&2

# Idle-connection scenarios need many descriptors: soft limit up to the hard one.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "bench: open files limit $(ulimit -n)"

exec bench/.venv/bin/python bench/bench.py "$@"
