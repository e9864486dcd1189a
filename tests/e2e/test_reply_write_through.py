"""Replies and requests of 8 KB and more, with nothing queued before them on
the connection they go to, are written straight from the buffer they were
read into (WRITE_THROUGH_MIN in src/worker/mod.rs); what the socket does
not take is queued and written later, ahead of what follows. These tests
make the socket take only part of such messages (a client that reads
nothing until the backend has answered its whole pipeline; a backend
stopped while a pipeline of large writes arrives) and check that every
message, large and small, arrives whole and in order; and that busy clients
reading as they go get the same bytes."""

from __future__ import annotations

import os
import signal
import socket
import threading
import uuid

import pytest
import redis
from pymemcache.client.base import Client as McClient
from redis.backoff import NoBackoff
from redis.retry import Retry

from procs import HOST, memcache_pool, redis_pool, wait_until
from test_limits import server_stat, stop_process

# Around the 8 KB line, far over a 16 KB receive buffer, and tiny. The
# first replies of a pipeline find the client's output empty and are
# written straight away, until the socket takes only part of one (its send
# buffer grows to at most net.ipv4.tcp_wmem's 4 MB, less than these six
# together): the rest is queued, and what follows goes behind it.
SIZES = [900 * 1024, 890 * 1024, 880 * 1024, 870 * 1024, 860 * 1024, 850 * 1024,
         9 * 1024, 100, 200 * 1024, 5, 8 * 1024, 64 * 1024, 1, 8 * 1024 - 1, 300 * 1024,
         16 * 1024]


