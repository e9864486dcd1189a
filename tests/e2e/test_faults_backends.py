"""Backends misbehaving under load: killed, frozen, restarted.

Each test runs real memcached / redis-server backends on 127.0.0.1, keeps
clients busy, injects one fault and checks that only the keys of the
faulty backend fail, that the failure is reported within bounded time, that
the proxy recovers when the backend does, and that its workers' memory
(VmRSS) comes back near where it started.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import Counter

import pytest

from faultkit import Resp, RespError, mc_get, mc_holder, redis_holder, report, workers_rss_kb
from procmodel import state_of
from procs import RawConn, memcache_pool, redis_pool, wait_until

RSS_SLACK_KB = 16 * 1024
NKEYS = 90


class Cluster:
    """Three backends of one protocol behind one proxy, with helpers that
    speak that protocol."""

    def __init__(self, procs, proxy_kind, redis: bool, **pool):
        self.redis = redis
        self.backends = [procs.redis() if redis else procs.memcached() for _ in range(3)]
        make = redis_pool if redis else memcache_pool
        self.proxy = procs.proxy(proxy_kind, {"p": make(self.backends, **pool)})
        self.procs = procs

    def port(self) -> int:
        return self.proxy.port()

    def connect(self, timeout: float = 5.0):
        return Resp(self.port(), timeout) if self.redis else RawConn(self.port(), timeout=timeout)

    def set(self, conn, key: str, value: str) -> bool:
        if self.redis:
            return conn.call("SET", key, value) == "OK"
        return conn.request(f"set {key} 0 0 {len(value)}\r\n{value}\r\n".encode()) == b"STORED\r\n"

    def get(self, conn, key: str):
        """The value (str), None for a miss, or the error text."""
        if self.redis:
            r = conn.call("GET", key)
            if isinstance(r, RespError):
                return f"error: {r}"
            return None if r is None else r.decode()
        r = mc_get(conn, key)
        if r.startswith(b"VALUE"):
            return r.split(b"\r\n")[1].decode()
        if r == b"END\r\n":
            return None
        return "error: " + r.decode().strip()

    def pipeline_get(self, conn, keys: list[str]) -> list:
        """Send all gets at once, then read every reply."""
        if self.redis:
            conn.sock.sendall(b"".join(Resp.encode("GET", k) for k in keys))
            out = []
            for _ in keys:
                r = conn.read()
                out.append(f"error: {r}" if isinstance(r, RespError) else (None if r is None else r.decode()))
            return out
        conn.send(b"".join(f"get {k}\r\n".encode() for k in keys))
        out = []
        for _ in keys:
            first = conn.read_line()
            if first.startswith(b"VALUE"):
                out.append(conn.read_line().decode().strip())
                assert conn.read_line() == b"END\r\n"
            elif first == b"END\r\n":
                out.append(None)
            else:
                out.append("error: " + first.decode().strip())
        return out

    def holder(self, key: str) -> int | None:
        return redis_holder(self.backends, key) if self.redis else mc_holder(self.backends, key)

    def seed(self) -> dict[int, list[str]]:
        """Store NKEYS keys (value = key) and group them by backend."""
        keys = [f"f:{uuid.uuid4().hex[:12]}" for _ in range(NKEYS)]
        with self.connect() as c:
            for k in keys:
                assert self.set(c, k, k)
        placed: dict[int, list[str]] = {0: [], 1: [], 2: []}
        for k in keys:
            h = self.holder(k)
            assert h is not None, k
            placed[h].append(k)
        assert all(placed.values()), {i: len(v) for i, v in placed.items()}
        return placed


class Load:
    """Client threads pipelining gets of the healthy keys, counting results."""

    def __init__(self, cluster: Cluster, keys: list[str], threads: int = 3):
        self.cluster = cluster
        self.keys = keys
        self.stop = threading.Event()
        self.results: Counter = Counter()
        self.bad: list = []
        self.worst = 0.0
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        try:
            with self.cluster.connect() as c:
                while not self.stop.is_set():
                    t0 = time.monotonic()
                    got = self.cluster.pipeline_get(c, self.keys)
                    self.worst = max(self.worst, time.monotonic() - t0)
                    for k, v in zip(self.keys, got):
                        if v == k:
                            self.results["ok"] += 1
                        else:
                            self.results["bad"] += 1
                            self.bad.append((k, v))
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.bad.append(("exception", repr(e)))

    def __enter__(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)


def healthy_keys(placed, down: int) -> list[str]:
    return [k for i, ks in placed.items() if i != down for k in ks]


def wait_serving(cluster: Cluster, key: str, timeout: float) -> float:
    """Seconds until ``key`` reads back through the proxy."""
    t0 = time.monotonic()

    def ok():
        with cluster.connect(timeout=1) as c:
            return cluster.get(c, key) == key or (cluster.set(c, key, key) and False)

    wait_until(ok, timeout=timeout, interval=0.1, what=f"{key} served again")
    return round(time.monotonic() - t0, 2)


@pytest.mark.parametrize("redis", [False, True], ids=["memcache", "redis"])
@pytest.mark.timeout(90)
def test_kill_backend_mid_pipeline(procs, proxy_kind, redis):
    cl = Cluster(procs, proxy_kind, redis)
    placed = cl.seed()
    down = 1
    rss0 = workers_rss_kb(cl.proxy)
    with Load(cl, healthy_keys(placed, down)) as load:
        # Keep the victim's keys in flight in pipelines when it dies.
        victim_errors: Counter = Counter()
        with cl.connect() as vc:
            time.sleep(0.5)
            killer = threading.Timer(0.05, cl.backends[down].kill)
            killer.start()
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                for k, v in zip(placed[down], cl.pipeline_get(vc, placed[down])):
                    victim_errors["ok" if v == k else (v or "miss")] += 1
            killer.join()
        time.sleep(1.0)
    report(
        f"kill9[{'redis' if redis else 'memcache'}]",
        healthy_ok=load.results["ok"],
        healthy_bad=load.results["bad"],
        victim=dict(victim_errors),
        worst_healthy_pipeline_ms=round(load.worst * 1000, 1),
    )
    assert not load.bad, load.bad[:5]
    assert load.results["ok"] > 0
    assert any(str(v).startswith("error") for v in victim_errors), victim_errors
    # Restarted on the same port, the backend serves again (as an empty cache).
    cl.procs.redis(port=cl.backends[down].port) if redis else cl.procs.memcached(port=cl.backends[down].port)
    secs = wait_serving(cl, placed[down][0], timeout=10)
    report(f"kill9_recover[{'redis' if redis else 'memcache'}]", seconds=secs)
    after = workers_rss_kb(cl.proxy)
    report(f"kill9_rss[{'redis' if redis else 'memcache'}]", before_kb=rss0, after_kb=after)
    assert after < rss0 + RSS_SLACK_KB


@pytest.mark.parametrize("redis", [False, True], ids=["memcache", "redis"])
@pytest.mark.timeout(90)
def test_sigstop_backend_times_out(procs, proxy_kind, redis):
    cl = Cluster(procs, proxy_kind, redis, timeout=200)
    placed = cl.seed()
    down = 2
    victim = cl.backends[down]
    rss0 = workers_rss_kb(cl.proxy)
    want = "error: ERR Connection timed out" if redis else "error: SERVER_ERROR Connection timed out"
    with Load(cl, healthy_keys(placed, down)) as load:
        victim.signal(signal.SIGSTOP)
        # SIGSTOP lands asynchronously: a request sent before the process
        # is really stopped may still be answered.
        wait_until(lambda: state_of(victim.pid) in ("T", "t"), 5, what="backend stopped")
        try:
            times = []
            replies = Counter()
            for k in placed[down][:5]:
                with cl.connect(timeout=5) as c:
                    t0 = time.monotonic()
                    replies[cl.get(c, k)] += 1
                    times.append(time.monotonic() - t0)
        finally:
            victim.signal(signal.SIGCONT)
        secs = wait_serving(cl, placed[down][0], timeout=10)
    report(
        f"sigstop[{'redis' if redis else 'memcache'}]",
        replies=dict(replies),
        max_fail_ms=round(max(times) * 1000),
        serve_after_cont_s=secs,
        healthy_ok=load.results["ok"],
        healthy_bad=load.results["bad"],
        worst_healthy_pipeline_ms=round(load.worst * 1000, 1),
    )
    assert set(replies) == {want}, replies
    assert max(times) < 1.5, times
    assert not load.bad, load.bad[:5]
    assert load.results["ok"] > 0
    after = workers_rss_kb(cl.proxy)
    assert after < rss0 + RSS_SLACK_KB, (rss0, after)


@pytest.mark.parametrize("redis", [False, True], ids=["memcache", "redis"])
@pytest.mark.timeout(90)
def test_backend_restart_same_port(procs, proxy_kind, redis):
    cl = Cluster(procs, proxy_kind, redis)
    placed = cl.seed()
    down = 0
    rss0 = workers_rss_kb(cl.proxy)
    key = placed[down][0]
    with Load(cl, healthy_keys(placed, down)) as load:
        cl.backends[down].stop()
        with cl.connect() as c:
            failed = cl.get(c, key)
        assert str(failed).startswith("error"), failed
        time.sleep(0.3)
        cl.procs.redis(port=cl.backends[down].port) if redis else cl.procs.memcached(port=cl.backends[down].port)
        secs = wait_serving(cl, key, timeout=10)
    report(
        f"restart[{'redis' if redis else 'memcache'}]",
        while_down=failed,
        serve_after_restart_s=secs,
        healthy_ok=load.results["ok"],
        healthy_bad=load.results["bad"],
    )
    assert not load.bad, load.bad[:5]
    after = workers_rss_kb(cl.proxy)
    assert after < rss0 + RSS_SLACK_KB, (rss0, after)
