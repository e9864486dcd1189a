"""What walnut does with a dead backend (walnut only): reconnect backoff,
`eject_mode: fail_fast` versus `rehash`, and `server_health_check` before an
ejected server is taken back."""

from __future__ import annotations

import hashlib
import time
import uuid

import pytest

from procs import RawConn, memcache_pool, redis_pool, wait_until
from test_limits import resp, server_stat, start_walnut


def holder(backends, key: str) -> list[int]:
    """Indexes of the live memcached backends that hold ``key``."""
    found = []
    for i, b in enumerate(backends):
        if b.alive():
            with RawConn(b.port) as c:
                if c.request(f"get {key}\r\n".encode(), b"END\r\n").startswith(b"VALUE"):
                    found.append(i)
    return found


def keys_owned_by(proxy, backends, idx: int, n: int) -> list[str]:
    """``n`` keys the proxy places on ``backends[idx]`` (written through it)."""
    keys: list[str] = []
    with RawConn(proxy.port()) as c:
        for _ in range(50 * n):
            k = f"ej:{uuid.uuid4().hex[:12]}"
            assert c.request(f"set {k} 0 0 6\r\nbefore\r\n".encode()) == b"STORED\r\n"
            if holder(backends, k) == [idx]:
                keys.append(k)
                if len(keys) == n:
                    return keys
    raise AssertionError(f"found only {len(keys)} keys on backend {idx}")


def settled_stat(proxy, pool: str, field: str, port: int) -> int:
    """A server counter once two stats reads in a row agree."""
    last = -1
    for _ in range(50):
        v = server_stat(proxy, pool, field, port)
        if v == last:
            return v
        last = v
        time.sleep(0.15)
    return last


# ----------------------------------------------------- reconnect backoff ---


def test_reconnect_backoff_bounds_connects_and_recovers_quickly(procs):
    backends = procs.memcacheds(3)
    proxy = start_walnut(procs, {"mc": memcache_pool(backends)}, extra_args=["--workers", "1"])
    dead = backends[1]
    keys = keys_owned_by(proxy, backends, 1, 10)
    before = settled_stat(proxy, "mc", "server_err", dead.port)
    dead.kill()

    requests = errors = 0
    other: list[bytes] = []
    with RawConn(proxy.port()) as c:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:
            k = keys[requests % len(keys)]
            r = c.request(f"get {k}\r\n".encode())
            requests += 1
            if r == b"SERVER_ERROR Connection refused\r\n":
                errors += 1
            else:
                other.append(r)
            time.sleep(0.002)
    attempts = settled_stat(proxy, "mc", "server_err", dead.port) - before
    print(f"backoff: {requests} requests to a dead server in 2.5 s, {attempts} connect attempts")
    assert not other, other[:3]
    assert errors == requests
    assert requests >= 200, requests
    # 10 ms doubling to 1 s: ~9 tries in 2.5 s (jitter ±25%).
    assert 3 <= attempts <= 15, attempts

    # Restarted on the same port: served again within the 1 s backoff cap.
    restarted = procs.memcached(port=dead.port)
    t_up = time.monotonic()
    with RawConn(proxy.port()) as c:
        def served() -> bool:
            return c.request(f"set {keys[0]} 0 0 5\r\nafter\r\n".encode()) == b"STORED\r\n"

        wait_until(served, 5, interval=0.01, what="the restarted server served")
    back = time.monotonic() - t_up
    print(f"backoff: restarted server served again after {back:.2f} s")
    assert back <= 1.5, back
    assert holder([restarted], keys[0]) == [0]


# ------------------------------------------------ fail_fast versus rehash ---


@pytest.mark.parametrize("mode", ["fail_fast", "rehash"])
def test_eject_mode(procs, mode):
    backends = procs.memcacheds(3)
    pool = memcache_pool(
        backends,
        auto_eject_hosts=True,
        server_failure_limit=1,
        server_retry_timeout=30000,
        eject_mode=mode,
    )
    proxy = start_walnut(procs, {"mc": pool}, extra_args=["--workers", "1"])
    dead = backends[1]
    keys = keys_owned_by(proxy, backends, 1, 20)
    dead.kill()

    replies = []
    with RawConn(proxy.port()) as c:
        t0 = time.monotonic()
        for k in keys:
            replies.append(c.request(f"set {k} 0 0 5\r\nafter\r\n".encode()))
        elapsed = time.monotonic() - t0
    wait_until(lambda: proxy.stats()["mc"]["server_ejects"] >= 1, 5, what="the ejection counted")
    moved = [k for k in keys if holder(backends, k)]
    stored = replies.count(b"STORED\r\n")
    print(f"{mode}: {stored}/{len(keys)} sets stored, {len(moved)} keys found on other servers, "
          f"{elapsed * 1000:.0f} ms for {len(keys)} requests")
    if mode == "fail_fast":
        assert all(r.startswith(b"SERVER_ERROR") for r in replies), replies
        assert not moved, moved
        assert elapsed < 1.0, elapsed
    else:
        # The failure that ejected the server is the only error.
        assert replies[0].startswith(b"SERVER_ERROR"), replies[0]
        assert stored == len(keys) - 1, replies
        assert sorted(moved) == sorted(keys[1:])


# --------------------------------------------------------- health check ---


