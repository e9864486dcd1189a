#!/usr/bin/env bash
# Fails with a clear message when the Rust on PATH is older than walnut's
# rust-version (Cargo.toml), instead of letting cargo fail on the lock file or
# a dependency with a compiler error. Used by .ci/run; run it by hand too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need="$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n1)"
if [ -z "$need" ]; then
    echo "check-rust: no rust-version in Cargo.toml" >&2
    exit 1
fi

how_to_install() {
    cat >&2 <<TXT
walnut needs Rust $need or newer (Cargo.toml rust-version: the locked
dependencies need it). Debian 12's own rustc (1.63) and rustc-web are too old.
Install a current toolchain with rustup, as the user that builds:
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y
    . "\$HOME/.cargo/env"
or, when rustup is already installed: rustup toolchain install stable && rustup default stable
then run this again.
TXT
}

# rustup installs into ~/.cargo/bin, which a fresh shell may not have on
# PATH yet (rustup's env file is read at login): look there too.
if [ -x "$HOME/.cargo/bin/rustc" ] && ! command -v rustc >/dev/null 2>&1; then
    PATH="$HOME/.cargo/bin:$PATH"
    echo "note: using $HOME/.cargo/bin (not on PATH: run . \"\$HOME/.cargo/env\")" >&2
fi
if ! command -v rustc >/dev/null 2>&1 || ! command -v cargo >/dev/null 2>&1; then
    echo "error: no rustc/cargo on PATH (looked in ~/.cargo/bin too)." >&2
    how_to_install
    exit 1
fi
have="$(rustc --version | awk '{print $2}')"
have="${have%%-*}"   # 1.90.0-nightly -> 1.90.0
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" != "$need" ]; then
    echo "error: rustc $have at $(command -v rustc) is too old for walnut." >&2
    how_to_install
    exit 1
fi
echo "rustc $have >= $need (Cargo.toml rust-version): ok"
