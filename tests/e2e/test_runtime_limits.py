"""Memory limits changed at run time with `config set` on the admin port
take effect in every worker, without a restart."""

from __future__ import annotations

import socket
import time

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
