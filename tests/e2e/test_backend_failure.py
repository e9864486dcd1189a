"""A memcached backend dies under the proxy: errors, ejection and retry."""

from __future__ import annotations

import time
import uuid

from procs import RawConn, memcache_pool, wait_until

RETRY_MS = 1500


def holders(backends, key: str) -> list[int]:
    """Indexes of the live backends that hold ``key`` (asked directly)."""
    found = []
    for i, b in enumerate(backends):
        if not b.alive():
            continue
        with RawConn(b.port) as c:
            if c.request(f"get {key}\r\n".encode(), b"END\r\n").startswith(b"VALUE"):
                found.append(i)
    return found


def store_keys(port: int, n: int) -> list[str]:
    keys = [f"bf:{uuid.uuid4().hex}" for _ in range(n)]
    with RawConn(port) as c:
        for k in keys:
            assert c.request(f"set {k} 0 0 {len(k)}\r\n{k}\r\n".encode()) == b"STORED\r\n"
    return keys


def keys_by_backend(backends, keys) -> dict[int, list[str]]:
    placed: dict[int, list[str]] = {i: [] for i in range(len(backends))}
    for k in keys:
        where = holders(backends, k)
        assert len(where) == 1, f"{k} held by {where}"
        placed[where[0]].append(k)
    assert all(placed.values()), f"every backend should hold some keys: { {i: len(v) for i, v in placed.items()} }"
    return placed


def get(conn: RawConn, key: str) -> bytes:
    """Send a get and return the whole reply (a value, a miss or an error line)."""
    conn.send(f"get {key}\r\n".encode())
    first = conn.read_line()
    if first.startswith(b"VALUE"):
        return first + conn.read_until(b"END\r\n")
    return first


def test_dead_backend_fails_only_its_keys(procs, proxy_kind):
    backends = procs.memcacheds(3)
    proxy = procs.proxy(proxy_kind, {"alpha": memcache_pool(backends, server_retry_timeout=RETRY_MS)})
    keys = store_keys(proxy.port(), 60)
    placed = keys_by_backend(backends, keys)

    backends[1].kill()

    with RawConn(proxy.port()) as c:
        for k in placed[1]:
            reply = get(c, k)
            assert reply.startswith(b"SERVER_ERROR"), (k, reply)
            reply = c.request(f"set {k} 0 0 1\r\nx\r\n".encode())
            assert reply.startswith(b"SERVER_ERROR"), (k, reply)
        for i in (0, 2):
            for k in placed[i]:
                assert get(c, k) == f"VALUE {k} 0 {len(k)}\r\n{k}\r\nEND\r\n".encode()
                assert c.request(f"set {k} 0 0 2\r\nok\r\n".encode()) == b"STORED\r\n"
    # A fresh connection works too.
    with RawConn(proxy.port()) as c:
        k = placed[0][0]
        assert get(c, k) == f"VALUE {k} 0 2\r\nok\r\nEND\r\n".encode()


def test_dead_backend_is_ejected_then_retried(procs, proxy_kind):
    backends = procs.memcacheds(3)
    pool = memcache_pool(
        backends,
        auto_eject_hosts=True,
        server_failure_limit=1,
        server_retry_timeout=RETRY_MS,
    )
    proxy = procs.proxy(proxy_kind, {"alpha": pool})
    keys = store_keys(proxy.port(), 60)
    placed = keys_by_backend(backends, keys)
    dead = backends[1]
    dead_port = dead.port
    victim = placed[1][0]

    dead.kill()

    def set_victim() -> bool:
        with RawConn(proxy.port()) as c:
            return c.request(f"set {victim} 0 0 1\r\nv\r\n".encode()) == b"STORED\r\n"

    # The first requests fail and eject the server; then its keys are remapped.
    wait_until(set_victim, timeout=10, what="a key of the dead server to be remapped")
    assert holders(backends, victim) in ([0], [2])

    def ejected() -> dict:
        stats = proxy.stats()
        return stats if stats["alpha"]["server_ejects"] >= 1 else {}

    stats = wait_until(ejected, timeout=10, what="server_ejects >= 1 in stats")
    assert stats["alpha"][f"127.0.0.1:{dead_port}"]["server_ejected_at"] > 0

    with RawConn(proxy.port()) as c:
        for k in placed[1][1:]:
            assert c.request(f"set {k} 0 0 1\r\nr\r\n".encode()) == b"STORED\r\n"
            assert holders(backends, k) in ([0], [2])
        for i in (0, 2):
            for k in placed[i]:
                assert get(c, k) == f"VALUE {k} 0 {len(k)}\r\n{k}\r\nEND\r\n".encode()

    # Bring the server back on its port: after server_retry_timeout it is
    # tried again and takes its keys back.
    restarted_at = time.monotonic()
    backends[1] = procs.memcached(port=dead_port)

    def victim_back_home() -> bool:
        set_victim()
        return 1 in holders(backends, victim)

    wait_until(victim_back_home, timeout=RETRY_MS / 1000 + 10, interval=0.1, what="the restarted server to be retried")
    assert time.monotonic() - restarted_at < RETRY_MS / 1000 + 10
