# walnut build and test entry points. `make test` is what CI runs.

SHELL := /bin/bash
CARGO ?= cargo
VENV ?= .venv
PYTHON ?= python3
PYTEST ?= $(VENV)/bin/pytest
# Proxy the end-to-end suite runs against: walnut, nutcracker, or both
# (comma separated). WALNUT_BIN overrides the walnut binary.
PROXY ?= walnut
E2E_TIMEOUT ?= 180
E2E_ARGS ?=
FUZZ_SECONDS ?= 20

# Install layout: `make install PREFIX=/usr DESTDIR=/tmp/root`. walnut is a
# system daemon (man section 8), so the binary goes to sbin as nutcracker's
# does. SYSCONFDIR is built into the binary: plain `walnut` reads
# SYSCONFDIR/walnut/nutcracker.yml when ./conf/nutcracker.yml does not exist.
PREFIX ?= /usr/local
DESTDIR ?=
SBINDIR ?= $(PREFIX)/sbin
MANDIR ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
SYSTEMDDIR ?= /lib/systemd/system
INSTALL ?= install
# Exported only when not the default, so that `make build` and a plain
# `cargo build` make the same binary and do not rebuild each other's.
ifneq ($(SYSCONFDIR),/etc)
export WALNUT_SYSCONFDIR := $(SYSCONFDIR)
endif

.PHONY: all build test quick fmt-check clippy unit fuzz-smoke e2e e2e-listeners demo bench bench-idle profile venv clean-venv \
	man unit-file install uninstall deb

all: build

build:
	$(CARGO) build --release

# The man page, from the same clap definitions as --help (`walnut --man`).
man: build
	mkdir -p target/dist
	target/release/walnut --man > target/dist/walnut.8
	gzip -9nf < target/dist/walnut.8 > target/dist/walnut.8.gz

# The systemd unit with this install's paths.
unit-file:
	mkdir -p target/dist
	sed -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
		dist/walnut.service.in > target/dist/walnut.service

# An existing configuration is never overwritten.
install: build man unit-file
	$(INSTALL) -D -m 0755 target/release/walnut $(DESTDIR)$(SBINDIR)/walnut
	$(INSTALL) -D -m 0644 target/dist/walnut.8 $(DESTDIR)$(MANDIR)/man8/walnut.8
	$(INSTALL) -D -m 0644 target/dist/walnut.service $(DESTDIR)$(SYSTEMDDIR)/walnut.service
	test -e $(DESTDIR)$(SYSCONFDIR)/walnut/nutcracker.yml || \
		$(INSTALL) -D -m 0644 conf/nutcracker.yml $(DESTDIR)$(SYSCONFDIR)/walnut/nutcracker.yml
	test -e $(DESTDIR)$(SYSCONFDIR)/logrotate.d/walnut || \
		$(INSTALL) -D -m 0644 dist/walnut.logrotate $(DESTDIR)$(SYSCONFDIR)/logrotate.d/walnut

uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/walnut $(DESTDIR)$(MANDIR)/man8/walnut.8 \
		$(DESTDIR)$(SYSTEMDDIR)/walnut.service

# Debian package (cargo-deb; metadata in Cargo.toml) in target/debian/.
# Its Maintainer field names whoever builds and ships the package:
# `make deb MAINTAINER="Name <mail>"`, else DEBFULLNAME and DEBEMAIL from the
# environment (as dch reads them), else Cargo.toml's placeholder, an address
# under .invalid, with a warning. Passed to the recipe through the
# environment, so a quote in the name needs no escaping.
MAINTAINER ?= $(if $(and $(DEBFULLNAME),$(DEBEMAIL)),$(DEBFULLNAME) <$(DEBEMAIL)>)
export MAINTAINER
# The binary is stripped there (--strip): the release profile keeps line
# tables for profiling, 23 MB of them, which an installed binary needs not.
deb:
	$(MAKE) --no-print-directory man unit-file PREFIX=/usr SYSCONFDIR=/etc
	@[ -n "$$MAINTAINER" ] || echo 'warning: the package names no maintainer: make deb MAINTAINER="Name <mail>"' >&2
	$(CARGO) deb --no-build --strip $${MAINTAINER:+--maintainer "$$MAINTAINER"}

test: fmt-check clippy unit fuzz-smoke e2e

# The inner loop: debug unit tests, then the end-to-end tests not marked
# slow, two at a time (pytest-xdist). Every test still starts its own
# servers on free ports; `make test` runs everything.
QUICK_JOBS ?= 2
quick: $(PYTEST) build
	@echo "== cargo test (debug)"
	$(CARGO) test
	@echo "== end-to-end tests not marked slow, $(QUICK_JOBS) at a time"
	PROXY=walnut $(PYTEST) -q tests/e2e --timeout=$(E2E_TIMEOUT) -m "not slow" -n $(QUICK_JOBS) $(E2E_ARGS)

fmt-check:
	@echo "== cargo fmt --check"
	$(CARGO) fmt --all -- --check

clippy:
	@echo "== cargo clippy"
	$(CARGO) clippy --all-targets -- -D warnings

unit:
	@echo "== cargo test --release"
	$(CARGO) test --release

fuzz-smoke:
	@echo "== fuzz smoke ($(FUZZ_SECONDS) s per target)"
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz-smoke.sh

$(PYTEST): requirements-test.txt
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-test.txt
	touch $@

venv: $(PYTEST)

e2e: $(PYTEST)
	@echo "== end-to-end tests against PROXY=$(PROXY)"
	@if [[ ",$(PROXY)," == *,walnut,* && -z "$$WALNUT_BIN" ]]; then $(MAKE) --no-print-directory build; fi
	PROXY=$(PROXY) $(PYTEST) -q tests/e2e --timeout=$(E2E_TIMEOUT) --durations=25 $(E2E_ARGS)

# The whole end-to-end suite once per walnut listener mode, two workers each.
e2e-listeners: $(PYTEST)
	@if [[ -z "$$WALNUT_BIN" ]]; then $(MAKE) --no-print-directory build; fi
	set -e; for mode in reuseport epoll_exclusive accept_mutex; do \
		echo "== end-to-end tests: walnut --workers 2 --listener $$mode"; \
		WALNUT_ARGS="--workers 2 --listener $$mode" PROXY=walnut \
			$(PYTEST) -q tests/e2e --timeout=$(E2E_TIMEOUT) $(E2E_ARGS); \
	done

demo:
	scripts/demo.sh

# Benchmark: walnut vs nutcracker vs the bare backend (bench/results/latest.*).
# `make bench BENCH_ARGS=--quick` for the short mode; `make profile` for callgrind.
# `make bench-idle` runs only the idle-connection scenario (up to 100k clients).
BENCH_ARGS ?=
bench:
	bench/run.sh $(BENCH_ARGS)

bench-idle:
	bench/run.sh idle $(BENCH_ARGS)

profile:
	bench/profile.sh $(PROFILE_ARGS)

clean-venv:
	rm -rf $(VENV)
