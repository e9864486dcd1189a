"""Large Redis values streamed through walnut (walnut only): a bulk
argument or bulk reply of 1 MB or more is forwarded in pieces as it
arrives, so a worker never holds a whole 300 MB value."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
import uuid

import pytest

from faultkit import children, redis_holder, status_kb
from procs import HOST, Proxy, redis_pool, wait_until

# Minutes of work in all: left out of `make quick`.
pytestmark = pytest.mark.slow

MB = 1024 * 1024
# A pattern whose period (251) does not divide any chunk size, holding
# every byte value (CR and LF included): binary safety.
PATTERN = bytes((i * 7 + 3) % 256 for i in range(251))
BLOCK = PATTERN * (4 * MB // len(PATTERN))  # continues the pattern block to block


def digest_of(size: int) -> str:
    h = hashlib.sha1()
    left = size
    while left:
        part = BLOCK[: min(left, len(BLOCK))]
        h.update(part)
        left -= len(part)
    return h.hexdigest()






class Conn:
    """A raw RESP connection that sends and reads large values in pieces."""

    def __init__(self, port: int, timeout: float = 120.0):
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rf = self.sock.makefile("rb")

    def close(self) -> None:
        self.rf.close()
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_command(self, *args: bytes) -> None:
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.send(b"".join(out))

    def send_big(self, cmd: bytes, key: bytes, size: int, tail: tuple[bytes, ...] = (), stop_at: int | None = None) -> None:
        """``cmd key <size bytes of PATTERN> tail...``; ``stop_at``: send only that many value bytes."""
        self.send(b"*%d\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n" % (3 + len(tail), len(cmd), cmd, len(key), key, size))
        left = size if stop_at is None else stop_at
        while left:
            part = BLOCK[: min(left, len(BLOCK))]
            self.sock.sendall(part)
            left -= len(part)
        if stop_at is not None:
            return
        out = [b"\r\n"]
        for a in tail:
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.send(b"".join(out))

    def line(self) -> bytes:
        line = self.rf.readline()
        assert line.endswith(b"\r\n"), f"connection ended: {line!r}"
        return line[:-2]

    def drain(self) -> int:
        """Read until the peer closes; the bytes read."""
        got = 0
        while True:
            part = self.rf.read(1 << 20)
            if not part:
                return got
            got += len(part)

    def bulk_digest(self) -> tuple[int, str]:
        """Read one bulk reply without holding it whole: its length and sha1."""
        head = self.line()
        assert head.startswith(b"$"), head
        n = int(head[1:])
        h = hashlib.sha1()
        left = n
        while left:
            part = self.rf.read(min(left, 4 * MB))
            assert part, "connection ended inside a bulk reply"
            h.update(part)
            left -= len(part)
        assert self.rf.read(2) == b"\r\n"
        return n, h.hexdigest()


@pytest.fixture
def setup(procs):
    backend = procs.redis()
    proxy = Proxy("walnut", procs.workdir, {"big": redis_pool([backend], timeout=5000)},
                  extra_args=["--workers", "1", "--admin", "off"])
    procs.started.append(proxy)
    proxy.start()
    workers = wait_until(lambda: children(proxy.pid), 10, what="worker")
    return backend, proxy, workers[0]


@pytest.mark.parametrize("size_mb", [64, 300])
def test_large_set_get_streamed(setup, size_mb):
    backend, proxy, worker = setup
    size = size_mb * MB
    key = f"big:{uuid.uuid4().hex}".encode()
    small = f"small:{uuid.uuid4().hex}".encode()
    want = digest_of(size)
    c = Conn(proxy.port())
    try:
        c.send_command(b"SET", small, b"tiny\r\nvalue")
        assert c.line() == b"+OK"
        # A big SET with trailing arguments, a small GET pipelined after it.
        t0 = time.monotonic()
        c.send_big(b"SET", key, size, tail=(b"EX", b"3600"))
        c.send_command(b"GET", small)
        assert c.line() == b"+OK"
        set_s = time.monotonic() - t0
        assert c.line() == b"$11"
        assert c.rf.read(13) == b"tiny\r\nvalue\r\n"
        # The big GET, and a small GET pipelined behind it.
        t0 = time.monotonic()
        c.send_command(b"GET", key)
        c.send_command(b"GET", small)
        assert c.bulk_digest() == (size, want)
        get_s = time.monotonic() - t0
        assert c.line() == b"$11"
        assert c.rf.read(13) == b"tiny\r\nvalue\r\n"
        c.send_command(b"TTL", key)
        ttl = int(c.line()[1:])
        assert 3500 < ttl <= 3600, "the arguments after the value reached the server"
    finally:
        c.close()
    # Direct to the backend: the same value, and a reference time.
    d = Conn(backend.port)
    try:
        t0 = time.monotonic()
        d.send_command(b"GET", key)
        assert d.bulk_digest() == (size, want)
        direct_get_s = time.monotonic() - t0
        t0 = time.monotonic()
        d.send_big(b"SET", key + b":direct", size)
        assert d.line() == b"+OK"
        direct_set_s = time.monotonic() - t0
        d.send_command(b"DEL", key, key + b":direct")
        assert d.line() == b":2"
    finally:
        d.close()
    hwm = status_kb(worker, "VmHWM")
    print(f"\n{size_mb} MB: SET via walnut {set_s:.2f}s ({size_mb / set_s:.0f} MB/s), direct {direct_set_s:.2f}s; "
          f"GET via walnut {get_s:.2f}s ({size_mb / get_s:.0f} MB/s), direct {direct_get_s:.2f}s; "
          f"worker VmHWM {hwm} kB")
    assert hwm < 64 * 1024, f"worker peak RSS {hwm} kB while moving {size_mb} MB"
    pool = proxy.stats()["big"]
    server = next(v for v in pool.values() if isinstance(v, dict))
    # Counted as the bytes pass: both big SETs' arguments, the big GET's reply.
    assert server["request_bytes"] > size
    assert server["response_bytes"] > size


def test_other_clients_served_during_a_slow_upload(setup):
    backend, proxy, worker = setup
    key = f"slow:{uuid.uuid4().hex}".encode()
    size = 32 * MB
    a = Conn(proxy.port())
    b = Conn(proxy.port(), timeout=10)
    try:
        a.send_big(b"SET", key, size, stop_at=size // 2)
        for i in range(20):
            k = f"other:{i}".encode()
            b.send_command(b"SET", k, b"v%d" % i)
            assert b.line() == b"+OK"
            b.send_command(b"GET", k)
            assert b.line() == b"$%d" % len(b"v%d" % i)
            assert b.line() == b"v%d" % i
        left = size - size // 2
        while left:
            part = BLOCK[(size // 2) % len(PATTERN):][: min(left, 2 * MB)]
            a.sock.sendall(part)
            left -= len(part)
        # The second half did not continue the pattern exactly: only compare lengths.
        a.send(b"\r\n")
        assert a.line() == b"+OK"
        a.send_command(b"STRLEN", key)
        assert a.line() == b":%d" % size
    finally:
        a.close()
        b.close()


def connected_clients(d: Conn) -> int:
    d.send_command(b"INFO", b"clients")
    head = d.line()
    body = d.rf.read(int(head[1:]) + 2)
    return int(body.split(b"connected_clients:")[1].split(b"\r\n")[0])


def test_client_gone_mid_body_leaves_no_partial_write(setup):
    backend, proxy, worker = setup
    key = f"cut:{uuid.uuid4().hex}".encode()
    d = Conn(backend.port, timeout=10)
    a = Conn(proxy.port())
    b = Conn(proxy.port(), timeout=10)
    try:
        a.send_big(b"SET", key, 64 * MB, stop_at=20 * MB)
        # The head went out on a connection of its own: this one and that one.
        wait_until(lambda: connected_clients(d) == 2, 10, what="the streamed request's connection")
        a.close()
        wait_until(lambda: connected_clients(d) == 1, 10, what="the half-written request's connection to close")
        d.send_command(b"EXISTS", key)
        assert d.line() == b":0", "a partial command was applied"
        # walnut keeps serving.
        b.send_command(b"SET", key, b"after")
        assert b.line() == b"+OK"
        b.send_command(b"GET", key)
        assert b.line() == b"$5"
        assert b.line() == b"after"
        # A second big SET after the abort completes on a clean connection.
        b.send_big(b"SET", key, 3 * MB)
        assert b.line() == b"+OK"
        b.send_command(b"STRLEN", key)
        assert b.line() == b":%d" % (3 * MB)
    finally:
        b.close()
        d.close()


def test_server_gone_mid_body_errors_and_keeps_client(setup):
    backend, proxy, worker = setup
    key = f"dead:{uuid.uuid4().hex}".encode()
    size = 16 * MB
    d = Conn(backend.port, timeout=10)
    a = Conn(proxy.port())
    try:
        a.send_big(b"SET", key, size, tail=(b"EX", b"60"), stop_at=4 * MB)
        wait_until(lambda: connected_clients(d) == 2, 10, what="the streamed request's connection")
        d.close()
        backend.kill()
        # The rest of the request is read and dropped: the client stays in step.
        left = size - 4 * MB
        while left:
            part = BLOCK[: min(left, 2 * MB)]
            a.sock.sendall(part)
            left -= len(part)
        a.send(b"\r\n$2\r\nEX\r\n$2\r\n60\r\n")
        reply = a.line()
        assert reply.startswith(b"-ERR"), reply
        a.send_command(b"PING")
        assert a.line() == b"+PONG"
    finally:
        a.close()


def test_client_not_reading_a_streamed_reply_holds_back_no_one(setup):
    """The server connection a streamed reply comes on is shared: once
    another client's request waits on it, the rest of the reply for a
    client that stopped reading is moved out of the way (spooled, within
    `client_output_limit`), the others are answered at once, and the slow
    client still gets its whole value when it reads."""
    backend, proxy, worker = setup
    key = f"unread:{uuid.uuid4().hex}".encode()
    other = f"other:{uuid.uuid4().hex}".encode()
    size = 64 * MB
    w = Conn(proxy.port())
    try:
        w.send_big(b"SET", key, size)
        assert w.line() == b"+OK"
        w.send_command(b"SET", other, b"x")
        assert w.line() == b"+OK"
    finally:
        w.close()
    a = Conn(proxy.port())
    a.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    b = Conn(proxy.port(), timeout=30)
    try:
        a.send_command(b"GET", key)  # and not read for now

        def waiting() -> bool:
            pool = proxy.stats()["big"]
            return any(isinstance(v, dict) and v.get("out_queue", 0) >= 1 for v in pool.values())
        wait_until(waiting, 10, what="the GET to reach the server")
        t0 = time.monotonic()
        b.send_command(b"GET", other)
        assert b.line() == b"$1"
        assert b.line() == b"x"
        waited = time.monotonic() - t0
        assert waited < 2, f"the other client waited {waited:.2f} s behind the one not reading"
        assert a.bulk_digest() == (size, digest_of(size))
    finally:
        a.close()
        b.close()


# ------------------------------------------------- MSET with large values -----
# An MSET carrying a value of 1 MB or more is sent pair by pair as it
# arrives, one `MSET key value` per pair on a connection of its own per
# server; the client gets one reply.


@pytest.fixture
def two(procs):
    backends = [procs.redis(), procs.redis()]
    proxy = Proxy("walnut", procs.workdir, {"big": redis_pool(backends, timeout=5000)},
                  extra_args=["--workers", "1", "--admin", "off"])
    procs.started.append(proxy)
    proxy.start()
    workers = wait_until(lambda: children(proxy.pid), 10, what="worker")
    return backends, proxy, workers[0]


def keys_by_server(proxy, backends, n: int = 32) -> list[list[bytes]]:
    """Fresh keys grouped by the backend walnut places them on."""
    out: list[list[bytes]] = [[] for _ in backends]
    c = Conn(proxy.port(), timeout=10)
    try:
        for i in range(n):
            k = f"ms:{uuid.uuid4().hex[:12]}:{i}".encode()
            c.send_command(b"SET", k, b"probe")
            assert c.line() == b"+OK"
            holder = redis_holder(backends, k.decode())
            c.send_command(b"DEL", k)
            assert c.line() == b":1"
            out[holder].append(k)
    finally:
        c.close()
    assert all(len(v) >= 3 for v in out), [len(v) for v in out]
    return out


def send_mset(c: Conn, items, stop_at: int | None = None) -> None:
    """``MSET`` of ``items``: (key, bytes) or (key, size) for a PATTERN value
    of that size; ``stop_at``: end after that many bytes of the first
    sized value."""
    c.send(b"*%d\r\n$4\r\nMSET\r\n" % (1 + 2 * len(items)))
    for key, value in items:
        if isinstance(value, bytes):
            c.send(b"$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(value), value))
            continue
        c.send(b"$%d\r\n%s\r\n$%d\r\n" % (len(key), key, value))
        left = value if stop_at is None else stop_at
        while left:
            part = BLOCK[: min(left, len(BLOCK))]
            c.sock.sendall(part)
            left -= len(part)
        if stop_at is not None:
            return
        c.send(b"\r\n")


def test_mset_large_values_pair_by_pair(two):
    backends, proxy, worker = two
    by = keys_by_server(proxy, backends)
    size = 40 * MB
    # Three 40 MB values over both servers, small pairs between them.
    big = [by[0][0], by[1][0], by[0][1]]
    small = [(by[1][1], b"s1\r\nx"), (by[0][2], b"s2"), (by[1][2], b"")]
    items = [small[0], (big[0], size), small[1], (big[1], size), (big[2], size), small[2]]
    want = digest_of(size)
    c = Conn(proxy.port())
    try:
        t0 = time.monotonic()
        send_mset(c, items)
        c.send_command(b"GET", small[1][0])  # pipelined behind it
        assert c.line() == b"+OK"
        took = time.monotonic() - t0
        assert c.line() == b"$2"
        assert c.line() == b"s2"
        # The same key twice, large then small: the last one wins, as in Redis.
        dup = by[1][3]
        send_mset(c, [(dup, 3 * MB), (dup, b"last")])
        assert c.line() == b"+OK"
        c.send_command(b"GET", dup)
        assert c.line() == b"$4"
        assert c.line() == b"last"
    finally:
        c.close()
    hwm = status_kb(worker, "VmHWM")
    for i, b in enumerate(backends):
        d = Conn(b.port)
        try:
            for k in big:
                d.send_command(b"EXISTS", k)
                held = d.line() == b":1"
                assert held == (k in by[i]), (k, i)
                if held:
                    d.send_command(b"GET", k)
                    assert d.bulk_digest() == (size, want)
            for k, v in small:
                d.send_command(b"GET", k)
                if k in by[i]:
                    assert d.line() == b"$%d" % len(v)
                    assert d.rf.read(len(v) + 2) == v + b"\r\n"
                else:
                    assert d.line() == b"$-1"
        finally:
            d.close()
    print(f"\nMSET 3 x 40 MB + 3 small over 2 servers: {took:.2f}s, worker VmHWM {hwm} kB")
    assert hwm < 64 * 1024, f"worker peak RSS {hwm} kB for a 120 MB MSET"


def test_mset_server_gone_mid_value_errors_and_keeps_client(two):
    backends, proxy, worker = two
    by = keys_by_server(proxy, backends)
    size = 16 * MB
    small, bigk = by[0][0], by[1][0]
    d = Conn(backends[1].port, timeout=10)
    a = Conn(proxy.port())
    try:
        base = connected_clients(d)  # this one and walnut's shared connection
        send_mset(a, [(small, b"kept"), (bigk, size)], stop_at=4 * MB)
        wait_until(lambda: connected_clients(d) == base + 1, 10, what="the streamed pair's connection")
        d.close()
        backends[1].kill()
        left = size - 4 * MB
        while left:
            part = BLOCK[: min(left, 2 * MB)]
            a.sock.sendall(part)
            left -= len(part)
        a.send(b"\r\n")
        reply = a.line()
        assert reply.startswith(b"-ERR"), reply
        a.send_command(b"PING")
        assert a.line() == b"+PONG"
        a.send_command(b"GET", small)
        assert a.line() == b"$4"
        assert a.line() == b"kept", "pairs are applied one by one"
    finally:
        a.close()


def test_mset_client_gone_mid_value_leaves_no_partial_pair(two):
    backends, proxy, worker = two
    by = keys_by_server(proxy, backends)
    first, bigk = by[1][0], by[0][0]
    d = Conn(backends[0].port, timeout=10)
    a = Conn(proxy.port())
    b = Conn(proxy.port(), timeout=10)
    try:
        base = connected_clients(d)
        send_mset(a, [(first, b"v"), (bigk, 64 * MB), (by[0][1], b"never")], stop_at=20 * MB)
        wait_until(lambda: connected_clients(d) == base + 1, 10, what="the streamed pair's connection")
        a.close()
        wait_until(lambda: connected_clients(d) == base, 10, what="the half-sent pair's connection to close")
        d.send_command(b"EXISTS", bigk, by[0][1])
        assert d.line() == b":0", "a partial pair was applied"
        b.send_command(b"PING")
        assert b.line() == b"+PONG"
    finally:
        b.close()
        d.close()


def test_mset_protocol_error_and_arity(two):
    backends, proxy, worker = two
    a = Conn(proxy.port(), timeout=10)
    try:
        # A malformed argument after the large value: the error, then closed.
        a.send(b"*5\r\n$4\r\nMSET\r\n$1\r\nk\r\n$%d\r\n" % (2 * MB) + BLOCK[: 2 * MB] + b"\r\n:1\r\n")
        first = a.line()
        assert first.startswith(b"-ERR"), first
        assert a.line() == b"-ERR Protocol error: expected '$', got ':'"
        assert a.rf.read(1) == b""
    finally:
        a.close()
    b = Conn(proxy.port(), timeout=10)
    try:
        # An even argument count: redis-server's arity error, as for any MSET.
        b.send(b"*4\r\n$4\r\nMSET\r\n$1\r\nk\r\n$%d\r\n" % (2 * MB) + BLOCK[: 2 * MB] + b"\r\n$1\r\nk\r\n")
        assert b.line() == b"-ERR wrong number of arguments for 'mset' command"
        b.send_command(b"PING")
        assert b.line() == b"+PONG"
    finally:
        b.close()


# -------------------------------------------- a large argument before the key --
# EVAL's script comes before its key: the script is held in 64 KiB chunks
# until the key is read, then passed to the key's server as it drains.


def send_eval(c: Conn, size: int, tail: tuple[bytes, ...]) -> None:
    """``EVAL <script of size bytes> tail...``: a long Lua comment, then
    ``return redis.call('SET', KEYS[1], ARGV[1])``."""
    code = b"\nreturn redis.call('SET', KEYS[1], ARGV[1])\n"
    c.send(b"*%d\r\n$4\r\nEVAL\r\n$%d\r\n--[[" % (2 + len(tail), size))
    left = size - 4 - 2 - len(code)
    filler = b"x" * MB
    while left:
        part = filler[: min(left, MB)]
        c.sock.sendall(part)
        left -= len(part)
    out = [b"]]" + code + b"\r\n"]
    for a in tail:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    c.send(b"".join(out))


@pytest.mark.parametrize("size_mb", [3, 32])
def test_eval_large_script_before_the_key(two, size_mb):
    backends, proxy, worker = two
    by = keys_by_server(proxy, backends)
    size = size_mb * MB
    c = Conn(proxy.port())
    try:
        for i, keys in enumerate(by):
            key = keys[0]
            t0 = time.monotonic()
            send_eval(c, size, (b"1", key, b"value %d" % i))
            c.send_command(b"GET", key)  # pipelined behind it
            assert c.line() == b"+OK"
            took = time.monotonic() - t0
            assert c.line() == b"$7"
            assert c.line() == b"value %d" % i
            d = Conn(backends[i].port)
            try:
                d.send_command(b"GET", key)
                assert d.line() == b"$7", "on the key's server"
                assert d.line() == b"value %d" % i
            finally:
                d.close()
        # numkeys checked as redis-server does, the rest read and dropped.
        send_eval(c, size, (b"x", by[0][1], b"v"))
        assert c.line() == b"-ERR value is not an integer or out of range"
        send_eval(c, size, (b"3", by[0][1], b"v"))
        assert c.line() == b"-ERR Number of keys can't be greater than number of args"
        c.send_command(b"EXISTS", by[0][1])
        assert c.line() == b":0"
    finally:
        c.close()
    hwm = status_kb(worker, "VmHWM")
    print(f"\nEVAL with a {size_mb} MB script: {took:.2f}s, worker VmHWM {hwm} kB")
    assert hwm < size // 1024 + 24 * 1024, f"worker peak RSS {hwm} kB for a {size_mb} MB script"


def test_eval_large_script_server_down_or_client_gone(two):
    backends, proxy, worker = two
    by = keys_by_server(proxy, backends)
    backends[1].kill()
    c = Conn(proxy.port(), timeout=30)
    try:
        # The key's server is down: its error, the rest dropped, the client usable.
        send_eval(c, 3 * MB, (b"1", by[1][0], b"v"))
        reply = c.line()
        assert reply.startswith(b"-ERR"), reply
        send_eval(c, 3 * MB, (b"1", by[0][0], b"v"))
        assert c.line() == b"+OK"
        # A client gone in the middle of the script: nothing reaches a server.
        gone = Conn(proxy.port())
        gone.send(b"*4\r\n$4\r\nEVAL\r\n$%d\r\n--" % (8 * MB) + b"x" * MB)
        gone.close()
        c.send_command(b"PING")
        assert c.line() == b"+PONG"
    finally:
        c.close()


def test_eval_large_argument_after_the_key(two):
    backends, proxy, worker = two
    by = keys_by_server(proxy, backends)
    size = 24 * MB
    script = b"return redis.call('SET', KEYS[1], ARGV[1])"
    want = digest_of(size)
    c = Conn(proxy.port())
    try:
        for i, keys in enumerate(by):
            key = keys[0]
            # EVAL script 1 key <24 MB>: streamed once the key is read.
            c.send(b"*5\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n$1\r\n1\r\n$%d\r\n%s\r\n$%d\r\n"
                   % (len(script), script, len(key), key, size))
            left = size
            while left:
                part = BLOCK[: min(left, len(BLOCK))]
                c.sock.sendall(part)
                left -= len(part)
            c.send(b"\r\n")
            assert c.line() == b"+OK"
            d = Conn(backends[i].port)
            try:
                d.send_command(b"GET", key)
                assert d.bulk_digest() == (size, want), "on the key's server"
            finally:
                d.close()
    finally:
        c.close()
    hwm = status_kb(worker, "VmHWM")
    print(f"\nEVAL with a 24 MB argument after the key: worker VmHWM {hwm} kB")
    assert hwm < 16 * 1024, hwm
