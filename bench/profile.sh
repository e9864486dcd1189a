#!/usr/bin/env bash
# Callgrind profile (or system-call count) of one proxy process under a fixed
# number of requests: walnut's single worker, or nutcracker for comparison.
#
#   bench/profile.sh [memcache|redis] [REQUESTS]
#   PIPELINE=16 bench/profile.sh redis 200000   (requests in flight per connection)
#
# Environment:
#   PIPELINE=N      requests in flight per connection (default 1)
#   PEER=nutcracker profile nutcracker (one process) instead of walnut's worker
#   WALNUT_BIN=PATH walnut binary to profile (default target/release/walnut)
#   PEER=predixy    profile predixy (one worker thread; Redis only; binary at
#                   PREDIXY_BIN or ../peers/predixy/src/predixy, see bench/README.md)
#   TESTS="a b"     phases, each measured on its own, in this order:
#                   redis: set get mget (MGET of 10 keys) (default "set get"); memcache: set get mix
#                   mget (mix = 9 gets : 1 set, the benchmark's load; default "mix"; mget =
#                   gets of 10 keys)
#   SERVERS=N       backends in the pool (default 1): with 3, a 10-key MGET or get is split
#                   into a fragment per server and the replies merged
#   CONNS=N         client connections (default 10)
#   VALUE_SIZE=B    value size (default 100)
#   TOOL=strace     count system calls (strace -c -f -p) instead of callgrind
#   LATENCY=off     walnut's latency recording off (admin "config set latency off")
#   SET="K V; ..."  walnut's run-time settings (admin "config set K V"), e.g.
#                   SET="reply_hold 0"
#   TOP=N           functions listed per phase (default 15)
#   BASE=N          requests of the base run (default REQUESTS / 10)
#   MIGRATING=1     Redis: walnut serves the pool in the middle of a migration from all
#                   servers but the last (SERVERS=3: 2 → 3) to all of them: the keys
#                   (key:000000000000..key:000000009999) are written through a walnut
#                   on the old servers first, then the measured walnut starts with the
#                   old configuration as its lineage (as after a hot upgrade) and
#                   `migration_rate: 1`, so its migrator moves next to nothing while
#                   the load runs: a GET of a moved key is read where the key is
##
# Starts one backend (CPU 0) and, per phase, the proxy (CPU 1) twice under
# callgrind: once for BASE requests and once for BASE + REQUESTS; the
# difference of the measured process's instructions, over the difference of
# requests completed, is the cost per request without start-up, connection
# set-up, the memcache prefill (mcload --prefill, so gets hit) and exit.
# (callgrind_control cannot reach walnut's fork()ed worker to zero or dump
# its counters: it has no vgdb FIFO; the worker writes callgrind.out.<pid>
# when it exits.) TOOL=strace: one run per phase, the measured process under
# `strace -c -f -p` during the load only. Output files stay in bench/profile/.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
cd "$root"
proto="${1:-memcache}"
requests="${2:-50000}"
top="${TOP:-15}"
pipeline="${PIPELINE:-1}"
peer="${PEER:-walnut}"
predixy_bin="${PREDIXY_BIN:-$(dirname "$root")/peers/predixy/src/predixy}"
conns="${CONNS:-10}"
size="${VALUE_SIZE:-100}"
tool="${TOOL:-callgrind}"
base="${BASE:-$((requests / 10))}"
if [[ "$proto" == redis ]]; then tests="${TESTS:-set get}"; else tests="${TESTS:-mix}"; fi
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

# Backends on CPU 0; $backend is the first, $backends all of them.
backends=()
for _ in $(seq 1 "${SERVERS:-1}"); do
    port=$(free_port)
    if [[ "$proto" == redis ]]; then
        taskset -c 0 redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
            --dir "$out" --logfile "$out/redis-$port.log" & pids+=($!)
        redis=true
    else
        taskset -c 0 memcached -u root -l 127.0.0.1 -p "$port" -U 0 -t 1 -m 1024 & pids+=($!)
        redis=false
    fi
    wait_port "$port"
    backends+=("$port")
done
backend=${backends[0]}
if [[ "$tool" == callgrind ]]; then
    wrap=(valgrind --tool=callgrind --trace-children=yes)
else
    wrap=()
fi
mcload=bench/loadgen/target/release/mcload

