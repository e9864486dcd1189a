#!/usr/bin/env bash
# Builds nutcracker from twemproxy's master (the release with `reuseport`,
# which Debian's 0.5.0 lacks) into target/twemproxy/nutcracker, where
# tests/e2e/test_cutover.py finds the incumbent it shares a port with.
# Needs git, autoconf, automake, libtool and a C compiler. A source tree
# already at hand: TWEMPROXY_SRC=/path/to/twemproxy scripts/build-twemproxy.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# twemproxy master at the commit that added `reuseport` (60aaf85).
rev="60aaf855ba2e15e20d0efbe440c8ff071b719580"
out="target/twemproxy"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ -n "${TWEMPROXY_SRC:-}" ]; then
    cp -a "$TWEMPROXY_SRC/." "$work/src"
else
    git clone --quiet https://github.com/twitter/twemproxy "$work/src"
    git -C "$work/src" checkout --quiet "$rev"
fi
log="$work/build.log"
if ! (cd "$work/src" && autoreconf -fi && ./configure && make -j"$(nproc)") >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "build-twemproxy: the build failed (needs autoconf, automake, libtool, gcc)" >&2
    exit 1
fi
mkdir -p "$out"
cp "$work/src/src/nutcracker" "$out/nutcracker"
"$out/nutcracker" -V
