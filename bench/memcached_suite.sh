#!/usr/bin/env bash
# memcached's own tests (t/*.t: Perl, Test::More) directly against
# memcached and through walnut, one file at a time; writes a markdown table
# of ok / not ok counts per file and target.
#
#   MEMCACHED_SRC=/path/to/memcached-1.6.18 bench/memcached_suite.sh
#   MEMCACHED_SRC=... WALNUT_BEFORE=/path/to/older/walnut bench/memcached_suite.sh
#   MEMCACHED_SRC=... FILES="getset cas" bench/memcached_suite.sh
#
# This script fetches nothing. MEMCACHED_SRC is a memcached source tree of
# the same version as the memcached on PATH (only t/ is used), e.g.
# `git archive 1.6.18 t | tar -x -C DIR` from a clone of memcached. t/ is
# copied to a scratch directory and the copy is what runs; MEMCACHED_SRC
# itself is not written to. Needs perl with Test::More (prove is not used)
# and memcached.
#
# The copy's t/lib/MemcachedTest.pm is patched (Perl, in the scratch
# directory only): the suite's new_memcached becomes new_memcached_direct,
# and a new new_memcached
#   - starts the memcached the test asks for, always on a loopback TCP port
#     (` -l 127.0.0.1` added unless the test gives -l or -s; the suite
#     would use a unix socket otherwise), in both columns;
#   - with WALNUT_BIN set, starts walnut in front of it (a one-server
#     memcache pool, `timeout: 4000`, `allow_flush: true` so that
#     flush_all reaches the server (walnut refuses it by default, as
#     `memcached -F` does), on a free loopback port, stats on
#     another, `--admin off --workers 1`) and returns a handle on walnut's
#     address: every socket the test opens goes through walnut. Handles are
#     stopped by pid as the suite stops them (SIGINT when the handle goes);
#     dropping walnut's handle drops the memcached's.
# A memcached that refuses `-o relaxed_privileges` (a build without
# privilege dropping: Debian's) is not given it, in both columns.
# Each started pid is also written to a file; after each test file whatever
# of them still runs is killed by pid. memcached-debug is the memcached on
# PATH (so commands of a debug build, `debugtime`, are refused in both
# columns) and timedrun a two-line stand-in that runs its command.
#
# Files run (RUN, default below): the protocol-level ones, whose results
# depend on what a client sees of get/set/cas/incr/touch/flags/noreply/
# binary/meta commands. The others test server internals that no proxy
# passes through (stats groups such as `stats slabs`, which walnut answers
# with a CLIENT_ERROR and the suite's mem_stats then waits for an END that
# never comes: issue_14, issue_29, issue_41; slabs, LRU, evictions, extstore, restart, start-up
# flags and daemonizing, UDP, unix sockets, TLS, SASL, connection limits,
# idle timeouts, shutdown, the built-in proxy, watchers) and are listed as
# skipped in the output with that reason; `line-lengths` and `whitespace`
# read memcached's C sources and start no server.
#
# Targets (one column each): direct (memcached alone), WALNUT_BEFORE's label
# (BEFORE_LABEL, default "before") when set, and WALNUT_AFTER's (AFTER_LABEL,
# default "after"; binary default target/release/walnut).
#
# Limits: each file gets FILE_TIMEOUT seconds (default 120).
#
# Output: OUT (default bench/results/memcached_suite.md). A "## Notes" section
# already in OUT is kept after the regenerated table. The TAP output of each
# file goes to LOG_DIR (default /tmp/walnut-memcached-suite).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"

: "${MEMCACHED_SRC:?set MEMCACHED_SRC to a memcached source tree (t/)}"
[ -f "$MEMCACHED_SRC/t/lib/MemcachedTest.pm" ] \
    || { echo "MEMCACHED_SRC=$MEMCACHED_SRC has no t/lib/MemcachedTest.pm" >&2; exit 2; }
WALNUT_AFTER="${WALNUT_AFTER:-$root/target/release/walnut}"
WALNUT_BEFORE="${WALNUT_BEFORE:-}"
BEFORE_LABEL="${BEFORE_LABEL:-before}"
AFTER_LABEL="${AFTER_LABEL:-after}"
FILE_TIMEOUT="${FILE_TIMEOUT:-120}"
OUT="${OUT:-$root/bench/results/memcached_suite.md}"
LOG_DIR="${LOG_DIR:-/tmp/walnut-memcached-suite}"
RUN="${RUN:-getset incrdecr cas flags expirations noreply touch getandtouch flush-all
    binary binary-get metaget multiversioning bogus-commands malicious-commands
    strtol-testing chunked-items quit issue_3 issue_50 issue_68 issue_70 issue_104
    issue_108 issue_152 issue_183 issue_192}"
