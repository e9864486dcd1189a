#!/usr/bin/env bash
# Benchmark entry point (`make bench`): builds walnut and bench/loadgen,
# prepares bench/.venv (matplotlib), raises the open-file limit for the idle
# connection scenarios, and runs bench/bench.py. Extra arguments are passed
# through, e.g. `bench/run.sh --quick` or `make bench BENCH_ARGS=--quick`.
# `bench/run.sh idle [--max N]` (`make bench-idle`) runs only the idle
# connection scenario, bench/idle.py (results/idle.md, idle.csv).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
cd "$root"

script=bench/bench.py
tools="redis-server redis-benchmark memcached memcaslap taskset ss /usr/sbin/nutcracker"
if [[ "${1:-}" == idle ]]; then
    shift
    script=bench/idle.py
    tools="redis-server taskset ss /usr/sbin/nutcracker"
fi
for tool in $tools; do
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

exec bench/.venv/bin/python "$script" "$@"
