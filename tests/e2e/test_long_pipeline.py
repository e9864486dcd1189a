"""A long pipeline always finishes: a client that writes a million
requests in one stream while it reads the replies (Redis's mass insertion,
`redis-cli --pipe`; memcached's text and binary equivalents) is paused by
`client_max_inflight` many times over, and every pause ends.

The client here never waits for a reply before writing more, as
`redis-cli --pipe` does not: the proxy's reading of it stops with its
socket full and must start again by itself, since no new event comes
from a client whose own writes are blocked. Progress is watched as it
happens: a gap of more than a second between two replies fails the test,
so a stall is caught without waiting for a timeout. The pools run with
one and with two workers, and with a migration under way (a server
added by a reload, the keys written being ones that move).
"""

from __future__ import annotations

import selectors
import signal
import socket
import struct
import subprocess
import time

import pytest

from procmodel import wait_workers
from test_migration_bg import state as migration_state
from procs import HOST, Proxy, RawConn, free_port, memcache_pool, redis_pool, to_yaml, wait_until

# A minute and a half of pipelines: left out of `make quick`.
pytestmark = pytest.mark.slow

#: Requests per pipeline.
N = 1_000_000
#: The longest pause in progress accepted, in seconds.
MAX_GAP = 1.0
#: Bound on one whole pipeline, in seconds.
DEADLINE = 120.0
#: A pause this long is a stall: the reader gives up.
STALL = 5.0
#: Runs of each case: a stall, when the bug is there, came in about half
#: the runs of a million requests.
RUNS = 3


#: Values of 100 bytes, as in Redis's mass insertion example: the first
#: 8 bytes tell which key and which writing it is.
PAD = b"." * 92


def value(i: int, mark: bytes = b"v") -> bytes:
    return b"%s%07d%s" % (mark, i, PAD)


def redis_sets(n: int, prefix: bytes = b"p:", mark: bytes = b"v") -> bytes:
    return b"".join(
        b"*3\r\n$3\r\nSET\r\n$%d\r\n%s%d\r\n$100\r\n%s\r\n" % (len(prefix) + len(str(i)), prefix, i, value(i, mark))
        for i in range(n)
    )


def memcache_sets(n: int, prefix: bytes = b"p:", mark: bytes = b"v") -> bytes:
    return b"".join(b"set %s%d 0 0 100\r\n%s\r\n" % (prefix, i, value(i, mark)) for i in range(n))


#: memcached binary protocol: quiet sets in runs of this many, each run
#: ended by a NOOP, the only reply a run gets.
QUIET_RUN = 100


def binary_quiet_sets(n: int) -> bytes:
    out = []
    for i in range(n):
        key = b"p:%d" % i
        value = globals()["value"](i)
        extras = struct.pack(">II", 0, 0)
        body = len(extras) + len(key) + len(value)
        # 0x11: SETQ.
        out.append(struct.pack(">BBHBBHIIQ", 0x80, 0x11, len(key), len(extras), 0, 0, body, i, 0))
        out.append(extras + key + value)
        if (i + 1) % QUIET_RUN == 0:
            # 0x0a: NOOP.
            out.append(struct.pack(">BBHBBHIIQ", 0x80, 0x0A, 0, 0, 0, 0, 0, i, 0))
    return b"".join(out)


class Progress:
    """A pipeline's account: replies read, the longest gap between two
    reads, and why it ended early."""

    def __init__(self, replies: int):
        self.replies = replies
        self.got = 0
        self.max_gap = 0.0
        self.error: BaseException | None = None
        self.tail = b""


def pipeline(port: int, stream: bytes, replies: int, count) -> Progress:
    """Send ``stream`` and read its replies as `redis-cli --pipe` does: one
    thread, one non-blocking socket, a write of at most 16 KB whenever it
    is writable and a read whenever it is readable. Ends once every reply
    came, on a stall of ``STALL`` seconds, at ``DEADLINE``, or when the
    proxy closes."""
    progress = Progress(replies)
    sock = socket.create_connection((HOST, port), timeout=10)
    sock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
    deadline = time.monotonic() + DEADLINE
    view = memoryview(stream)
    off = 0
    pending = b""
    last = time.monotonic()
    try:
        while progress.got < replies and time.monotonic() < deadline:
            events = sel.select(0.25)
            now = time.monotonic()
            progress.max_gap = max(progress.max_gap, now - last)
            if progress.max_gap > STALL:
                break
            for _key, mask in events:
                if mask & selectors.EVENT_WRITE:
                    if off < len(view):
                        try:
                            off += sock.send(view[off:off + 16384])
                        except BlockingIOError:
                            pass
                    else:
                        sel.modify(sock, selectors.EVENT_READ)
                if mask & selectors.EVENT_READ:
                    data = sock.recv(1 << 16)
                    if not data:
                        progress.error = ConnectionError("the proxy closed the connection")
                        return progress
                    last = now
                    pending += data
                    n, pending = count(pending)
                    progress.got += n
                    progress.tail = data[-200:]
    except (OSError, AssertionError) as e:
        progress.error = e
    finally:
        sel.close()
        sock.close()
    return progress


def count_lines(expected: bytes):
    """Whole reply lines at the start of a buffer, every one ``expected``;
    the rest of the buffer is kept for the next read."""

    def count(buf: bytes):
        end = buf.rfind(b"\n") + 1
        done, rest = buf[:end], buf[end:]
        n = done.count(b"\n")
        if done.count(expected) != n:
            raise AssertionError(f"an unexpected reply among {done[:200]!r}")
        return n, rest

    return count