files=(${FILES:-$RUN})

memcached_bin="$(command -v memcached)" || { echo "no memcached on PATH" >&2; exit 2; }
perl -MTest::More -e 1 2>/dev/null || { echo "perl lacks Test::More" >&2; exit 2; }

scratch="$(mktemp -d /tmp/walnut-memcached-suite.XXXXXX)"
rm -rf "$LOG_DIR" && mkdir -p "$LOG_DIR"
upid=""
stop_started() { # every pid the suite's copy wrote down and that still runs one of ours
    local pid exe
    [ -f "$scratch/pids" ] || return 0
    while read -r pid; do
        [[ "$pid" =~ ^[0-9]+$ ]] || continue
        exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || continue
        case "$exe" in "$memcached_bin" | */walnut*) kill -9 "$pid" 2>/dev/null ;; esac
    done <"$scratch/pids"
    : >"$scratch/pids"
}
cleanup() {
    [ -n "$upid" ] && kill -- "-$upid" 2>/dev/null
    stop_started
    wait 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The suite's copy: builddir is $scratch (the suite takes cwd as builddir).
cp -a "$MEMCACHED_SRC/t" "$scratch/"
ln -s "$memcached_bin" "$scratch/memcached-debug"
printf '#!/bin/sh\n# stand-in for memcached'"'"'s timedrun: run the command\nshift\nexec "$@"\n' >"$scratch/timedrun"
chmod +x "$scratch/timedrun"
: >"$scratch/pids"
no_relaxed=""
"$memcached_bin" -o relaxed_privileges -V >/dev/null 2>&1 || no_relaxed=1
NO_RELAXED_PRIVILEGES="$no_relaxed" perl - "$scratch/t/lib/MemcachedTest.pm" <<'EOF' || exit 2
my $path = shift;
open(my $in, '<', $path) or die "$path: $!";
local $/;
my $text = <$in>;
close $in;
$text =~ s/^sub new_memcached \{/sub new_memcached_direct {/m
    or die "$path: no sub new_memcached: the suite differs";
# A memcached built without privilege dropping (Debian's) refuses the
# suboption the suite adds for a build with it.
if ($ENV{NO_RELAXED_PRIVILEGES}) {
    $text =~ s/^    \$args \.= " -o relaxed_privileges";\n//m
        or die "$path: no relaxed_privileges line: the suite differs";
}
my $front = <<'PERL';
# Patched by walnut's bench/memcached_suite.sh: the memcached the test asks
# for on a TCP port, and with WALNUT_BIN set walnut in front of it.
sub new_memcached {
    my ($args, $passed_port) = @_;
    $args = "" unless defined $args;
    $args .= " -l 127.0.0.1" unless $args =~ /-l (\S+)/ || $args =~ /-s (\S+)/;
    my $backend = new_memcached_direct($args, $passed_port);
    my $pids = "$builddir/pids";
    my $p;
    open($p, '>>', $pids) and print $p "$backend->{pid}\n";
    my $bin = $ENV{WALNUT_BIN};
    return $backend unless $bin;
    my $port = free_port();
    my $sport = free_port();
    my $conf = "$builddir/walnut.$port.yml";
    open(my $fh, '>', $conf) or croak("$conf: $!");
    print $fh "suite:\n  listen: 127.0.0.1:$port\n  timeout: 4000\n  allow_flush: true\n"
        . "  servers:\n   - 127.0.0.1:$backend->{port}:1\n";
    close $fh;
    my $log = ($ENV{WALNUT_LOG} || "$builddir/walnut.log");
    my $pid = fork();
    unless ($pid) {
        exec $bin, '-c', $conf, '-s', $sport, '--admin', 'off', '--workers', '1', '-o', $log;
        exit 1;
    }
    print $p "$pid\n" if $p;
    close $p if $p;
    for (1..100) {
        my $conn = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port");
        if ($conn) {
            return Memcached::Handle->new(pid => $pid, backend => $backend, conn => $conn,
                                          host => '127.0.0.1', port => $port,
                                          udpport => $backend->{udpport});
        }
        croak("walnut exited") unless is_running($pid);
        select undef, undef, undef, 0.1;
    }
    croak("walnut did not start on 127.0.0.1:$port");
}

PERL
$text =~ s/^END \{/${front}END {/m or die "$path: no END block: the suite differs";
open(my $out, '>', $path) or die "$path: $!";
print $out $text;
EOF

declare -A results
cols=()

run_files() { # $1: label, $2: walnut binary or ""
    local label="$1" bin="$2" file log rc ok notok planned flags start
    cols+=("$label")
    for file in "${files[@]}"; do
        log="$LOG_DIR/$label-$file.tap"
        start=$SECONDS
        (cd "$scratch" && WALNUT_BIN="$bin" WALNUT_LOG="$LOG_DIR/walnut-$label-$file.log" \
            exec timeout -k 5 "$FILE_TIMEOUT" perl "t/$file.t" </dev/null >"$log" 2>&1) &
        upid=$!
        wait "$upid"
        rc=$?
        upid=""
        stop_started
        ok=$(grep -acE '^ok [0-9]+' "$log")
        notok=$(grep -acE '^not ok [0-9]+' "$log")
        planned=$(grep -aoE '^1\.\.[0-9]+' "$log" | head -1 | cut -c4-)
        flags=""
        [ "$rc" = 124 ] || [ "$rc" = 137 ] && flags+=" timeout"
        # Tests planned but never reached: the file died or was cut short.
        if [ -n "$planned" ] && [ $((ok + notok)) -lt "$planned" ]; then
            flags+=" stopped-at-$((ok + notok))/$planned"
        fi
        results["$label|$file"]="$ok $notok$flags"
        printf '%-10s %-20s ok=%-6s not-ok=%-4s %4ss%s\n' "$label" "$file" "$ok" "$notok" "$((SECONDS - start))" "$flags" >&2
    done
}

run_files direct ""
[ -n "$WALNUT_BEFORE" ] && run_files "$BEFORE_LABEL" "$WALNUT_BEFORE"
run_files "$AFTER_LABEL" "$WALNUT_AFTER"

skipped=()
for t in "$MEMCACHED_SRC"/t/*.t; do
    name="$(basename "$t" .t)"
    [[ " $(echo $RUN) " == *" $name "* ]] || skipped+=("$name")
done

notes=""
[ -f "$OUT" ] && notes="$(sed -n '/^## Notes/,$p' "$OUT")"
{
    echo "# memcached's t/ suite through walnut"
    echo
    echo "Generated by \`bench/memcached_suite.sh\` on $(date -u +%Y-%m-%d): the t/ tests of"
    echo "$("$memcached_bin" -V) (the memcached on PATH; the suite of the same tag), one"
    echo "file at a time, file timeout ${FILE_TIMEOUT} s. *direct*: the memcached the test"
    echo "starts, over TCP. walnut columns: the same memcached with walnut in front"
    echo "(one-server memcache pool, one worker); every connection of the test goes"
    echo "through walnut. Each cell is \`ok\` / \`not ok\` TAP lines; *died at N/M*:"
    echo "the file stopped after N of its M planned tests, *T*: cut by the timeout."
    echo
    printf '| t/ file |'; for c in "${cols[@]}"; do printf ' %s |' "$c"; done; echo
    printf '|---|'; for c in "${cols[@]}"; do printf -- '---|'; done; echo
    declare -A tot_ok tot_bad
    for file in "${files[@]}"; do
        printf '| %s |' "$file"
        for c in "${cols[@]}"; do
            read -r ok notok flags <<<"${results[$c|$file]}"
            tot_ok[$c]=$(( ${tot_ok[$c]:-0} + ok )); tot_bad[$c]=$(( ${tot_bad[$c]:-0} + notok ))
            cell="$ok / $notok"
            [[ "$flags" =~ stopped-at-([0-9]+/[0-9]+) ]] && cell+=" died at ${BASH_REMATCH[1]}"
            [[ "$flags" == *timeout* ]] && cell+=" T"
            printf ' %s |' "$cell"
        done
        echo
    done
    printf '| **total** |'; for c in "${cols[@]}"; do printf ' **%s / %s** |' "${tot_ok[$c]}" "${tot_bad[$c]}"; done; echo
    echo
    echo "Not run (server internals no proxy passes through, or no server at all; see"
    echo "the script's header): ${skipped[*]}."
    if [ -n "$notes" ]; then echo; echo "$notes"; fi
} >"$OUT"
echo "wrote $OUT; logs in $LOG_DIR" >&2
