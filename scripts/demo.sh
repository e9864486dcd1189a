#!/usr/bin/env bash
# walnut demo: two memcached and two redis-server on loopback, one walnut in
# front of them (a memcached pool and a Redis pool), stats on a port.
#
#   scripts/demo.sh            run in the foreground until Ctrl-C
#   scripts/demo.sh --smoke    start, try a few commands, stop (non-interactive)
#
# Environment: DEMO_PROXY=/path/to/binary runs another binary with the same
# flags (e.g. /usr/sbin/nutcracker); DEMO_PORT_BASE moves every port.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
SMOKE=0
[ "${1:-}" = "--smoke" ] && SMOKE=1

BASE="${DEMO_PORT_BASE:-22000}"
MC_PORTS=($((BASE + 211)) $((BASE + 212)))
REDIS_PORTS=($((BASE + 379)) $((BASE + 380)))
MC_LISTEN=$((BASE + 121))
REDIS_LISTEN=$((BASE + 122))
STATS_PORT=$((BASE + 222))
ADMIN_PORT=$((BASE + 223))

say() { printf '\033[1m%s\033[0m\n' "$*"; }

need_pkgs=()
command -v memcached >/dev/null 2>&1 || need_pkgs+=(memcached)
command -v redis-server >/dev/null 2>&1 || need_pkgs+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_pkgs+=(redis-tools)
command -v nc >/dev/null 2>&1 || need_pkgs+=(netcat-openbsd)
if [ "${#need_pkgs[@]}" -gt 0 ]; then
    say "installing ${need_pkgs[*]} (apt)"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_pkgs[@]}"
fi

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "${MC_PORTS[@]}" "${REDIS_PORTS[@]}" "$MC_LISTEN" "$REDIS_LISTEN" "$STATS_PORT" "$ADMIN_PORT"; do
    if port_busy "$p"; then
        echo "port $p on 127.0.0.1 is in use; set DEMO_PORT_BASE to move the demo" >&2
        exit 1
    fi
done

if [ -n "${DEMO_PROXY:-}" ]; then
    PROXY_BIN="$DEMO_PROXY"
else
    say "building walnut (cargo build --release)"
    [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
    cargo build --release
    PROXY_BIN="$ROOT/target/release/walnut"
fi

WORK="$(mktemp -d /tmp/walnut-demo.XXXXXX)"
PIDS=()
cleanup() {
    trap - INT TERM EXIT
    say "stopping demo processes"
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    echo "logs and config kept in $WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_port() {
    local port=$1 pid=$2
    for _ in $(seq 200); do
        port_busy "$port" && return 0
        kill -0 "$pid" 2>/dev/null || { echo "process $pid exited; see $WORK" >&2; return 1; }
        sleep 0.05
    done
    echo "nothing listening on $port after 10 s; see $WORK" >&2
    return 1
}

for p in "${MC_PORTS[@]}"; do
    memcached -u "$(id -un)" -l 127.0.0.1 -p "$p" -U 0 >"$WORK/memcached-$p.log" 2>&1 &
    PIDS+=($!); wait_port "$p" "$!"
done
for p in "${REDIS_PORTS[@]}"; do
    mkdir -p "$WORK/redis-$p"
    redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$WORK/redis-$p" --logfile "$WORK/redis-$p.log" &
    PIDS+=($!); wait_port "$p" "$!"
done

CONF="$WORK/demo.yml"
cat >"$CONF" <<YAML
cache:
  listen: 127.0.0.1:$MC_LISTEN
  hash: fnv1a_64
  distribution: ketama
  timeout: 400
  auto_eject_hosts: true
  server_retry_timeout: 2000
  server_failure_limit: 1
  servers:
   - 127.0.0.1:${MC_PORTS[0]}:1 mc-a
   - 127.0.0.1:${MC_PORTS[1]}:1 mc-b

sessions:
  listen: 127.0.0.1:$REDIS_LISTEN
  redis: true
  hash: fnv1a_64
  hash_tag: "{}"
  distribution: ketama
  timeout: 400
  servers:
   - 127.0.0.1:${REDIS_PORTS[0]}:1 redis-a
   - 127.0.0.1:${REDIS_PORTS[1]}:1 redis-b
YAML

# nutcracker has no admin port (and no --admin flag).
ADMIN_ARGS=(--admin "127.0.0.1:$ADMIN_PORT")
[ -n "${DEMO_PROXY:-}" ] && ADMIN_ARGS=()
say "starting $PROXY_BIN -c $CONF -s $STATS_PORT ${ADMIN_ARGS[*]}"
"$PROXY_BIN" -c "$CONF" -s "$STATS_PORT" -a 127.0.0.1 "${ADMIN_ARGS[@]}" -o "$WORK/proxy.log" &
PROXY_PID=$!
PIDS=("$PROXY_PID" "${PIDS[@]}")
wait_port "$MC_LISTEN" "$PROXY_PID"
wait_port "$REDIS_LISTEN" "$PROXY_PID"
wait_port "$STATS_PORT" "$PROXY_PID"
[ "${#ADMIN_ARGS[@]}" -gt 0 ] && wait_port "$ADMIN_PORT" "$PROXY_PID"

cat <<TXT

  walnut demo is running (config: $CONF, log: $WORK/proxy.log)

  memcached pool 'cache'   -> 127.0.0.1:$MC_LISTEN  (backends ${MC_PORTS[*]})
  Redis pool 'sessions'    -> 127.0.0.1:$REDIS_LISTEN  (backends ${REDIS_PORTS[*]})
  stats (JSON)             -> 127.0.0.1:$STATS_PORT
  admin                    -> 127.0.0.1:$ADMIN_PORT  (status, pools, config show, GET /metrics)

  Try:
    printf 'set a 0 0 1\r\nx\r\nget a\r\n' | nc -q 1 127.0.0.1 $MC_LISTEN
    redis-cli -p $REDIS_LISTEN set user:{42}:name ada
    redis-cli -p $REDIS_LISTEN get user:{42}:name
    nc 127.0.0.1 $STATS_PORT
    printf 'status\r\n' | nc -q 1 127.0.0.1 $ADMIN_PORT
    $PROXY_BIN --top 127.0.0.1:$ADMIN_PORT

  Ctrl-C stops everything this script started.

TXT

if [ "$SMOKE" = 1 ]; then
    say "smoke: memcached pool"
    printf 'set a 0 0 1\r\nx\r\nget a\r\n' | nc -q 1 127.0.0.1 "$MC_LISTEN" | tee "$WORK/smoke-mc.txt"
    grep -q '^VALUE a 0 1' "$WORK/smoke-mc.txt"
    say "smoke: Redis pool"
    redis-cli -p "$REDIS_LISTEN" set 'user:{42}:name' ada
    [ "$(redis-cli -p "$REDIS_LISTEN" get 'user:{42}:name')" = ada ]
    say "smoke: stats"
    nc -q 1 127.0.0.1 "$STATS_PORT" </dev/null | head -c 300; echo
    if [ "${#ADMIN_ARGS[@]}" -gt 0 ]; then
        say "smoke: admin port"
        printf 'status\r\n' | nc -q 1 127.0.0.1 "$ADMIN_PORT" | tee "$WORK/smoke-admin.txt" | head -n 3
        grep -q '^master_pid: ' "$WORK/smoke-admin.txt"
    fi
    say "smoke: ok"
    exit 0
fi

wait "$PROXY_PID"
