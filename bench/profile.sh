#!/usr/bin/env bash
# Callgrind profile of one walnut worker under a fixed number of requests.
#
#   bench/profile.sh [memcache|redis] [REQUESTS]
#   PIPELINE=16 bench/profile.sh redis 200000   (requests in flight per connection)
#
# Starts one backend (CPU 0) and walnut with 1 worker under callgrind. walnut's
# workers are fork()ed from the master without exec, so callgrind follows them
# by itself and writes one callgrind.out.<pid> per process
# (--trace-children=yes only matters for exec). The worker's counters are
# zeroed just before the load (callgrind_control -z) so start-up is left out;
# it prints instructions per request and the top functions (self cost).
# Output files stay in bench/profile/.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
cd "$root"
proto="${1:-memcache}"
requests="${2:-50000}"
top="${TOP:-15}"
pipeline="${PIPELINE:-1}"
out="$here/profile"
rm -rf "$out" && mkdir -p "$out"

cargo build --release
cargo build --release --manifest-path bench/loadgen/Cargo.toml --offline 2>/dev/null \
    || cargo build --release --manifest-path bench/loadgen/Cargo.toml

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 1 600); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "profile: port $1 not ready" >&2; return 1
}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

backend=$(free_port); listen=$(free_port); stats=$(free_port); admin=$(free_port)
if [[ "$proto" == redis ]]; then
    taskset -c 0 redis-server --port "$backend" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$out" --logfile "$out/redis.log" & pids+=($!)
    redis=true
else
    taskset -c 0 memcached -u root -l 127.0.0.1 -p "$backend" -U 0 -t 1 -m 256 & pids+=($!)
    redis=false
fi
wait_port "$backend"
cat > "$out/walnut.yml" <<YML
bench:
  listen: 127.0.0.1:$listen
  hash: fnv1a_64
  distribution: ketama
  redis: $redis
  servers:
    - 127.0.0.1:$backend:1
YML

# Default output name (callgrind.out.<pid> in the current directory): an
# explicit --callgrind-out-file is not re-read correctly in the forked worker.
(cd "$out" && exec taskset -c 1 valgrind --tool=callgrind --trace-children=yes \
    "$root/target/release/walnut" -c "$out/walnut.yml" -s "$stats" -a 127.0.0.1 \
    --workers 1 --cpu-affinity none --admin "127.0.0.1:$admin" -o "$out/walnut.log" 2> "$out/valgrind.log") &
master=$!; pids+=($master)
wait_port "$listen"; wait_port "$stats"
worker=""
for _ in $(seq 1 300); do
    worker=$(pgrep -P "$master" | head -1)
    [[ -n "$worker" ]] && break
    sleep 0.1
done
[[ -n "$worker" ]] || { echo "profile: no worker process under $master" >&2; exit 1; }
# LATENCY=off: measure with latency histograms and the slow log switched
# off at run time (the on/off cost of recording, in instructions).
if [[ "${LATENCY:-on}" == off ]]; then
    wait_port "$admin"
    python3 - "$admin" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
s.sendall(b"config set latency off\r\n")
print("profile: admin:", s.recv(200).decode().strip())
PY
fi
callgrind_control -z "$worker" >/dev/null 2>&1 || echo "profile: could not zero counters (start-up included)"

echo "profile: $requests $proto requests through worker $worker, $pipeline in flight per connection"
if [[ "$proto" == redis ]]; then
    taskset -c 0 redis-benchmark -p "$listen" -c 10 -n "$requests" -r 10000 -d 100 -t set,get -P "$pipeline" -q
    requests=$((requests * 2))
else
    taskset -c 0 bench/loadgen/target/release/mcload --addr "127.0.0.1:$listen" --conns 10 \
        --requests "$requests" --duration 600 --get-ratio 0.9 --value-size 100 --keyspace 10000 --pipeline "$pipeline"
fi

# Dump the worker's counters now: a worker stopped by the master may not get to
# write its own file at exit.
callgrind_control -d "$worker" >/dev/null 2>&1 || true
kill -TERM "$master"
for _ in $(seq 1 300); do kill -0 "$master" 2>/dev/null || break; sleep 0.1; done
file=$(ls -S "$out"/callgrind.out."$worker"* 2>/dev/null | head -1)
[[ -n "$file" ]] || { echo "profile: no callgrind output for worker $worker" >&2; exit 1; }
total=$( (callgrind_annotate "$file" 2>/dev/null || true) | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo
echo "worker instructions: $total for $requests requests = $((total / requests)) instructions/request"
echo
callgrind_annotate --inclusive=no "$file" 2>/dev/null | sed -n '/file:function/,$p' | head -n $((top + 2)) || true
echo
echo "full data: callgrind_annotate $file   (or kcachegrind)"
