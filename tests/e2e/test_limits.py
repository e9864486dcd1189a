"""Per-client limits on walnut's data path (walnut only): `max_keys`,
`client_output_limit`, `client_max_inflight`, `client_idle_timeout` (also
set at run time on the admin port) and the `_walnut` `max_connections`."""

from __future__ import annotations

import signal
import socket
import time
import uuid

import pytest

from faultkit import children, rss_kb
from procs import (
    HOST,
    Proxy,
    RawConn,
    free_port,
    log_tail,
    memcache_pool,
    redis_pool,
    to_yaml,
    wait_until,
)


def start_walnut(procs, pools: dict, process: dict | None = None, extra_args=()) -> Proxy:
    """Start walnut on ``pools`` plus an optional ``_walnut`` section.

    Proxy treats every top-level key as a pool, so the process section is
    appended to the written file before the start.
    """
    args = ["--admin", "off", *extra_args] if "--admin" not in extra_args else list(extra_args)
    proxy = Proxy("walnut", procs.workdir, pools, extra_args=args)
    if process:
        proxy.conf_path.write_text(to_yaml(proxy.pools) + to_yaml({"_walnut": process}))
    procs.started.append(proxy)
    return proxy.start()




def stop_process(proc) -> None:
    """SIGSTOP ``proc`` and wait until the kernel reports it stopped."""
    proc.signal(signal.SIGSTOP)

    def stopped() -> bool:
        with open(f"/proc/{proc.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"

    wait_until(stopped, 5, interval=0.01, what=f"{proc.name} stopped")




def server_stat(proxy: Proxy, pool: str, field: str, port: int) -> int:
    """A counter of the server on ``port`` in ``pool`` from the stats JSON."""
    doc = proxy.stats()
    for name, value in doc[pool].items():
        if isinstance(value, dict) and f":{port}" in name:
            return int(value[field])
    raise AssertionError(f"no server on port {port} in {doc[pool]!r}")


# ------------------------------------------------------------- max_keys ---


def test_max_keys_memcache(procs):
    backends = procs.memcacheds(2)
    proxy = start_walnut(procs, {"mc": memcache_pool(backends, max_keys=5)})
    with RawConn(proxy.port()) as c:
        assert c.request(b"set mk:1 0 0 1\r\na\r\n") == b"STORED\r\n"
        five = " ".join(f"mk:{i}" for i in range(1, 6))
        r = c.request(f"get {five}\r\n".encode(), b"END\r\n")
        assert r == b"VALUE mk:1 0 1\r\na\r\nEND\r\n"
        six = " ".join(f"mk:{i}" for i in range(1, 7))
        r = c.request(f"get {six}\r\n".encode())
        assert r.startswith(b"CLIENT_ERROR"), r
        # The connection stays usable after the error.
        assert c.request(b"get mk:1\r\n", b"END\r\n") == b"VALUE mk:1 0 1\r\na\r\nEND\r\n"
        # 100 keys: same error, no partial answer.
        many = " ".join(f"mk:{i}" for i in range(100))
        r = c.request(f"get {many}\r\n".encode())
        assert r.startswith(b"CLIENT_ERROR"), r
        assert c.request(b"version\r\n").startswith(b"VERSION")
    # A line longer than max_keys keys of the longest size can be (here
    # 1000 keys) is not buffered: the connection is closed, no partial reply.
    with RawConn(proxy.port()) as c:
        many = " ".join(f"mk:{i}" for i in range(1000))
        c.send(f"get {many}\r\n".encode())
        assert c.is_closed(timeout=3.0)
        assert c.buf == b""


def resp(*args: bytes | str) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def test_max_keys_redis(procs):
    backends = [procs.redis() for _ in range(2)]
    proxy = start_walnut(procs, {"rd": redis_pool(backends, max_keys=4)})
    with RawConn(proxy.port()) as c:
        assert c.request(resp("SET", "rk:0", "v")) == b"+OK\r\n"
        r = c.request(resp("MGET", "rk:0", "rk:1", "rk:2", "rk:3"), b"$-1\r\n$-1\r\n$-1\r\n")
        assert r.startswith(b"*4\r\n$1\r\nv\r\n"), r
        r = c.request(resp("MGET", *[f"rk:{i}" for i in range(5)]))
        assert r.startswith(b"-ERR"), r
        r = c.request(resp("DEL", *[f"rk:{i}" for i in range(5)]))
        assert r.startswith(b"-ERR"), r
        assert c.request(resp("PING")) == b"+PONG\r\n"
        assert c.request(resp("GET", "rk:0"), b"v\r\n") == b"$1\r\nv\r\n"
    with RawConn(proxy.port()) as c:
        r = c.request(resp("MSET", *[x for i in range(5) for x in (f"rk:{i}", "v")]))
        assert r.startswith(b"-ERR"), r


# --------------------------------------------------- client_output_limit ---


def test_client_not_reading_is_closed_at_output_limit(procs):
    backends = procs.memcacheds(1)
    limit = 4 << 20
    proxy = start_walnut(
        procs,
        {"mc": memcache_pool(backends, client_output_limit="4m")},
        extra_args=["--workers", "1", "-v", "5"],
    )
    value = b"x" * (512 * 1024)
    with RawConn(proxy.port()) as c:
        assert c.request(b"set big 0 0 %d\r\n%s\r\n" % (len(value), value)) == b"STORED\r\n"
    (worker,) = children(proxy.pid)
    rss_before = rss_kb(worker)

    # A client with a small receive buffer asks for 64 x 512 KiB (32 MiB)
    # and never reads.
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((HOST, proxy.port()))
    s.sendall(b"get big\r\n" * 64)

    def closed_notice() -> bool:
        return "not reading its replies" in log_tail(proxy.log_path, 20000)

    wait_until(closed_notice, 10, what="the output-limit notice")
    rss_peak = rss_kb(worker)
    # The proxy closed it: reading drains what was in flight, then EOF/reset.
    s.settimeout(5)
    got = 0
    try:
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            got += len(chunk)
    except ConnectionResetError:
        pass
    s.close()
    assert got < 64 * len(value) // 2, got
    line = next(l for l in log_tail(proxy.log_path, 20000).splitlines() if "not reading" in l)
    buffered = int(line.split("not reading its replies: ")[1].split()[0])
    assert limit < buffered <= limit + 2 * len(value) + 65536, line
    # Memory held for the client stayed near the limit, not 32 MiB.
    grown_kb = rss_peak - rss_before
    print(f"output limit: buffered {buffered} B at close, worker RSS {rss_before} -> {rss_peak} kB "
          f"(+{grown_kb} kB), client read {got} B")
    assert grown_kb < 3 * limit // 1024 + 8192, (rss_before, rss_peak)
    # The worker is fine and serves others.
    with RawConn(proxy.port()) as c:
        assert c.request(b"get big\r\n", b"END\r\n", timeout=5).startswith(b"VALUE big 0 524288\r\n")
    assert proxy.stats()["mc"]["client_err"] >= 1


# --------------------------------------------------- client_max_inflight ---


def test_max_inflight_backpressure(procs):
    backends = procs.memcacheds(1)
    proxy = start_walnut(
        procs,
        {"mc": memcache_pool(backends, client_max_inflight=8, timeout=20000)},
        extra_args=["--workers", "1"],
    )
    mc = backends[0]
    with RawConn(proxy.port()) as c:
        assert c.request(b"set bp 0 0 2\r\nok\r\n") == b"STORED\r\n"
    wait_until(lambda: server_stat(proxy, "mc", "requests", mc.port) >= 1, 5, what="stats updated")
    before = server_stat(proxy, "mc", "requests", mc.port)
    stop_process(mc)
    try:
        with RawConn(proxy.port(), timeout=10) as c:
            c.send(b"get bp\r\n" * 100)
            # Exactly max_inflight requests reach the server while it hangs.
            wait_until(lambda: server_stat(proxy, "mc", "requests", mc.port) - before >= 8, 5,
                       what="8 requests forwarded")
            time.sleep(0.5)  # give a would-be overrun the time to show
            forwarded = server_stat(proxy, "mc", "requests", mc.port) - before
            assert forwarded == 8, forwarded
            mc.signal(signal.SIGCONT)
            t0 = time.monotonic()
            reply = b"VALUE bp 0 2\r\nok\r\nEND\r\n"
            for i in range(100):
                assert c.read_until(b"END\r\n") == reply, i
            # Reading resumes as soon as replies drain, batch after batch
            # (not on the loop's once-a-second wake-up).
            drained = time.monotonic() - t0
            print(f"max_inflight 8: {forwarded} forwarded while the server hung; "
                  f"100 replies in {drained * 1000:.0f} ms after it resumed")
            assert drained < 1.0, drained
            assert c.request(b"get bp\r\n", b"END\r\n") == reply
    finally:
        mc.signal(signal.SIGCONT)
    total = server_stat(proxy, "mc", "requests", mc.port) - before
    assert total == 101, total


# --------------------------------------------------- client_idle_timeout ---


def test_idle_client_is_closed_busy_client_is_not(procs):
    backends = procs.memcacheds(1)
    proxy = start_walnut(procs, {"mc": memcache_pool(backends, client_idle_timeout=400)})
    idle = RawConn(proxy.port())
    busy = RawConn(proxy.port())
    t0 = time.monotonic()
    assert idle.request(b"version\r\n").startswith(b"VERSION")
    closed_at = None
    while time.monotonic() - t0 < 3.0:
        assert busy.request(b"version\r\n").startswith(b"VERSION")
        if closed_at is None and idle.is_closed(timeout=0.1):
            closed_at = time.monotonic() - t0
    assert closed_at is not None, "idle client was not closed"
    # 400 ms idle + a once-per-second sweep.
    assert 0.4 <= closed_at <= 1.8, closed_at
    assert busy.request(b"version\r\n").startswith(b"VERSION")
    print(f"idle client closed after {closed_at:.2f}s (client_idle_timeout 400 ms)")
    idle.close()
    busy.close()


def test_idle_timeout_spares_client_with_request_in_flight(procs):
    backends = procs.memcacheds(1)
    proxy = start_walnut(procs, {"mc": memcache_pool(backends, client_idle_timeout=300, timeout=20000)})
    mc = backends[0]
    with RawConn(proxy.port(), timeout=10) as c:
        assert c.request(b"set w 0 0 1\r\n1\r\n") == b"STORED\r\n"
        stop_process(mc)
        try:
            c.send(b"get w\r\n")
            assert not c.is_closed(timeout=2.0)
        finally:
            mc.signal(signal.SIGCONT)
        assert c.read_until(b"END\r\n") == b"VALUE w 0 1\r\n1\r\nEND\r\n"
        assert c.is_closed(timeout=3.0)


def admin(port: int, line: str) -> str:
    with socket.create_connection((HOST, port), timeout=5) as s:
        s.sendall(line.encode() + b"\r\n")
        buf = b""
        while b"\r\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    return buf.decode()


def test_idle_timeout_set_at_run_time(procs):
    backends = procs.memcacheds(1)
    admin_port = free_port()
    proxy = start_walnut(
        procs,
        {"mc": memcache_pool(backends)},
        extra_args=["--admin", f"{HOST}:{admin_port}", "--workers", "2"],
    )
    wait_until(lambda: "PONG" in admin(admin_port, "ping"), 5, what="admin port")
    conns = [RawConn(proxy.port()) for _ in range(4)]
    for c in conns:
        assert c.request(b"version\r\n").startswith(b"VERSION")
    # Off by default: nobody is closed.
    assert not any(c.is_closed(timeout=0.3) for c in conns)
    r = admin(admin_port, "config set client_idle_timeout 300")
    assert r.startswith("OK"), r
    t0 = time.monotonic()
    for c in conns:
        assert c.is_closed(timeout=3.0)
    elapsed = time.monotonic() - t0
    assert elapsed <= 2.5, elapsed
    # New clients are served, and closed in turn once idle.
    with RawConn(proxy.port()) as c:
        assert c.request(b"version\r\n").startswith(b"VERSION")
        assert c.is_closed(timeout=3.0)
    for c in conns:
        c.close()


# ------------------------------------------------------ max_connections ---


def answers(c: RawConn, timeout: float) -> bool:
    try:
        c.send(b"version\r\n")
        return c.read_line(timeout=timeout).startswith(b"VERSION")
    except (TimeoutError, ConnectionError, OSError):
        return False


@pytest.mark.parametrize("listener", ["reuseport", "epoll_exclusive", "accept_mutex"])
def test_max_connections_stops_accepting_and_resumes(procs, listener):
    backends = procs.memcacheds(1)
    proxy = start_walnut(
        procs,
        {"mc": memcache_pool(backends)},
        process={"workers": 1, "listener": listener, "max_connections": 5},
    )
    port = proxy.port()
    # (wait_ready's probe connections are closed; let the count settle)
    wait_until(lambda: proxy.stats()["mc"]["client_connections"] == 0, 5, what="probe connections closed")
    first = [RawConn(port) for _ in range(5)]
    for c in first:
        assert answers(c, 5)
    # Over the cap: the connect succeeds (backlog), nothing is served.
    waiting = [RawConn(port) for _ in range(3)]
    for c in waiting:
        c.send(b"version\r\n")
    for c in waiting:
        with pytest.raises(TimeoutError):
            c.read_line(timeout=0.3)
    assert proxy.stats()["mc"]["client_connections"] == 5
    # One closes: 4 is below 90% of 5, accepting resumes; the backlog is
    # taken up to the cap again.
    first.pop().close()
    wait_until(lambda: any(_has_reply(c) for c in waiting), 5, what="a waiting client served")
    time.sleep(0.3)
    served = [c for c in waiting if _has_reply(c)]
    assert len(served) == 1, len(served)
    assert proxy.stats()["mc"]["client_connections"] == 5
    # Everyone closes: the rest are served.
    for c in first + served:
        c.close()
    for c in waiting:
        if c not in served:
            assert c.read_line(timeout=5).startswith(b"VERSION")
    for c in waiting:
        c.close()


def _ready(c: RawConn) -> bool:
    c.sock.settimeout(0.05)
    try:
        data = c.sock.recv(4096)
    except (socket.timeout, BlockingIOError):
        return False
    c.buf += data
    return bool(data)


def _has_reply(c: RawConn) -> bool:
    _ready(c)
    return c.buf.startswith(b"VERSION")