def small_rcvbuf_conn(port: int) -> socket.socket:
    """A client socket whose receive buffer is set small before connecting,
    so the proxy's writes to it come short."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    s.settimeout(30)
    s.connect((HOST, port))
    return s


def read_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(min(n - len(out), 1 << 20))
        assert chunk, f"connection closed after {len(out)} of {n} bytes"
        out += chunk
    return bytes(out)


def values(prefix: str) -> dict[bytes, bytes]:
    return {f"{prefix}:{uuid.uuid4().hex[:10]}:{n}".encode(): os.urandom(n) for n in SIZES}


def backend_count(read_stats, at_least: int) -> None:
    """Wait until the backend has answered `at_least` requests of the kind
    counted by `read_stats` (so replies pile up while the client reads nothing)."""
    wait_until(lambda: read_stats() >= at_least, 20, what="the backend to answer the pipeline")


def walnut_over(procs, kind: str, timeout: int = 10000):
    """One backend of `kind` (redis or memcache) and walnut (one worker)
    in front of it, pool `wt`."""
    backend = procs.redis() if kind == "redis" else procs.memcached()
    pool = (redis_pool if kind == "redis" else memcache_pool)([backend], timeout=timeout)
    return backend, procs.proxy("walnut", {"wt": pool}, extra_args=["--workers", "1"])


@pytest.fixture
def redis_setup(procs):
    return walnut_over(procs, "redis")


@pytest.fixture
def memcache_setup(procs):
    return walnut_over(procs, "memcache")


def test_redis_pipeline_of_large_and_small_replies_arrives_whole_and_in_order(redis_setup):
    backend, proxy = redis_setup
    vals = values("wt")
    r = redis.Redis(host=HOST, port=proxy.port(), retry=Retry(NoBackoff(), 0))
    for k, v in vals.items():
        r.set(k, v)
    direct = redis.Redis(host=HOST, port=backend.port)
    before = direct.info("commandstats").get("cmdstat_get", {}).get("calls", 0)
    order = list(vals) * 3
    s = small_rcvbuf_conn(proxy.port())
    try:
        s.sendall(b"".join(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(k), k) for k in order))
        backend_count(lambda: direct.info("commandstats").get("cmdstat_get", {}).get("calls", 0),
                      before + len(order))
        for k in order:
            v = vals[k]
            head = b"$%d\r\n" % len(v)
            assert read_exact(s, len(head)) == head, k
            assert read_exact(s, len(v) + 2) == v + b"\r\n", k
        # Nothing more: the next reply is the PING's.
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        assert read_exact(s, 7) == b"+PONG\r\n"
    finally:
        s.close()


def memcached_gets(port: int) -> int:
    with socket.create_connection((HOST, port), timeout=5) as c:
        c.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = c.recv(65536)
            assert chunk
            data += chunk
    for line in data.split(b"\r\n"):
        if line.startswith(b"STAT cmd_get "):
            return int(line.split()[2])
    raise AssertionError("no cmd_get in memcached stats")


def test_memcache_pipeline_of_large_and_small_replies_arrives_whole_and_in_order(memcache_setup):
    backend, proxy = memcache_setup
    vals = values("wt")
    mc = McClient((HOST, proxy.port()), default_noreply=False, timeout=10)
    for k, v in vals.items():
        assert mc.set(k.decode(), v)
    mc.close()
    keys = list(vals)
    # Single gets (written through when large) and a multi-get of three
    # large values (assembled from fragments) in one pipeline.
    multi = [keys[2], keys[5], keys[0]]
    order = keys * 3
    before = memcached_gets(backend.port)
    s = small_rcvbuf_conn(proxy.port())
    try:
        s.sendall(b"".join(b"get %s\r\n" % k for k in order) + b"get " + b" ".join(multi) + b"\r\n")
        backend_count(lambda: memcached_gets(backend.port), before + len(order) + 1)
        for k in order:
            v = vals[k]
            head = b"VALUE %s 0 %d\r\n" % (k, len(v))
            assert read_exact(s, len(head)) == head, k
            assert read_exact(s, len(v) + 7) == v + b"\r\nEND\r\n", k
        for k in multi:
            v = vals[k]
            head = b"VALUE %s 0 %d\r\n" % (k, len(v))
            assert read_exact(s, len(head)) == head, k
            assert read_exact(s, len(v) + 2) == v + b"\r\n", k
        assert read_exact(s, 5) == b"END\r\n"
        s.sendall(b"version\r\n")
        assert read_exact(s, 8) == b"VERSION "
    finally:
        s.close()


def test_busy_clients_get_their_large_values_intact(redis_setup):
    """Eight persistent clients without retries, each getting values around
    the write-through size back to back while the others do the same."""
    _, proxy = redis_setup
    r = redis.Redis(host=HOST, port=proxy.port(), retry=Retry(NoBackoff(), 0))
    vals = {f"busy:{n}".encode(): os.urandom(n) for n in range(7 * 1024, 24 * 1024, 997)}
    for k, v in vals.items():
        r.set(k, v)
    errors: list[str] = []

    def worker(i: int) -> None:
        c = redis.Redis(host=HOST, port=proxy.port(), retry=Retry(NoBackoff(), 0),
                        socket_timeout=10)
        try:
            for n in range(300):
                k = list(vals)[(n * 7 + i) % len(vals)]
                got = c.get(k)
                if got != vals[k]:
                    errors.append(f"client {i} request {n}: {k!r} came back wrong")
                    return
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"client {i}: {e!r}")
        finally:
            c.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


def request_pipeline(kind: str, vals: dict[bytes, bytes]) -> tuple[bytes, bytes]:
    """The writes of `vals` in one pipeline, and the reply to each."""
    if kind == "redis":
        return (b"".join(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"
                         % (len(k), k, len(v), v) for k, v in vals.items()), b"+OK\r\n")
    return (b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v) for k, v in vals.items()),
            b"STORED\r\n")


@pytest.mark.parametrize("kind", ["redis", "memcache"])
def test_large_writes_to_a_stopped_backend_arrive_whole_and_in_order(procs, kind):
    """The backend is stopped while clients each send one large write (so
    it is the last of its client's input: written at once), and one client
    a pipeline of writes to one key: the proxy's socket to the backend
    fills, a write comes short, the rest is queued. Once the backend runs
    again every value it holds is the one sent, the pipeline's last write
    last."""
    backend, proxy = walnut_over(procs, kind, timeout=30000)
    sizes = [900 * 1024] * 14 + [9 * 1024, 100, 8 * 1024 - 1, 8 * 1024, 5, 300 * 1024]
    vals = {f"wr:{uuid.uuid4().hex[:10]}:{i}".encode(): os.urandom(n)
            for i, n in enumerate(sizes)}
    again = f"wr:{uuid.uuid4().hex[:10]}:again".encode()
    firsts = {again: os.urandom(800 * 1024)}
    lasts = {again: b"the last write"}
    jobs = [request_pipeline(kind, {k: v}) for k, v in vals.items()]
    pipe, ok = request_pipeline(kind, firsts)
    last, _ = request_pipeline(kind, lasts)
    jobs.append((pipe + last, ok * 2))
    # The proxy's connection to the backend is open before it stops (a
    # connection still opening queues everything).
    warm, warm_ok = request_pipeline(kind, {b"wr:warm": b"x"})
    with socket.create_connection((HOST, proxy.port()), timeout=10) as w:
        w.sendall(warm)
        assert read_exact(w, len(warm_ok)) == warm_ok
    socks = [socket.create_connection((HOST, proxy.port()), timeout=60) for _ in jobs]
    errors: list[BaseException] = []

    def send(sock: socket.socket, data: bytes) -> None:
        try:
            sock.sendall(data)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    stop_process(backend)
    senders = [threading.Thread(target=send, args=(sk, data)) for sk, (data, _) in zip(socks, jobs)]
    try:
        for t in senders:
            t.start()
        # Requests the socket did not take wait in the proxy's queue.
        wait_until(lambda: server_stat(proxy, "wt", "in_queue", backend.port) > 0, 30,
                   what="requests queued behind a full socket")
    finally:
        backend.signal(signal.SIGCONT)
    for t in senders:
        t.join(60)
    assert not any(t.is_alive() for t in senders) and errors == []
    for sk, (_, reply) in zip(socks, jobs):
        assert read_exact(sk, len(reply)) == reply
        sk.close()
    vals.update(lasts)
    if kind == "redis":
        direct = redis.Redis(host=HOST, port=backend.port)
        for k, v in vals.items():
            assert direct.get(k) == v, k
    else:
        direct = McClient((HOST, backend.port), timeout=10)
        for k, v in vals.items():
            assert direct.get(k.decode()) == v, k
        direct.close()
