"""Large Redis replies that cannot pass straight through (walnut only): a
reply that waits behind an earlier, slower reply of its client, and the
fragments of an MGET split across servers, are held in 64 KiB chunks and
passed on as the client reads: a worker's memory peaks near the size of the
values, never at several copies of them, and the bytes arrive intact."""

from __future__ import annotations

import hashlib
import uuid

import pytest
import redis

from faultkit import children, status_kb
from procs import HOST, Proxy, log_tail, redis_pool, wait_until
from test_redis_large_values import BLOCK, MB, Conn, digest_of

# Keeps its server busy for ~300 ms, then answers :1.
SLOW_SCRIPT = (
    b"local t = redis.call('TIME') local s = t[1] * 1000000 + t[2] "
    b"repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - s > 300000 "
    b"return 1"
)


def pattern(size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        out += BLOCK[: min(size - len(out), len(BLOCK))]
    return bytes(out)


def start(procs, **settings):
    backends = [procs.redis(), procs.redis()]
    proxy = Proxy("walnut", procs.workdir,
                  {"held": redis_pool(backends, timeout=10000, **settings)},
                  extra_args=["--workers", "1", "--admin", "off"])
    procs.started.append(proxy)
    proxy.start()
    worker = wait_until(lambda: children(proxy.pid), 10, what="worker")[0]
    direct = [redis.Redis(host=HOST, port=b.port, protocol=2) for b in backends]
    return proxy, worker, direct


@pytest.fixture
def setup(procs):
    return start(procs)


def keys_on(direct, proxy, count_per_server: int) -> list[list[bytes]]:
    """Keys placed by walnut on each backend (found by writing through
    walnut and looking on the backends)."""
    found: list[list[bytes]] = [[] for _ in direct]
    with redis.Redis(host=HOST, port=proxy.port(), protocol=2) as r:
        for _ in range(200):
            k = f"held:{uuid.uuid4().hex}".encode()
            r.set(k, b"probe")
            for i, d in enumerate(direct):
                if d.exists(k) and len(found[i]) < count_per_server:
                    found[i].append(k)
            if all(len(f) == count_per_server for f in found):
                return found
    raise AssertionError(f"placement never reached both servers: {found}")


def read_array_digests(c: Conn) -> list[tuple[int, str] | None]:
    head = c.line()
    assert head.startswith(b"*"), head
    out: list[tuple[int, str] | None] = []
    for _ in range(int(head[1:])):
        line = c.line()
        if line == b"$-1":
            out.append(None)
            continue
        assert line.startswith(b"$"), line
        n, h, left = int(line[1:]), hashlib.sha1(), int(line[1:])
        while left:
            part = c.rf.read(min(left, 4 * MB))
            assert part, "connection ended inside a value"
            h.update(part)
            left -= len(part)
        assert c.rf.read(2) == b"\r\n"
        out.append((n, h.hexdigest()))
    return out


def test_reply_behind_a_slower_one_is_held_in_chunks(setup):
    proxy, worker, direct = setup
    (slow_key,), (big_key,) = keys_on(direct, proxy, 1)
    size = 100 * MB
    direct[1].set(big_key, pattern(size))
    hwm0 = status_kb(worker, "VmHWM")
    c = Conn(proxy.port())
    try:
        # The GET's reply arrives while the EVAL still runs on the other
        # server: it cannot be written before the EVAL's, so it is held.
        c.send_command(b"EVAL", SLOW_SCRIPT, b"1", slow_key)
        c.send_command(b"GET", big_key)
        c.send_command(b"PING")
        assert c.line() == b":1"
        assert c.bulk_digest() == (size, digest_of(size))
        assert c.line() == b"+PONG"
    finally:
        c.close()
    grew_mb = (status_kb(worker, "VmHWM") - hwm0) / 1024
    print(f"worker VmHWM grew {grew_mb:.1f} MB for a held {size // MB} MB reply")
    # Held once, in chunks: not the server's read buffer plus a copy in the
    # reply slot plus a copy in the client's output.
    assert grew_mb < 1.3 * size / MB


def test_split_mget_of_large_values_is_merged_in_chunks(setup):
    proxy, worker, direct = setup
    (a1, a2), (b1, b2) = keys_on(direct, proxy, 2)
    sizes = {a1: 40 * MB, a2: 3, b1: 40 * MB}
    for k, n in sizes.items():
        (direct[0] if k in (a1, a2) else direct[1]).set(k, pattern(n))
    direct[1].delete(b2)
    hwm0 = status_kb(worker, "VmHWM")
    c = Conn(proxy.port())
    try:
        order = [b1, a2, b2, a1]
        c.send_command(b"MGET", *order)
        got = read_array_digests(c)
        want = [(sizes[k], digest_of(sizes[k])) if k in sizes else None for k in order]
        assert got == want
        # The connection goes on.
        c.send_command(b"GET", a2)
        assert c.line() == b"$3"
        assert c.rf.read(5) == pattern(3) + b"\r\n"
    finally:
        c.close()
    grew_mb = (status_kb(worker, "VmHWM") - hwm0) / 1024
    total_mb = sum(sizes.values()) / MB
    print(f"worker VmHWM grew {grew_mb:.1f} MB for an {total_mb:.0f} MB merged MGET")
    assert grew_mb < 1.3 * total_mb


def test_client_gone_before_its_held_reply_is_read(setup):
    proxy, worker, direct = setup
    (slow_key,), (big_key,) = keys_on(direct, proxy, 1)
    size = 30 * MB
    direct[1].set(big_key, pattern(size))
    c = Conn(proxy.port())
    c.send_command(b"EVAL", SLOW_SCRIPT, b"1", slow_key)
    c.send_command(b"GET", big_key)
    c.close()
    # Another client is served, and the worker lets the held bytes go.
    with redis.Redis(host=HOST, port=proxy.port(), protocol=2) as r:
        assert r.strlen(big_key) == size
        assert r.get(slow_key) == b"probe"
    wait_until(lambda: status_kb(worker, "VmRSS") < 30 * 1024, 10, what="held reply freed")


def test_held_replies_count_against_client_output_limit(procs):
    """A client that pipelines large reads behind a slow one and reads
    nothing is closed once its held replies pass client_output_limit, as it
    would be with them in its output buffer; others go on."""
    proxy, worker, direct = start(procs, client_output_limit="50m")
    (slow_key,), (big_key,) = keys_on(direct, proxy, 1)
    direct[1].set(big_key, pattern(30 * MB))
    c = Conn(proxy.port())
    try:
        # 2 s of script: time for 60 MB to arrive on a busy machine.
        c.send_command(b"EVAL", SLOW_SCRIPT.replace(b"300000", b"2000000"), b"1", slow_key)
        for _ in range(3):
            c.send_command(b"GET", big_key)
        # Closed without a reply (the EVAL's was still awaited).
        assert c.rf.read(1) == b""
    finally:
        c.close()
    with redis.Redis(host=HOST, port=proxy.port(), protocol=2) as r:
        assert r.strlen(big_key) == 30 * MB
    assert "held, over client_output_limit" in log_tail(proxy.log_path, 20000)