@pytest.mark.parametrize("check", [True, False])
def test_health_check_keeps_dead_server_out(procs, check):
    backends = procs.memcacheds(3)
    retry_ms = 1000
    pool = memcache_pool(
        backends,
        auto_eject_hosts=True,
        server_failure_limit=1,
        server_retry_timeout=retry_ms,
        server_health_check=check,
    )
    proxy = start_walnut(procs, {"mc": pool}, extra_args=["--workers", "1"])
    dead = backends[1]
    keys = keys_owned_by(proxy, backends, 1, 10)
    dead.kill()

    failed = 0
    requests = 0
    with RawConn(proxy.port()) as c:
        # The first request fails and ejects the server.
        assert c.request(f"set {keys[0]} 0 0 1\r\nx\r\n".encode()).startswith(b"SERVER_ERROR")
        t0 = time.monotonic()
        # Probes go out on the worker's once-a-second sweep: one retry
        # period plus up to a second apart, whatever the sweep's phase
        # against the ejection. 4.5 periods hold at least two and at most
        # four of them (3.5 held only one when the ejection came just
        # after a sweep).
        while time.monotonic() - t0 < 4.5 * retry_ms / 1000:
            k = keys[requests % len(keys)]
            r = c.request(f"set {k} 0 0 1\r\nx\r\n".encode())
            requests += 1
            if r != b"STORED\r\n":
                failed += 1
            time.sleep(0.005)
    print(f"health_check={check}: {failed} of {requests} requests failed while the server "
          f"stayed dead for 4.5 retry periods")
    log = proxy.log_path.read_text()
    name = f"127.0.0.1:{dead.port}"
    ejected = f"pool 'mc': server '{name}' ejected for {retry_ms} ms after 1 failures in a row ("
    # Each ejection says why, in words: the server was killed, so the
    # connection closed or was reset, and reconnecting is refused.
    whys = [line.split(ejected, 1)[1] for line in log.splitlines() if ejected in line]
    assert whys and all(any(w in why.lower() for w in ("refused", "reset", "closed", "eof"))
                        for why in whys), whys
    assert any("refused" in why.lower() for why in whys) or len(whys) == 1, whys
    if not check:
        # twemproxy's behaviour: each retry puts the dead server back and
        # a request fails before it is ejected again.
        assert failed >= 2, failed
        # Each change logged once, with why and for how long (the first
        # request, which ejected it, is not counted in `failed`).
        assert log.count(ejected) == failed + 1, log
        assert log.count(f"pool 'mc': server '{name}' ejection over: back in the ring") >= failed, log
        return
    assert failed == 0, failed
    # One ejection, then one line per failed probe (not per request).
    assert log.count(ejected) == 1, log
    probes = log.count(f"pool 'mc': server '{name}' failed its health check (")
    assert 2 <= probes <= 4, log
    # Each ejection's end is followed by its probe, but the last one's may
    # fall after the window (the probe waits for the next sweep).
    overs = log.count(f"server '{name}' ejection over: probing it")
    assert probes <= overs <= probes + 1, log

    restarted = procs.memcached(port=dead.port)
    t_up = time.monotonic()

    def on_restarted() -> bool:
        with RawConn(proxy.port()) as c:
            assert c.request(f"set {keys[1]} 0 0 4\r\nback\r\n".encode()) == b"STORED\r\n"
        return holder([restarted], keys[1]) == [0]

    wait_until(on_restarted, 10, interval=0.02, what="keys routed to the restarted server")
    back = time.monotonic() - t_up
    print(f"health_check: restarted server back on the ring after {back:.2f} s "
          f"(server_retry_timeout {retry_ms} ms)")
    assert back <= retry_ms / 1000 + 1.5, back
    wait_until(lambda: f"server '{name}' answered its health check: back in the ring" in proxy.log_path.read_text(),
               5, what="the return logged")


def test_health_check_redis(procs):
    backends = [procs.redis() for _ in range(2)]
    pool = redis_pool(
        backends,
        auto_eject_hosts=True,
        server_failure_limit=1,
        server_retry_timeout=500,
        server_health_check=True,
    )
    proxy = start_walnut(procs, {"rd": pool}, extra_args=["--workers", "1"])
    dead = backends[1]
    key = None
    with RawConn(proxy.port()) as c:
        for i in range(200):
            # Hashed names: short keys that differ in their last character
            # cluster on one server with fnv1a (twemproxy's placement).
            k = "hc:" + hashlib.sha1(str(i).encode()).hexdigest()[:12]
            assert c.request(resp("SET", k, "v")) == b"+OK\r\n"
            with RawConn(dead.port) as d:
                if d.request(resp("EXISTS", k)) == b":1\r\n":
                    key = k
                    break
    assert key is not None
    dead.kill()
    failed = 0
    with RawConn(proxy.port()) as c:
        c.request(resp("SET", key, "x"))  # ejects it
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.0:
            if c.request(resp("SET", key, "x")) != b"+OK\r\n":
                failed += 1
            time.sleep(0.005)
    assert failed == 0, failed
    restarted = procs.redis(port=dead.port)

    def on_restarted() -> bool:
        with RawConn(proxy.port()) as c:
            assert c.request(resp("SET", key, "back")) == b"+OK\r\n"
        with RawConn(restarted.port) as d:
            return d.request(resp("EXISTS", key)) == b":1\r\n"

    t_up = time.monotonic()
    wait_until(on_restarted, 10, interval=0.02, what="PING probe took the server back")
    assert time.monotonic() - t_up <= 2.5