# One phase of load; sets $done to the requests it completed.
load() {
    local t=$1 n=$2
    if [[ "$proto" == redis ]]; then
        local cmd=(-t "$t")
        # mget: MGET of 10 keys (redis-benchmark has no such test of its own).
        [[ "$t" == mget ]] && cmd=(mget $(printf 'key:__rand_int__ %.0s' {1..10}))
        taskset -c 0 redis-benchmark -p "$listen" -c "$conns" -n "$n" -r 10000 -d "$size" \
            -P "$pipeline" -q "${cmd[@]}" | tr '\r' '\n' | tail -1
        done=$n
    else
        local ratio res mget=1
        case "$t" in set) ratio=0 ;; get) ratio=1 ;; mget) ratio=1 mget=10 ;; *) ratio=0.9 ;; esac
        res=$(taskset -c 0 "$mcload" --addr "127.0.0.1:$listen" --conns "$conns" \
            --requests "$n" --duration 600 --get-ratio "$ratio" --value-size "$size" \
            --keyspace 10000 --pipeline "$pipeline" --mget "$mget")
        echo "$res"
        done=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["errors"]==0, r; print(r["requests"])' "$res")
    fi
}

# MIGRATING: the pool as it was (every backend but the last), in old.yml.
migrating_old_config() {
    {
        echo "bench:"
        echo "  listen: 127.0.0.1:$listen"
        echo "  hash: fnv1a_64"
        echo "  distribution: ketama"
        echo "  redis: true"
        echo "  slowlog_threshold: 60000000"
        echo "  migration: true"
        echo "  migration_rate: 1"
        echo "  servers:"
        for p in "${backends[@]:0:${#backends[@]}-1}"; do echo "    - 127.0.0.1:$p:1"; done
    } > "$out/old.yml"
}

# MIGRATING: the keys written where the old placement puts them, through a
# walnut on the old servers (not measured).
migrating_load() {
    listen=$(free_port)
    migrating_old_config
    local st; st=$(free_port)
    "${WALNUT_BIN:-$root/target/release/walnut}" -c "$out/old.yml" -s "$st" -a 127.0.0.1 \
        --workers 1 -o "$out/walnut-load.log" & local lp=$!
    wait_port "$listen"
    taskset -c 0 redis-benchmark -p "$listen" -c 10 -n 100000 -r 10000 -d "$size" -P 16 -q -t set \
        | tr '\r' '\n' | tail -1
    kill -TERM "$lp"; wait "$lp" 2>/dev/null || true
}

# Start the proxy ($wrap around it); sets $master and $target (the process
# measured: walnut's worker, or nutcracker).
start_proxy() {
    listen=$(free_port); stats=$(free_port); admin=$(free_port)
    cat > "$out/proxy.yml" <<YML
bench:
  listen: 127.0.0.1:$listen
  hash: fnv1a_64
  distribution: ketama
  redis: $redis
  servers:
$(for p in "${backends[@]}"; do echo "    - 127.0.0.1:$p:1"; done)
YML
    # Under valgrind requests take milliseconds: a slow-log entry per
    # request would be measured that a real run never makes.
    [[ "$peer" == walnut ]] && echo "  slowlog_threshold: 60000000" >> "$out/proxy.yml"
    local env_lineage=()
    if [[ -n "${MIGRATING:-}" && "$peer" == walnut ]]; then
        printf '  migration: true\n  migration_rate: 1\n' >> "$out/proxy.yml"
        migrating_old_config
        env_lineage=(env "WALNUT_LINEAGE_0=$(cat "$out/proxy.yml")" "WALNUT_LINEAGE_1=$(cat "$out/old.yml")")
    fi
    # Default output name (callgrind.out.<pid> in the current directory): an
    # explicit --callgrind-out-file is not re-read correctly in the forked worker.
    if [[ "$peer" == predixy ]]; then
        [[ "$proto" == redis ]] || { echo "profile: predixy is a Redis proxy" >&2; exit 1; }
        cat > "$out/predixy.conf" <<CONF
Name profile
Bind 127.0.0.1:$listen
WorkerThreads 1
ClientTimeout 0
LogVerbSample 0
LogDebugSample 0
LogInfoSample 0
LogNoticeSample 1
LogWarnSample 1
LogErrorSample 1
Authority {
    Auth {
        Mode write
    }
}
StandaloneServerPool {
    Hash crc16
    Distribution modula
    RefreshMethod fixed
$(for i in "${!backends[@]}"; do printf '    Group g%s {\n        + 127.0.0.1:%s\n    }\n' "$i" "${backends[$i]}"; done)
}
CONF
        (cd "$out" && exec taskset -c 1 "${wrap[@]}" "$predixy_bin" "$out/predixy.conf" \
            > "$out/predixy.log" 2>> "$out/valgrind.log") &
        master=$!
        wait_port "$listen"
        target=$master
    elif [[ "$peer" == nutcracker ]]; then
        (cd "$out" && exec taskset -c 1 "${wrap[@]}" nutcracker -c "$out/proxy.yml" -s "$stats" \
            -a 127.0.0.1 -o "$out/nutcracker.log" 2>> "$out/valgrind.log") &
        master=$!
        wait_port "$listen"; wait_port "$stats"
        target=$master
    else
        (cd "$out" && exec "${env_lineage[@]}" taskset -c 1 "${wrap[@]}" "${WALNUT_BIN:-$root/target/release/walnut}" -c "$out/proxy.yml" \
            -s "$stats" -a 127.0.0.1 --workers 1 --cpu-affinity none --admin "127.0.0.1:$admin" \
            -o "$out/walnut.log" 2>> "$out/valgrind.log") &
        master=$!
        wait_port "$listen"; wait_port "$stats"
        target=""
        for _ in $(seq 1 300); do
            target=$(pgrep -P "$master" | head -1)
            [[ -n "$target" ]] && break
            sleep 0.1
        done
        [[ -n "$target" ]] || { echo "profile: no worker process under $master" >&2; exit 1; }
    fi
    pids+=($master)
    # Run-time settings (admin `config set`): LATENCY=off measures with
    # latency histograms and the slow log switched off (the on/off cost of
    # recording, in instructions); SET="reply_hold 0; ..." sets any others.
    local settings="${SET:-}"
    [[ "${LATENCY:-on}" == off ]] && settings="latency off;$settings"
    if [[ -n "$settings" && "$peer" == walnut ]]; then
        wait_port "$admin"
        python3 - "$admin" "$settings" <<'PY'
import socket, sys
for line in filter(None, (x.strip() for x in sys.argv[2].split(";"))):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
    s.sendall(f"config set {line}\r\n".encode())
    print(f"profile: admin: config set {line}:", s.recv(200).decode().strip())
    s.close()
PY
    fi
    if [[ "$proto" != redis ]]; then
        taskset -c 0 "$mcload" --addr "127.0.0.1:$listen" --conns 1 --requests 1 --duration 600 \
            --value-size "$size" --keyspace 10000 --prefill > /dev/null
    fi
}

