#!/usr/bin/env bash
# twemproxy's own integration tests (tests/ of its source: nose-style Python,
# redis-server and memcached behind the proxy under test) run against
# Debian's nutcracker ("before") and walnut ("after"); writes a markdown
# table of passed / failed tests per test file and proxy.
#
#   TWEMPROXY_SRC=/path/to/twemproxy bench/twemproxy_suite.sh
#   TWEMPROXY_SRC=... FILES="test_redis/test_basic.py" bench/twemproxy_suite.sh
#   TWEMPROXY_SRC=... TARGETS="walnut" bench/twemproxy_suite.sh
#
# This script fetches nothing. TWEMPROXY_SRC is a twemproxy source tree (only
# tests/ is used), e.g. `git archive HEAD tests | tar -x -C DIR` from a clone
# of twemproxy (then TWEMPROXY_REV=REV names the revision in the table). Its tests/ is copied to a scratch directory per target and
# the copy is what runs; TWEMPROXY_SRC itself is not written to.
#
# Needs: redis-server, redis-cli, memcached, and a Python (PYTHON) with nose
# (pynose on Python 3.10+), redis-py 3.x, as the suite's README asks, and
# python-memcached; redis-py 5 and later open each connection with
# `HELLO 3`, which nutcracker answers by closing it, so every Redis test
# would fail on both proxies. A virtualenv of its own, e.g.
#   python3 -m venv /tmp/tw-venv
#   /tmp/tw-venv/bin/pip install pynose 'redis==3.5.3' python-memcached
#   PYTHON=/tmp/tw-venv/bin/python TWEMPROXY_SRC=... bench/twemproxy_suite.sh
#
# The copy is patched (a small Python edit, in the scratch directory only):
#   - processes are stopped by the pid in their pid file, and only when
#     /proc/PID/exe is the binary the harness copied for them (the suite as
#     shipped kills with `pkill -9 -f NAME`, which would hit any process of
#     that name on the machine); memcached gets a pid file (-P) for this;
#     NutCracker.signal() and pid() use the pid file too;
#   - memcached gets `-u root` when the suite runs as root (memcached
#     refuses root otherwise) and its readiness check speaks to the port
#     from Python instead of socat;
#   - the suite's fixed working directory /tmp/r becomes one under the
#     scratch directory;
#   - NutCracker.version() reads walnut's `-V` line ("This is walnut-X") as
#     it reads nutcracker's, so that test_system/test_reload.py's version
#     gate (its tests are of a reload by SIGUSR1 that no twemproxy release
#     has, run only for a version >= 99.99.99) skips them for walnut as
#     for every nutcracker.
# Nothing else is changed: the tests, their configurations and their fixed
# ports (redis 2100-2101, memcached 2200-2201, proxies 4100-4102 with stats
# ports 5100-5102) are the suite's; the script stops if one of them is taken.
#
# Targets (one column each): NAME=BINARY pairs in PROXIES, default
#   "nutcracker=$(command -v nutcracker) walnut=target/release/walnut".
# walnut runs with the flags the suite gives nutcracker (-d -c -o -p -s -v
# -m -i) and nothing else.
#
# Limits: each test file gets FILE_TIMEOUT seconds (default 180). After each
# file every process the file started and left running is stopped by pid.
#
# Output: OUT (default bench/results/twemproxy_suite.md). A "## Notes" section
# already in OUT is kept after the regenerated table. The verbose nose output
# of each file goes to LOG_DIR (default /tmp/walnut-twemproxy-suite).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"

: "${TWEMPROXY_SRC:?set TWEMPROXY_SRC to a twemproxy source tree (tests/)}"
[ -f "$TWEMPROXY_SRC/tests/lib/server_modules.py" ] \
    || { echo "TWEMPROXY_SRC=$TWEMPROXY_SRC has no tests/lib/server_modules.py" >&2; exit 2; }
PYTHON="${PYTHON:?set PYTHON to a Python with nose, redis-py 3.x and python-memcached}"
PROXIES="${PROXIES:-nutcracker=$(command -v nutcracker) walnut=$root/target/release/walnut}"
FILE_TIMEOUT="${FILE_TIMEOUT:-180}"
OUT="${OUT:-$root/bench/results/twemproxy_suite.md}"
LOG_DIR="${LOG_DIR:-/tmp/walnut-twemproxy-suite}"
TARGETS="${TARGETS:-}"

"$PYTHON" -c 'import nose, redis, memcache' 2>/dev/null \
    || { echo "$PYTHON lacks nose, redis or memcache (pip install pynose 'redis<4' python-memcached)" >&2; exit 2; }
for p in 2100 2101 2200 2201 4100 4101 4102 5100 5101 5102; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        echo "port $p (fixed in twemproxy's tests) is in use" >&2; exit 2
    fi
done

if [ -n "${FILES:-}" ]; then
    files=($FILES)
else
    files=($(cd "$TWEMPROXY_SRC/tests" && ls test_*/test_*.py))
fi