def count_binary_noops(buf: bytes):
    """NOOP replies at the start of a buffer (binary protocol)."""
    end = len(buf) - len(buf) % 24
    for off in range(0, end, 24):
        magic, opcode, _k, _e, _t, status, body = struct.unpack_from(">BBHBBHI", buf, off)
        if (magic, opcode, status, body) != (0x81, 0x0A, 0, 0):
            raise AssertionError(f"an unexpected binary reply {buf[off:off + 24]!r}")
    return end // 24, buf[end:]


def assert_finished(p: Progress, what: str) -> None:
    assert p.error is None, f"{what}: {p.error!r}"
    assert p.got == p.replies, (
        f"{what}: stalled after {p.got} of {p.replies} replies (last bytes {p.tail!r})"
    )
    assert p.max_gap <= MAX_GAP, f"{what}: progress stopped for {p.max_gap:.2f} s"


WORKERS = [pytest.param(1, id="1-worker"), pytest.param(2, id="2-workers")]


def read_back_redis(port: int, keys, prefix: bytes = b"p:", mark: bytes = b"v") -> None:
    with RawConn(port) as c:
        for i in keys:
            assert c.request(b"GET %s%d\r\n" % (prefix, i)) == b"$100\r\n", i
            assert c.read_line() == value(i, mark) + b"\r\n", i


def read_back_memcache(port: int, keys, prefix: bytes = b"p:", mark: bytes = b"v") -> None:
    with RawConn(port) as c:
        for i in keys:
            k = b"%s%d" % (prefix, i)
            assert c.request(b"get %s\r\n" % k, b"END\r\n") == \
                b"VALUE %s 0 100\r\n%s\r\nEND\r\n" % (k, value(i, mark)), i


@pytest.mark.parametrize("workers", WORKERS)
def test_redis_mass_insertion(procs, workers):
    """RESP SETs in one stream, then `redis-cli --pipe` itself."""
    backends = [procs.redis() for _ in range(2)]
    p = procs.proxy("walnut", {"rd": redis_pool(backends)}, extra_args=["--workers", str(workers)])
    stream = redis_sets(N)
    for run in range(RUNS):
        assert_finished(pipeline(p.port(), stream, N, count_lines(b"+OK\r\n")), f"redis pipeline, run {run}")
    read_back_redis(p.port(), range(0, N, 99_991))
    out = subprocess.run(
        ["redis-cli", "-h", HOST, "-p", str(p.port()), "--pipe"],
        input=stream, capture_output=True, timeout=60,
    )
    text = out.stdout.decode(errors="replace")
    assert out.returncode == 0 and f"errors: 0, replies: {N}" in text, text + out.stderr.decode()


@pytest.mark.parametrize("workers", WORKERS)
def test_memcache_text_mass_insertion(procs, workers):
    backends = [procs.memcached(extra=["-m", "256"]) for _ in range(2)]
    p = procs.proxy("walnut", {"mc": memcache_pool(backends)}, extra_args=["--workers", str(workers)])
    stream = memcache_sets(N)
    for run in range(RUNS):
        prog = pipeline(p.port(), stream, N, count_lines(b"STORED\r\n"))
        assert_finished(prog, f"memcached text pipeline, run {run}")
    read_back_memcache(p.port(), range(0, N, 99_991))


@pytest.mark.parametrize("workers", WORKERS)
def test_memcache_binary_quiet_mass_insertion(procs, workers):
    backends = [procs.memcached(extra=["-m", "256"]) for _ in range(2)]
    p = procs.proxy("walnut", {"mc": memcache_pool(backends)}, extra_args=["--workers", str(workers)])
    stream = binary_quiet_sets(N)
    for run in range(RUNS):
        prog = pipeline(p.port(), stream, N // QUIET_RUN, count_binary_noops)
        assert_finished(prog, f"memcached binary quiet pipeline, run {run}")
    read_back_memcache(p.port(), range(0, N, 99_991))


@pytest.mark.parametrize("kind", ["redis", "memcache"])
def test_mass_insertion_during_a_migration(procs, kind):
    """Keys written first on two servers; a reload adds a third with a
    slow migration; the pipeline then overwrites those keys (a third of
    them move, so many requests wait for a pull) and every one finishes,
    with the new value read back."""
    n = 200_000
    if kind == "redis":
        backends = [procs.redis() for _ in range(3)]
        make_pool, sets, ok = redis_pool, redis_sets, b"+OK\r\n"
    else:
        backends = [procs.memcached(extra=["-m", "256"]) for _ in range(3)]
        make_pool, sets, ok = memcache_pool, memcache_sets, b"STORED\r\n"
    port = free_port()

    def conf(count: int) -> str:
        return to_yaml({"pool": make_pool(backends[:count], listen=f"{HOST}:{port}",
                                          migration=True, migration_rate=2000)})

    p = Proxy("walnut", procs.workdir, {}, extra_args=["--workers", "2"])
    p.conf_path.write_text(conf(2))
    p.ports = {"pool": port}
    procs.started.append(p)
    p.start()
    gen1 = wait_workers(p.pid, 2)
    first = pipeline(port, sets(n, b"m:"), n, count_lines(ok))
    assert_finished(first, f"{kind} first writes")
    p.conf_path.write_text(conf(3))
    p.signal(signal.SIGHUP)
    wait_workers(p.pid, 2, exclude=gen1.values())
    wait_until(lambda: migration_state(p.admin_port, "pool").get("state") == "running", 10, what="migration running")
    # The same keys again, new values: "w" in place of "v".
    stream = sets(n, b"m:", b"w")
    prog = pipeline(port, stream, n, count_lines(ok))
    assert_finished(prog, f"{kind} pipeline during a migration")
    read_back = read_back_redis if kind == "redis" else read_back_memcache
    read_back(port, range(0, n, 997), b"m:", b"w")
