"""What an operator sees of a dead backend at the default log level: a
rate-limited line naming the server and its address, state `down` in admin
`servers` (and `walnut_server_down_workers` in /metrics) while it refuses
connections, `up` and a line once it answers again (walnut only)."""

from __future__ import annotations

import hashlib
import re
import socket

from procs import HOST, free_port, wait_until
from test_admin_port import admin, http_get


def key(i: int) -> str:
    # Hashes, not k0, k1, ...: short names differing in their last
    # characters cluster on one server under fnv1a_64.
    return hashlib.sha1(b"%d" % i).hexdigest()[:12]


def request(port: int, key: str) -> bytes:
    with socket.create_connection((HOST, port), timeout=5) as c:
        c.sendall(f"*2\r\n$3\r\nGET\r\n${len(key)}\r\n{key}\r\n".encode())
        return c.recv(256)


def states(admin_port: int) -> dict[str, str]:
    out = admin(admin_port, "servers")
    return dict(re.findall(r"server=(\S+) state=(\S+)", out))


def test_dead_backend_logged_and_shown_down(procs):
    live = procs.redis()
    dead_port = free_port()
    p = procs.proxy(
        "walnut",
        {"rp": {"redis": True, "timeout": 1000, "hash": "fnv1a_64",
                "servers": [f"{live.address}:1 live", f"{HOST}:{dead_port}:1 dead"]}},
        extra_args=["--workers", "2"],
    )
    assert states(p.admin_port) == {"live": "up", "dead": "up"}
    errors = 0
    for i in range(300):
        if request(p.port(), key(i)).startswith(b"-ERR"):
            errors += 1
    assert errors > 0, "no key went to the dead server"
    assert states(p.admin_port) == {"live": "up", "dead": "down"}
    head, metrics = http_get(p.admin_port, "/metrics")
    assert re.search(r'walnut_server_down_workers\{pool="rp",server="dead"\} [12]\b', metrics)
    assert re.search(r'walnut_server_down_workers\{pool="rp",server="live"\} 0\b', metrics)
    log = p.log_path.read_text()
    lines = [ln for ln in log.splitlines()
             if f"server 'dead' at {HOST}:{dead_port}: cannot connect: Connection refused" in ln]
    # Logged at the default level (5), once per worker for the run of failures
    # (at most once per 10 s each), not once per failed request.
    assert 1 <= len(lines) <= 2, log[-3000:]
    assert errors > 2 * len(lines)
    # The server comes up on its port: it answers, and is shown and logged up.
    procs.redis(port=dead_port)

    def answered() -> bool:
        return all(not request(p.port(), key(i)).startswith(b"-ERR") for i in range(40))

    wait_until(answered, 10, what="the revived server answering")
    wait_until(lambda: states(p.admin_port) == {"live": "up", "dead": "up"}, 10,
               what="state up again")
    assert f"server 'dead' at {HOST}:{dead_port} answers again" in p.log_path.read_text()