stop_proxy() {
    kill -TERM "$master"
    for _ in $(seq 1 600); do kill -0 "$master" 2>/dev/null || break; sleep 0.1; done
}

# Instructions of $target in its exit-time callgrind file.
instructions() {
    local file=""
    for _ in $(seq 1 100); do
        file=$(ls "$out"/callgrind.out."$target" 2>/dev/null || true)
        [[ -n "$file" ]] && break
        sleep 0.1
    done
    [[ -n "$file" ]] || { echo "profile: no callgrind output for $target" >&2; exit 1; }
    (callgrind_annotate "$file" 2>/dev/null || true) | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}

if [[ -n "${MIGRATING:-}" ]]; then
    [[ "$proto" == redis && "$peer" == walnut && ${#backends[@]} -ge 2 ]] \
        || { echo "profile: MIGRATING needs redis, walnut and SERVERS >= 2" >&2; exit 1; }
    migrating_load
fi
echo "profile: $peer, $proto, phases: $tests; $requests requests each (less a base run of $base)," \
    "$conns connections, $pipeline in flight per connection, ${size} B values, $tool"
summary=()
for t in $tests; do
    if [[ "$tool" == callgrind ]]; then
        # Two runs: base requests, then base + requests; the difference is
        # the cost of `requests` requests without start-up, connection set-up,
        # prefill and exit (callgrind_control cannot reach a fork()ed worker
        # to zero its counters).
        start_proxy; load "$t" "$base"; base_done=$done; stop_proxy
        base_total=$(instructions)
        start_proxy; load "$t" $((base + requests)); stop_proxy
        total=$(instructions)
        file="$out/callgrind.out.$target"
        n=$((done - base_done))
        line="$peer $proto $t P$pipeline ${size}B c$conns: ($total - $base_total) instructions / $n requests = $(((total - base_total) / n)) instructions/request"
        summary+=("$line")
        echo
        echo "$line"
        callgrind_annotate --inclusive=no "$file" 2>/dev/null | sed -n '/file:function/,$p' | head -n $((top + 2)) || true
        echo "full data: callgrind_annotate $file   (or kcachegrind)"
    else
        start_proxy
        strace -c -f -p "$target" -o "$out/strace.$t" & st=$!
        sleep 1
        load "$t" "$requests"
        kill -INT "$st"; wait "$st" || true
        stop_proxy
        calls=$(awk '$NF=="total" {print $4}' "$out/strace.$t")
        line="$peer $proto $t P$pipeline ${size}B c$conns: $calls system calls / $done requests = $(python3 -c "print(round($calls/$done, 3))") per request"
        summary+=("$line")
        echo
        echo "$line"
        python3 - "$out/strace.$t" "$done" <<'PY'
import sys
done = int(sys.argv[2])
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
        errors = int(f[4]) if len(f) == 6 else 0
        print(f"  {f[-1]:<14} {int(f[3]) / done:.3f}/request" + (f" ({errors / done:.3f} failed)" if errors else ""))
PY
    fi
done
echo
printf '%s\n' "${summary[@]}"
