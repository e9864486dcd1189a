"""Large Redis replies of any shape (arrays, RESP3 maps, many small
elements) streamed through walnut (walnut only): the worker never holds
the whole reply."""

from __future__ import annotations

import hashlib
import time
import uuid

import pytest
import redis

from faultkit import children, status_kb
from procs import HOST, Proxy, redis_pool, wait_until
from test_redis_large_values import BLOCK, MB, Conn, digest_of

# Minutes of work in all: left out of `make quick`.
pytestmark = pytest.mark.slow


@pytest.fixture
def setup(procs):
    backend = procs.redis()
    proxy = Proxy("walnut", procs.workdir, {"big": redis_pool([backend], timeout=5000)},
                  extra_args=["--workers", "1", "--admin", "off"])
    procs.started.append(proxy)
    proxy.start()
    workers = wait_until(lambda: children(proxy.pid), 10, what="worker")
    return backend, proxy, workers[0]


def read_bulk(c: Conn) -> tuple[int, str]:
    return c.bulk_digest()


def test_lrange_of_large_elements_streamed(setup):
    backend, proxy, worker = setup
    key = f"list:{uuid.uuid4().hex}".encode()
    size, count = 40 * MB, 4
    want = digest_of(size)
    c = Conn(proxy.port())
    try:
        for i in range(count):
            c.send_big(b"RPUSH", key, size)
            assert c.line() == b":%d" % (i + 1)
        c.send_command(b"LRANGE", key, b"0", b"-1")
        c.send_command(b"PING")
        assert c.line() == b"*%d" % count
        for _ in range(count):
            assert read_bulk(c) == (size, want)
        assert c.line() == b"+PONG"
    finally:
        c.close()
    hwm = status_kb(worker, "VmHWM")
    print(f"\nLRANGE of {count} x {size // MB} MB: worker VmHWM {hwm} kB")
    assert hwm < 40 * 1024, f"worker peak RSS {hwm} kB for a {count * size // MB} MB reply"


def test_hgetall_resp3_map_of_large_fields(setup):
    backend, proxy, worker = setup
    key = f"hash:{uuid.uuid4().hex}"
    fields = {f"f{i}".encode(): BLOCK[: (3 + i) * MB] for i in range(3)}
    r = redis.Redis(host=HOST, port=proxy.port(), protocol=3, socket_timeout=60)
    try:
        r.hset(key, mapping=fields)
        got = r.hgetall(key)
        assert {k: hashlib.sha1(v).hexdigest() for k, v in got.items()} == \
            {k: hashlib.sha1(v).hexdigest() for k, v in fields.items()}
        assert r.ping()
    finally:
        r.close()


def test_lrange_of_many_small_elements(setup):
    backend, proxy, worker = setup
    key = f"small:{uuid.uuid4().hex}"
    n = 250_000
    r = redis.Redis(host=HOST, port=proxy.port(), socket_timeout=60)
    try:
        pipe = r.pipeline(transaction=False)
        for start in range(0, n, 10_000):
            pipe.rpush(key, *[b"e%d" % i for i in range(start, start + 10_000)])
        pipe.execute()
        got = r.lrange(key, 0, -1)
        assert len(got) == n
        assert got == [b"e%d" % i for i in range(n)]
    finally:
        r.close()


def test_server_killed_mid_array_reply(setup):
    backend, proxy, worker = setup
    key = f"list:{uuid.uuid4().hex}".encode()
    c = Conn(proxy.port())
    for i in range(4):
        c.send_big(b"RPUSH", key, 32 * MB)
        assert c.line() == b":%d" % (i + 1)
    c.close()
    a = Conn(proxy.port(), timeout=30)
    try:
        a.send_command(b"LRANGE", key, b"0", b"-1")
        assert a.line() == b"*4"
        assert a.line() == b"$%d" % (32 * MB)
        assert a.rf.read(1 * MB)  # the reply is under way
        backend.kill()
        got = 0
        while True:
            part = a.rf.read(1 << 20)
            if not part:
                break
            got += len(part)
        assert got < 4 * 32 * MB, "the client got an end of file before the whole reply"
    finally:
        a.close()
    # walnut keeps serving: a new client gets an error reply, not a hang.
    b = Conn(proxy.port(), timeout=10)
    try:
        b.send_command(b"PING")
        assert b.line() == b"+PONG"
        b.send_command(b"GET", b"k")
        assert b.line().startswith(b"-ERR")
    finally:
        b.close()


def test_client_not_reading_array_reply_does_not_stall_others(setup):
    backend, proxy, worker = setup
    want = digest_of(32 * MB)
    key = f"list:{uuid.uuid4().hex}".encode()
    other = f"other:{uuid.uuid4().hex}".encode()
    w = Conn(proxy.port())
    try:
        for i in range(2):
            w.send_big(b"RPUSH", key, 32 * MB)
            assert w.line() == b":%d" % (i + 1)
        w.send_command(b"SET", other, b"x")
        assert w.line() == b"+OK"
    finally:
        w.close()
    import socket
    a = Conn(proxy.port())
    a.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    b = Conn(proxy.port(), timeout=30)
    try:
        a.send_command(b"LRANGE", key, b"0", b"-1")  # and never read

        def waiting() -> bool:
            pool = proxy.stats()["big"]
            return any(isinstance(v, dict) and v.get("out_queue", 0) >= 1 for v in pool.values())
        wait_until(waiting, 10, what="the LRANGE to reach the server")
        t0 = time.monotonic()
        b.send_command(b"GET", other)
        assert b.line() == b"$1"
        assert b.line() == b"x"
        waited = time.monotonic() - t0
        assert waited < 2, f"the other client waited {waited:.2f} s behind the one not reading"
        # The rest of the reply was moved aside, not lost: a reads it whole.
        assert a.line() == b"*2"
        for _ in range(2):
            assert read_bulk(a) == (32 * MB, want)
    finally:
        a.close()
        b.close()