scratch="$(mktemp -d /tmp/walnut-twemproxy-suite.XXXXXX)"
rm -rf "$LOG_DIR" && mkdir -p "$LOG_DIR"
upid=""
# Every process a file left behind: the pid files under its work directory,
# each killed only if its executable lies under that directory.
stop_leftovers() { # $1: the suite's work directory
    local f pid exe
    for f in $(find "$1" -name '*.pid' 2>/dev/null); do
        pid="$(cat "$f" 2>/dev/null)"
        [[ "$pid" =~ ^[0-9]+$ ]] || continue
        exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || continue
        [[ "$exe" == "$1"/* ]] && kill -9 "$pid" 2>/dev/null
    done
}
cleanup() {
    [ -n "$upid" ] && kill -- "-$upid" 2>/dev/null
    for d in "$scratch"/*/r; do [ -d "$d" ] && stop_leftovers "$d"; done
    wait 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The patch, applied to a copy of tests/ (argument: that copy, its work dir).
patch_suite() {
    "$PYTHON" - "$1" "$2" <<'EOF'
import pathlib, re, sys
tests, workdir = pathlib.Path(sys.argv[1]), sys.argv[2]

def edit(path, old, new, count=1):
    text = path.read_text()
    if text.count(old) != count:
        sys.exit(f"{path}: expected {count} of {old!r}, found {text.count(old)}: the suite differs")
    path.write_text(text.replace(old, new))

# Stop by the pid file, only the process running the copied binary.
edit(tests / "conf/control.sh", "    pkill -9 -f '${runcmd}'\n",
     "    pid=$$(cat '${pidfile}' 2>/dev/null)\n"
     "    case \"$$(readlink /proc/$$pid/exe 2>/dev/null)\" in\n"
     "        '${path}'*) kill -9 \"$$pid\"; while kill -0 \"$$pid\" 2>/dev/null; do sleep 0.05; done ;;\n"
     "    esac\n"
     "    rm -f '${pidfile}'\n")
sm = tests / "lib/server_modules.py"
edit(sm, """        cmd = TT("pgrep -f '^$runcmd'", self.args)""",
     """        cmd = TT("cat '$pidfile'", self.args)""")
edit(sm, """        cmd = TT("pkill -$signo -f '^$runcmd'", self.args)""",
     """        cmd = TT("kill -$signo $$(cat '$pidfile')", self.args)""")
# memcached: a pid file, and a readiness check without socat.
edit(sm, """        self.args['startcmd']     = TT('bin/memcached -d -p $port', self.args)
        self.args['runcmd']       = self.args['startcmd']
""", """        self.args['pidfile']      = TT('$path/log/memcached.pid', self.args)
        self.args['startcmd']     = TT('bin/memcached -d -p $port -P $pidfile', self.args) \\
            + (' -u root' if os.getuid() == 0 else '')
        self.args['runcmd']       = self.args['startcmd']
""")
edit(sm, """        cmd = TT('echo "stats" | socat - TCP:$host:$port', self.args)
        ret = self._run(cmd)
        return strstr(ret, 'END')""", """        try:
            with socket.create_connection((self.args['host'], self.args['port']), timeout=1) as s:
                s.sendall(b'stats\\r\\n')
                ret = b''
                while not ret.endswith(b'END\\r\\n'):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    ret += chunk
            return strstr(ret.decode(), 'END')
        except OSError:
            return False""")
# The suite's version gate (test_system/test_reload.py runs its tests of a
# reload by SIGUSR1, which no twemproxy release has, only for a version
# >= 99.99.99) reads `-V`'s "This is nutcracker-X"; walnut's line is
# "This is walnut-X", read the same way.
edit(sm, """        return s.strip().replace('This is nutcracker-', '')""",
     """        return s.strip().replace('This is nutcracker-', '').replace('This is walnut-', '')""")
# The work directory.
for path in tests.rglob("*.py"):
    text = path.read_text()
    if "/tmp/r/" in text:
        path.write_text(text.replace("/tmp/r/", workdir.rstrip("/") + "/"))
EOF
}

declare -A results failed_names
cols=()
want() { [ -z "$TARGETS" ] || [[ " $TARGETS " == *" $1 "* ]]; }

for pair in $PROXIES; do
    label="${pair%%=*}" bin="${pair#*=}"
    want "$label" || continue
    [ -x "$bin" ] || { echo "$label: $bin is not executable" >&2; exit 2; }
    cols+=("$label")
    dir="$scratch/$label"
    mkdir -p "$dir/r"
    cp -a "$TWEMPROXY_SRC/tests" "$dir/"
    patch_suite "$dir/tests" "$dir/r" || exit 2
    mkdir -p "$dir/tests/_binaries" "$dir/tests/log"
    cp "$bin" "$dir/tests/_binaries/nutcracker"
    cp "$(command -v redis-server)" "$(command -v redis-cli)" "$dir/tests/_binaries/"
    cp "$(command -v memcached)" "$dir/tests/_binaries/"
    version="$("$bin" -V 2>&1 | head -1)"
    echo "== $label: $version" >&2
    for file in "${files[@]}"; do
        safe="$label-${file//\//_}"
        log="$LOG_DIR/${safe%.py}.out"
        start=$SECONDS
        (cd "$dir/tests" && T_LOGFILE="$LOG_DIR/${safe%.py}.t.log" \
            exec timeout -k 5 "$FILE_TIMEOUT" "$PYTHON" -m nose -v "$file" \
            </dev/null >"$log" 2>&1) &
        upid=$!
        wait "$upid"
        rc=$?
        upid=""
        stop_leftovers "$dir/r"
        # nose's summary: "Ran N tests", then "OK" or "FAILED (failures=F,
        # errors=E)", with SKIP=S in either. (The per-test "... ok" lines
        # can be split by the suite's own prints.)
        ran=$(grep -aoE '^Ran [0-9]+ test' "$log" | grep -oE '[0-9]+' || echo 0)
        summary=$(grep -aE '^(OK|FAILED)' "$log" | tail -1)
        nfail=$(grep -oE 'failures=[0-9]+' <<<"$summary" | cut -d= -f2)
        nerr=$(grep -oE 'errors=[0-9]+' <<<"$summary" | cut -d= -f2)
        skip=$(grep -oE 'SKIP=[0-9]+' <<<"$summary" | cut -d= -f2)
        bad=$(( ${nfail:-0} + ${nerr:-0} ))
        ok=$(( ${ran:-0} - bad - ${skip:-0} ))
        [ "$ok" -lt 0 ] && ok=0
        # A module set-up or tear-down that fails is reported as an ERROR of
        # its own ("ERROR: test suite for ...").
        suite_err=$(grep -acE '^ERROR: (test suite for|Failure:)' "$log")
        failed_names["$label|$file"]="$(grep -aoE '^(FAIL|ERROR): .*' "$log" | sed -e 's/^[A-Z]*: //' -e "s|$dir/tests/||g" | tr '\n' ' ')"
        flags=""
        [ "$suite_err" -gt 0 ] && flags+=" setup"
        [ "$rc" = 124 ] || [ "$rc" = 137 ] && flags+=" timeout"
        results["$label|$file"]="$ok $bad ${skip:-0}$flags"
        printf '%-11s %-36s ok=%-3s failed=%-3s skipped=%-3s %4ss%s\n' \
            "$label" "$file" "$ok" "$bad" "${skip:-0}" "$((SECONDS - start))" "$flags" >&2
    done
    results["$label|version"]="$version"
done

notes=""
[ -f "$OUT" ] && notes="$(sed -n '/^## Notes/,$p' "$OUT")"
rev="$(git -C "$TWEMPROXY_SRC" rev-parse --short HEAD 2>/dev/null || echo "${TWEMPROXY_REV:-unknown}")"
{
    echo "# twemproxy's own tests through walnut"
    echo
    echo "Generated by \`bench/twemproxy_suite.sh\` on $(date -u +%Y-%m-%d): twemproxy's"
    echo "tests/ (source revision $rev), one file at a time with \`python -m nose -v\`,"
    echo "redis-server $(redis-server --version | grep -o 'v=[0-9.]*' | cut -c3-) and"
    echo "$(memcached -V) behind the proxy. Each cell is passed / failed tests"
    echo "(\`ok\` / \`FAIL\` or \`ERROR\` lines of nose);"
    echo "*setup* = the file's module set-up or tear-down failed, *T* = cut by the"
    echo "file timeout (${FILE_TIMEOUT} s)."
    echo
    for c in "${cols[@]}"; do echo "- $c: \`${results[$c|version]}\`"; done
    echo
    printf '| test file |'; for c in "${cols[@]}"; do printf ' %s |' "$c"; done; echo
    printf '|---|'; for c in "${cols[@]}"; do printf -- '---|'; done; echo
    declare -A tot_ok tot_bad
    for file in "${files[@]}"; do
        printf '| %s |' "$file"
        for c in "${cols[@]}"; do
            read -r ok bad skip flags <<<"${results[$c|$file]}"
            tot_ok[$c]=$(( ${tot_ok[$c]:-0} + ok )); tot_bad[$c]=$(( ${tot_bad[$c]:-0} + bad ))
            cell="$ok / $bad"
            [[ "$flags" == *setup* ]] && cell+=" setup"
            [[ "$flags" == *timeout* ]] && cell+=" T"
            printf ' %s |' "$cell"
        done
        echo
    done
    printf '| **total** |'; for c in "${cols[@]}"; do printf ' **%s / %s** |' "${tot_ok[$c]}" "${tot_bad[$c]}"; done; echo
    echo
    echo "Failed tests (FAIL or ERROR):"
    echo
    for c in "${cols[@]}"; do
        for file in "${files[@]}"; do
            names="${failed_names[$c|$file]:-}"
            [ -n "$names" ] && echo "- $c, $file: ${names% }"
        done
    done
    if [ -n "$notes" ]; then echo; echo "$notes"; fi
} >"$OUT"
echo "wrote $OUT; logs in $LOG_DIR" >&2
