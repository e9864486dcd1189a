"""Fixtures for walnut's end-to-end tests.

The proxy under test is chosen with the environment variable ``PROXY``:
``walnut`` (default; binary from ``WALNUT_BIN`` or target/release/walnut),
``nutcracker`` (Debian's /usr/sbin/nutcracker, the reference), or a comma
separated list to run every test against each. Tests take the
``proxy_kind`` fixture to learn which one they run against; behaviour that
twemproxy is known to get wrong is marked with :func:`xfail_on`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from procs import Memcached, Proxy, Redis, cluster_node_args, form_cluster, free_cluster_port  # noqa: E402

KNOWN_KINDS = ("walnut", "nutcracker")


def proxy_kinds() -> list[str]:
    """Proxy kinds selected by the PROXY environment variable."""
    raw = os.environ.get("PROXY", "walnut")
    kinds = [k.strip() for k in raw.split(",") if k.strip()]
    for k in kinds:
        if k not in KNOWN_KINDS:
            raise pytest.UsageError(f"PROXY={raw!r}: unknown proxy kind {k!r}, expected {KNOWN_KINDS}")
    return kinds


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "proxy_kind" in metafunc.fixturenames:
        metafunc.parametrize("proxy_kind", proxy_kinds(), scope="module")


def xfail_on(request: pytest.FixtureRequest, kind: str, reason: str, strict: bool = True) -> None:
    """Mark the running test as expected to fail when it runs against ``kind``."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("proxy_kind") == kind:
        request.applymarker(pytest.mark.xfail(reason=f"{kind}: {reason}", strict=strict))


class Processes:
    """Starts servers and proxies for one scope and stops all of them at teardown."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.started: list = []

    def _start(self, make, retry: bool):
        """Start what ``make()`` builds; on a lost port race, retry on new ports."""
        attempts = 3 if retry else 1
        for attempt in range(attempts):
            proc = make()
            self.started.append(proc)
            try:
                return proc.start()
            except RuntimeError:
                exited = not proc.alive()
                proc.stop()
                self.started.remove(proc)
                if not exited or "in use" not in proc.output_tail() or attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    def memcached(self, port: int | None = None, extra=()) -> Memcached:
        """Start a memcached on a free (or the given) port."""
        return self._start(lambda: Memcached(self.workdir, port=port, extra=extra), retry=port is None)

    def memcacheds(self, n: int) -> list[Memcached]:
        """Start ``n`` memcached servers."""
        return [self.memcached() for _ in range(n)]

    def redis(self, port: int | None = None, extra=()) -> Redis:
        """Start a redis-server on a free (or the given) port."""
        return self._start(lambda: Redis(self.workdir, port=port, extra=extra), retry=port is None)

    def sentinel(self, masters) -> "Sentinel":
        """Start a Redis Sentinel monitoring ``masters`` (name -> (port, quorum))."""
        from procs import Sentinel

        return self._start(lambda: Sentinel(self.workdir, masters), retry=True)

    def redis_cluster(self, masters: int = 3, replicas: int = 0, password: str | None = None) -> list[Redis]:
        """Start ``masters * (1 + replicas)`` cluster nodes (with ``password``:
        requirepass and masterauth) and join them into one Redis Cluster (all
        slots served, every replica in sync, every node agreeing)."""
        nodes = []
        for _ in range(masters * (1 + replicas)):
            port = free_cluster_port()
            extra = cluster_node_args(self.workdir, port)
            if password:
                extra += ["--requirepass", password, "--masterauth", password]
            nodes.append(self._start(lambda port=port, extra=extra: Redis(self.workdir, port=port, extra=extra), retry=False))
        form_cluster([n.port for n in nodes], replicas=replicas, password=password)
        return nodes

    def proxy(self, kind: str, pools: dict, extra_args=(), stats_interval_ms: int = 100) -> Proxy:
        """Write a config for ``pools`` and start ``kind`` on it."""
        return self._start(
            lambda: Proxy(kind, self.workdir, pools, extra_args=extra_args, stats_interval_ms=stats_interval_ms),
            retry=True,
        )

    def stop_all(self) -> None:
        """Stop everything started here, proxies first, in reverse order."""
        errors = []
        for p in reversed(self.started):
            try:
                p.stop()
            except Exception as e:  # noqa: BLE001 - keep stopping the rest
                errors.append(f"{p.name}: {e!r}")
        self.started.clear()
        if errors:
            raise RuntimeError("failed to stop: " + "; ".join(errors))


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    """Per-test process manager; everything it started is stopped afterwards."""
    p = Processes(tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


@pytest.fixture(scope="module")
def module_procs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Processes]:
    """Per-module process manager for servers shared by a module's tests."""
    p = Processes(tmp_path_factory.mktemp("mod"))
    try:
        yield p
    finally:
        p.stop_all()


@pytest.fixture
def xfail(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """``xfail("nutcracker", "why")`` marks this test expected-to-fail there."""
    return lambda kind, reason, strict=True: xfail_on(request, kind, reason, strict)
