#!/usr/bin/env bash
# Redis's own unit tests (tests/unit, external-server mode) directly against
# one redis-server and through walnut, one unit at a time; writes a markdown
# table of [ok]/[err] counts per unit and target.
#
#   REDIS_SRC=/path/to/redis-7.0.15 bench/redis_suite.sh
#   REDIS_SRC=... WALNUT_BEFORE=/path/to/older/walnut bench/redis_suite.sh
#   REDIS_SRC=... UNITS="unit/type/incr unit/expire" bench/redis_suite.sh
#
# This script fetches nothing. REDIS_SRC is an unpacked Redis source tree of
# the same version as the redis-server on PATH (only `runtest` and `tests/`
# are used), e.g. `git archive 7.0.15 runtest tests | tar -x -C DIR` from a
# clone of the Redis repository. It is copied to a scratch directory and the
# copy is what runs; REDIS_SRC itself is not written to. Needs tclsh 8.5+,
# redis-server and redis-cli.
#
# Targets (one column each in the table):
#   direct         one redis-server (the first backend), no proxy
#   NAME           walnut over two redis-servers (ketama, fnv1a_64), for
#                  each binary given: WALNUT_AFTER (default
#                  target/release/walnut, "after") and, if set,
#                  WALNUT_BEFORE ("before")
#   NAME lenient   the same walnut, with the suite's per-server set-up
#                  (`r flushall` and `r function flush` before every
#                  start_server block) tolerating an error: without it a
#                  unit stops at its first block as soon as either command is
#                  refused. The backends are flushed directly before each unit
#                  instead. The lenient copy is patched with sed only, in the
#                  scratch directory.
# All targets run with --singledb (walnut serves database 0 only) and
# --durable (an error in one test is counted and the unit goes on); tests
# tagged external:skip are skipped by the suite itself. The backends run with
# --enable-debug-command yes so that the direct column includes DEBUG tests.
#
# Limits: each unit gets UNIT_TIMEOUT seconds (default 120) and each test
# TEST_TIMEOUT (default 60); a unit cut by either is marked in the table.
# After each unit through walnut the script checks that the walnut master is
# still alive; if not, the unit is marked "walnut exited" and walnut is
# restarted. Servers and walnut are started on BASE_PORT+1.. (default 31400)
# and stopped by pid on exit.
#
# Output: OUT (default bench/results/redis-suite.md). A "## Notes" section
# already in OUT is kept after the regenerated tables. Raw runtest output of
# each unit goes to LOG_DIR (default /tmp/walnut-redis-suite).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"

: "${REDIS_SRC:?set REDIS_SRC to an unpacked Redis source tree (runtest, tests/)}"
[ -x "$REDIS_SRC/runtest" ] && [ -d "$REDIS_SRC/tests/unit" ] \
    || { echo "REDIS_SRC=$REDIS_SRC has no runtest or tests/unit" >&2; exit 2; }
WALNUT_AFTER="${WALNUT_AFTER:-$root/target/release/walnut}"
WALNUT_BEFORE="${WALNUT_BEFORE:-}"
BEFORE_LABEL="${BEFORE_LABEL:-before}"
AFTER_LABEL="${AFTER_LABEL:-after}"
UNIT_TIMEOUT="${UNIT_TIMEOUT:-120}"
TEST_TIMEOUT="${TEST_TIMEOUT:-60}"
BASE_PORT="${BASE_PORT:-31400}"
OUT="${OUT:-$root/bench/results/redis-suite.md}"
LOG_DIR="${LOG_DIR:-/tmp/walnut-redis-suite}"
TARGETS="${TARGETS:-}" # default: every target described above

r1=$((BASE_PORT + 1)) r2=$((BASE_PORT + 2)) wport=$((BASE_PORT + 10)) sport=$((BASE_PORT + 11))
for p in $r1 $r2 $wport $sport; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        echo "port $p is in use; set BASE_PORT" >&2; exit 2
    fi
done

