"""memcached replies read a batch at a time (worker/read_batch.rs): with
many replies owed on a server connection, walnut asks the kernel to report
it readable only once enough bytes for them are queued (SO_RCVLOWAT). No
reply may wait on that: replies under the mark from a server that stops
part-way reach the client anyway, and busy pipelining clients get every
reply, in order, with hits and misses of every size."""

from __future__ import annotations

import random
import socket
import threading
import time

from procs import HOST, RawConn, free_port, memcache_pool


class StallingServer:
    """A scripted memcached on a free port: once it has read `lines`
    request lines from its one connection, it sends `first`, then, once
    `first_read` is set, `second`, sets `second_sent` and answers nothing
    more. Stopped (its sockets closed, its thread joined) on exit."""

    def __init__(self, lines: int, first: bytes, second: bytes):
        self.lines, self.first, self.second = lines, first, second
        self.port = free_port()
        self.address = f"{HOST}:{self.port}"
        self.first_read = threading.Event()
        self.second_sent = threading.Event()
        self.done = threading.Event()
        self.conns: list[socket.socket] = []
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((HOST, self.port))
        self.listener.listen(4)
        self.thread = threading.Thread(target=self.serve, daemon=True)

    def serve(self) -> None:
        self.listener.settimeout(20)
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        self.conns.append(conn)
        got = b""
        while got.count(b"\r\n") < self.lines:
            chunk = conn.recv(65536)
            if not chunk:
                return
            got += chunk
        conn.sendall(self.first)
        if not self.first_read.wait(10):
            return
        conn.sendall(self.second)
        self.second_sent.set()
        self.done.wait(30)

    def __enter__(self) -> "StallingServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        for conn in self.conns:
            conn.close()
        self.listener.close()
        self.thread.join(5)


def test_replies_under_the_mark_from_a_stalled_server_still_arrive(procs):
    """A scripted memcached answers 4 of 200 pipelined gets, then 2 more
    once the proxy has read the first 4 (and set its mark, 512 bytes, for
    the 196 still owed), then stops answering: the 2 are fewer bytes than
    the mark, and must reach the client all the same, long before the
    pool's timeout."""
    with StallingServer(200, b"END\r\n" * 4, b"END\r\n" * 2) as server:
        p = procs.proxy("walnut", {"m": memcache_pool([server], timeout=20000)},
                        extra_args=["--workers", "1"])
        with RawConn(p.port("m"), timeout=10) as c:
            c.send(b"".join(b"get k%d\r\n" % i for i in range(200)))
            for _ in range(4):
                assert c.read_line(timeout=5) == b"END\r\n"
            server.first_read.set()
            assert server.second_sent.wait(5)
            sent_at = time.monotonic()
            for _ in range(2):
                assert c.read_line(timeout=5) == b"END\r\n"
            waited = time.monotonic() - sent_at
            # READ_WAIT is 1 ms; the pool's timeout, 20 s.
            assert waited < 1.0, waited


def test_misses_after_a_run_of_large_hits_still_arrive(procs):
    """The mark counts each owed reply for half the shortest reply seen
    lately: after 100 hits of 1 KB, the 1,100 gets still owed are counted
    for ~500 bytes each (a 16 KB mark). A scripted memcached then answers
    them all with misses (5,500 bytes in all, under the mark) and stops:
    they must reach the client all the same, long before the pool's
    timeout, in order."""
    total, hits = 1200, 100
    value = b"v" * 1000
    hit = b"VALUE k%d 0 %d\r\n%s\r\nEND\r\n"
    first = b"".join(hit % (i, len(value), value) for i in range(hits))
    with StallingServer(total, first, b"END\r\n" * (total - hits)) as server:
        p = procs.proxy("walnut", {"m": memcache_pool([server], timeout=20000)},
                        extra_args=["--workers", "1"])
        with RawConn(p.port("m"), timeout=10) as c:
            c.send(b"".join(b"get k%d\r\n" % i for i in range(total)))
            for i in range(hits):
                assert c.read_until(b"END\r\n", timeout=5) == hit % (i, len(value), value)
            server.first_read.set()
            assert server.second_sent.wait(5)
            sent_at = time.monotonic()
            for _ in range(total - hits):
                assert c.read_line(timeout=5) == b"END\r\n"
            waited = time.monotonic() - sent_at
            # READ_WAIT is 1 ms; the pool's timeout, 20 s.
            assert waited < 1.0, waited


def test_busy_pipelining_clients_get_every_reply(procs):
    """4 persistent clients pipeline batches of 1 to 64 gets of hits and
    misses (values up to 4 KB) over two memcached, 120 batches each; every
    reply is checked, in order."""
    mcs = procs.memcacheds(2)
    p = procs.proxy("walnut", {"m": memcache_pool(mcs)}, extra_args=["--workers", "1"])
    rng = random.Random(7)
    values = {f"k{i}".encode(): bytes(rng.choice(b"abcdef") for _ in range(rng.choice(
        [1, 10, 100, 1000, 4000]))) for i in range(300)}
    with RawConn(p.port("m"), timeout=10) as c:
        for k, v in values.items():
            c.send(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v))
            assert c.read_line() == b"STORED\r\n"
    errors: list[str] = []

    def client(seed: int) -> None:
        r = random.Random(seed)
        try:
            with RawConn(p.port("m"), timeout=10) as c:
                for _ in range(120):
                    keys = [f"k{r.randrange(400)}".encode() for _ in range(r.randint(1, 64))]
                    c.send(b"".join(b"get %s\r\n" % k for k in keys))
                    for k in keys:
                        v = values.get(k)
                        want = (b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, len(v), v)
                                if v is not None else b"END\r\n")
                        got = c.read_until(b"END\r\n")
                        if got != want:
                            errors.append(f"{k!r}: {got[:80]!r}")
                            return
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
