"""Memory limits changed at run time with `config set` on the admin port
take effect in every worker, without a restart."""

from __future__ import annotations

import socket
import time

from faultkit import children, rss_kb
from procs import HOST, RawConn, free_port, memcache_pool
from test_admin_port import admin

VALUE = b"v" * 10_000
GETS = 2_000  # 20 MB of replies owed per client


def flood_without_reading(port: int, key: str) -> socket.socket:
    s = socket.create_connection((HOST, port))
    s.sendall(f"get {key}\r\n".encode() * GETS)
    return s


def drain(s: socket.socket, timeout: float) -> tuple[int, bool]:
    """Read everything; (bytes received, closed by the proxy)."""
    s.settimeout(timeout)
    total = 0
    try:
        while True:
            d = s.recv(1 << 20)
            if not d:
                return total, True
            total += len(d)
    except socket.timeout:
        return total, False
    except ConnectionResetError:
        return total, True


def test_output_limit_set_at_run_time_cuts_clients_on_every_worker(procs):
    backend = procs.memcached()
    aport = free_port()
    proxy = procs.proxy(
        "walnut",
        {"mc": memcache_pool([backend])},
        extra_args=["--workers", "2", "--admin", f"{HOST}:{aport}"],
    )
    with RawConn(proxy.port()) as c:
        assert c.request(b"set big 0 0 %d\r\n" % len(VALUE) + VALUE + b"\r\n") == b"STORED\r\n"

    # Default limit (256m): a client that reads late still gets everything.
    s = flood_without_reading(proxy.port(), "big")
    time.sleep(0.5)
    got, closed = drain(s, 3.0)
    s.close()
    assert not closed and got >= GETS * len(VALUE), (got, closed)

    reply = admin(aport, "config set client_output_limit 1m")
    assert reply.startswith("OK"), reply

    # Several connections, so both workers (reuseport) get some.
    socks = [flood_without_reading(proxy.port(), "big") for _ in range(10)]
    time.sleep(1.0)
    results = [drain(s, 5.0) for s in socks]
    for s in socks:
        s.close()
    assert all(closed for _, closed in results), results
    assert all(got < GETS * len(VALUE) for got, _ in results), results
    log = proxy.log_path.read_text()
    assert "not reading its replies" in log
    pids = {line.split()[2] for line in log.splitlines() if "not reading its replies" in line}
    assert len(pids) == 2, f"both workers must apply the new limit: {pids}"

    # walnut still serves.
    with RawConn(proxy.port()) as c:
        assert c.request(b"get big\r\n", b"END\r\n").startswith(b"VALUE big")




def test_buffer_budget_closes_the_biggest_hogs_and_others_keep_working(procs):
    from test_limits import start_walnut

    backend = procs.memcached()
    proxy = start_walnut(procs, {"mc": memcache_pool([backend])}, {"buffer_budget": "4m"})
    with RawConn(proxy.port()) as c:
        assert c.request(b"set big 0 0 %d\r\n" % len(VALUE) + VALUE + b"\r\n") == b"STORED\r\n"
    worker = children(proxy.pid)[0]
    before = rss_kb(worker)

    hogs = [flood_without_reading(proxy.port(), "big") for _ in range(3)]  # 20 MB owed each
    ok = 0
    with RawConn(proxy.port(), timeout=10) as c:
        deadline = time.time() + 3
        while time.time() < deadline:
            assert c.request(b"set k 0 0 1\r\nx\r\n") == b"STORED\r\n"
            assert c.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nx\r\nEND\r\n"
            ok += 1
    results = [drain(s, 5.0) for s in hogs]
    for s in hogs:
        s.close()
    assert ok > 50, ok
    assert sum(closed for _, closed in results) >= 2, results
    log = proxy.log_path.read_text()
    assert "over buffer_budget" in log
    peak_growth = rss_kb(worker) - before
    assert peak_growth < 40_000, f"worker RSS grew by {peak_growth} kB"
