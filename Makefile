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

.PHONY: all build test fmt-check clippy unit fuzz-smoke e2e e2e-listeners demo bench bench-idle profile venv clean-venv

all: build

build:
	$(CARGO) build --release

test: fmt-check clippy unit fuzz-smoke e2e

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
	PROXY=$(PROXY) $(PYTEST) -q tests/e2e --timeout=$(E2E_TIMEOUT) $(E2E_ARGS)

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