scratch="$(mktemp -d /tmp/walnut-redis-suite.XXXXXX)"
rm -rf "$LOG_DIR" && mkdir -p "$LOG_DIR"
pids=()
wpid=""
upid=""
cleanup() {
    [ -n "$upid" ] && kill -- "-$upid" 2>/dev/null
    [ -n "$wpid" ] && kill "$wpid" 2>/dev/null
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The suite, strict (as shipped) and lenient (set-up flushes tolerate errors).
mkdir -p "$scratch/strict" "$scratch/lenient"
cp -a "$REDIS_SRC/runtest" "$REDIS_SRC/tests" "$scratch/strict/"
cp -a "$REDIS_SRC/runtest" "$REDIS_SRC/tests" "$scratch/lenient/"
sed -i -e 's/^\(    \)r flushall$/\1catch {r flushall}/' \
       -e 's/^\(    \)r function flush$/\1catch {r function flush}/' \
    "$scratch/lenient/tests/support/server.tcl"
if [ "$(grep -c '^    catch {r \(flushall\|function flush\)}$' "$scratch/lenient/tests/support/server.tcl")" != 2 ]; then
    echo "could not make the lenient copy: tests/support/server.tcl differs from 7.0's" >&2
    exit 2
fi

# Units: the unit/ entries of the suite's own list, or UNITS.
if [ -n "${UNITS:-}" ]; then
    units=($UNITS)
else
    units=($(sed -n '/^set ::all_tests {/,/^}/p' "$REDIS_SRC/tests/test_helper.tcl" | grep -o 'unit/[A-Za-z0-9/_-]*'))
fi

# The backends get the settings of the suite's own tests/assets/default.conf
# that tests rely on (keyspace events, a diskless sync without delay for the
# tests that read the replication stream, DEBUG, protected configs). They,
# and walnut, are started afresh for every unit: some tests change the
# server's configuration and do not restore it when they fail in
# external-server mode (type/set leaves rdb-key-save-delay at 2147483647,
# after which every fork-based test of later units hangs).
start_backends() {
    local p
    for p in $r1 $r2; do
        redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no \
            --notify-keyspace-events KEA --latency-monitor-threshold 1 \
            --repl-diskless-sync-delay 0 --enable-protected-configs yes \
            --enable-debug-command yes --dir "$scratch" \
            --logfile "$LOG_DIR/redis-$p.log" &
        pids+=($!)
    done
    wait_port $r1 && wait_port $r2
}
stop_backends() { # SIGTERM; a server still there after 3 s (busy child) and its children get SIGKILL
    local p c
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do
        for _ in $(seq 30); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$p" 2>/dev/null; then
            for c in $(ps -o pid= --ppid "$p"); do kill -9 "$c" 2>/dev/null; done
            kill -9 "$p" 2>/dev/null
        fi
        wait "$p" 2>/dev/null
    done
    pids=()
}
wait_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on $1" >&2
    return 1
}
# walnut config: allow_flush and allow_keys, dropping a key an older binary
# does not know.
conf="$scratch/walnut.yml"
write_conf() { # $1: binary
    local extra
    for extra in $'  allow_flush: true\n  allow_keys: true' '  allow_flush: true' ''; do
        cat >"$conf" <<EOF2
suite:
  listen: 127.0.0.1:$wport
  redis: true
  hash: fnv1a_64
  distribution: ketama
  timeout: 2000
${extra}
  servers:
   - 127.0.0.1:$r1:1
   - 127.0.0.1:$r2:1
EOF2
        "$1" -t -c "$conf" >/dev/null 2>&1 && return 0
    done
    echo "$1 accepts none of the configurations" >&2
    return 1
}
start_walnut() { # $1: binary, $2: log
    "$1" -c "$conf" -s "$sport" --admin off --workers 1 -o "$2" &
    wpid=$!
    wait_port "$wport"
}
stop_walnut() { [ -n "$wpid" ] && kill "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null; wpid=""; }

# results[target|unit] = "ok err flags"; also appended to RESULTS_TSV when set
# (TABLE_FROM=file.tsv writes the table from such lines of several runs).
declare -A results
cols=()

run_units() { # $1: target label, $2: suite dir, $3: walnut binary or ""
    local label="$1" dir="$2" bin="$3" unit log rc ok err exc flags safe start port wlog
    cols+=("$label")
    wlog="$LOG_DIR/walnut-${label// /_}.log"
    for unit in "${units[@]}"; do
        safe="${label// /_}-${unit//\//_}"
        log="$LOG_DIR/$safe.out"
        start_backends || exit 1
        port=$r1
        if [ -n "$bin" ]; then start_walnut "$bin" "$wlog" || exit 1; port=$wport; fi
        start=$SECONDS
        # timeout(1) runs the suite in a process group of its own: cleanup
        # kills that group if this script is stopped mid-unit. --baseport
        # places the suite's own control port below BASE_PORT+100 (several
        # runs at once need different BASE_PORTs).
        (cd "$dir" && exec timeout -k 5 "$UNIT_TIMEOUT" ./runtest --host 127.0.0.1 --port "$port" \
            --baseport $((BASE_PORT + 100)) --singledb --durable --timeout "$TEST_TIMEOUT" --single "$unit" \
            </dev/null >"$log.raw" 2>&1) &
        upid=$!
        wait "$upid"
        rc=$?
        upid=""
        sed 's/\x1b\[[0-9;]*m//g' "$log.raw" >"$log" && rm -f "$log.raw"
        ok=$(grep -c '^\[ok\]:' "$log")
        err=$(grep -c '^\[err\]:' "$log")
        exc=$(grep -c '^\[exception\]:' "$log")
        flags=""
        [ "$exc" -gt 0 ] && flags+=" exception"
        grep -q '^\[TIMEOUT\]' "$log" && flags+=" test-timeout"
        [ "$rc" = 124 ] || [ "$rc" = 137 ] && flags+=" unit-timeout"
        if [ -n "$bin" ]; then
            if ! kill -0 "$wpid" 2>/dev/null; then
                flags+=" walnut-exited"
                echo "walnut exited during $unit ($label)" >&2
                cp "$wlog" "$LOG_DIR/walnut-exit-$safe.log" 2>/dev/null
            fi
            stop_walnut
        fi
        stop_backends
        results["$label|$unit"]="$ok $err$flags"
        [ -n "${RESULTS_TSV:-}" ] && printf '%s\t%s\t%s\t%s\t%s\n' "$label" "$unit" "$ok" "$err" "$flags" >>"$RESULTS_TSV"
        printf '%-22s %-28s ok=%-4s err=%-4s %4ss%s\n' "$label" "$unit" "$ok" "$err" "$((SECONDS - start))" "$flags" >&2
    done
}

want() { [ -z "$TARGETS" ] || [[ " $TARGETS " == *" $1 "* ]]; }

if [ -n "${TABLE_FROM:-}" ]; then
    units=()
    declare -A seen
    while IFS=$'\t' read -r label unit ok err flags; do
        [ -n "${seen[c$label]:-}" ] || { seen[c$label]=1; cols+=("$label"); }
        [ -n "${seen[u$unit]:-}" ] || { seen[u$unit]=1; units+=("$unit"); }
        results["$label|$unit"]="$ok $err $flags"
    done <"$TABLE_FROM"
else
    want direct && run_units direct "$scratch/strict" ""
    for pair in "$BEFORE_LABEL:$WALNUT_BEFORE" "$AFTER_LABEL:$WALNUT_AFTER"; do
        label="${pair%%:*}" bin="${pair#*:}"
        [ -n "$bin" ] || continue
        want "$label" || want "$label-lenient" || continue
        write_conf "$bin" || exit 1
        cp "$conf" "$LOG_DIR/walnut-$label.yml"
        want "$label" && run_units "$label" "$scratch/strict" "$bin"
        want "$label-lenient" && run_units "$label lenient" "$scratch/lenient" "$bin"
    done
fi

# The table.
notes=""
[ -f "$OUT" ] && notes="$(sed -n '/^## Notes/,$p' "$OUT")"
{
    echo "# Redis's unit tests through walnut"
    echo
    echo "Generated by \`bench/redis_suite.sh\` on $(date -u +%Y-%m-%d): Redis"
    echo "test suite of $(redis-server --version | grep -o 'v=[0-9.]*' | cut -c3-) in external-server mode"
    echo "(\`--singledb --durable\`, tests tagged external:skip skipped), one unit at a"
    echo "time, unit timeout ${UNIT_TIMEOUT} s, test timeout ${TEST_TIMEOUT} s. walnut: one worker,"
    echo "a Redis pool over two redis-servers. Each cell is passed / failed tests"
    echo "(\`[ok]\` / \`[err]\` lines);"
    echo "*exc* = the unit stopped on an exception (the tests after it did not run),"
    echo "*T* = cut by a timeout, *X* = walnut exited."
    echo
    printf '| unit |'; for c in "${cols[@]}"; do printf ' %s |' "$c"; done; echo
    printf '|---|'; for c in "${cols[@]}"; do printf -- '---|'; done; echo
    declare -A tot_ok tot_err
    for unit in "${units[@]}"; do
        printf '| %s |' "$unit"
        for c in "${cols[@]}"; do
            read -r ok err flags <<<"${results[$c|$unit]}"
            tot_ok[$c]=$(( ${tot_ok[$c]:-0} + ok )); tot_err[$c]=$(( ${tot_err[$c]:-0} + err ))
            cell="$ok / $err"
            [[ "$flags" == *exception* ]] && cell+=" exc"
            [[ "$flags" == *timeout* ]] && cell+=" T"
            [[ "$flags" == *walnut-exited* ]] && cell+=" X"
            printf ' %s |' "$cell"
        done
        echo
    done
    printf '| **total** |'; for c in "${cols[@]}"; do printf ' **%s / %s** |' "${tot_ok[$c]}" "${tot_err[$c]}"; done; echo
    if [ -n "$notes" ]; then echo; echo "$notes"; fi
} >"$OUT"
echo "wrote $OUT; logs in $LOG_DIR" >&2
