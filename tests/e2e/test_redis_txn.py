"""Redis transactions through walnut over three servers: MULTI/EXEC on a
server connection pinned to the client, chosen by the first key; WATCH
conflicts seen; a key of another server refused and the transaction
aborted (hash tags keep keys together); DISCARD; the pinned connection
closed once the transaction ends."""

from __future__ import annotations

import hashlib

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from procs import HOST, RawConn, redis_pool, wait_until


def client(port: int, protocol: int = 2) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, protocol=protocol, retry=Retry(NoBackoff(), 0),
                       socket_timeout=10)


@pytest.fixture
def pool(procs):
    servers = [procs.redis() for _ in range(3)]
    p = procs.proxy("walnut", {"rd": redis_pool(servers, hash_tag="{}")},
                    extra_args=["--workers", "1"])
    return p, servers


def connected(servers) -> int:
    return sum(redis.Redis(host=HOST, port=s.port).info("clients")["connected_clients"]
               for s in servers)


@pytest.mark.parametrize("protocol", [2, 3])
def test_multi_exec_on_one_server(pool, protocol):
    p, servers = pool
    r = client(p.port("rd"), protocol)
    r.set("{u1}n", 1)  # the shared connection exists before the count
    base = connected(servers)
    pipe = r.pipeline(transaction=True)
    pipe.set("{u1}a", "x").incr("{u1}n").get("{u1}a").lpush("{u1}l", "v")
    assert pipe.execute() == [True, 2, b"x", 1]
    # The pinned connection is gone once EXEC is answered.
    wait_until(lambda: connected(servers) == base, 10, what="the pinned connection closed")
    assert r.get("{u1}n") == b"2"


def test_watch_sees_a_conflict(pool):
    p, _ = pool
    r, other = client(p.port("rd")), client(p.port("rd"))
    r.set("{w}k", "1")
    with r.pipeline(transaction=True) as pipe:
        pipe.watch("{w}k")
        assert pipe.get("{w}k") == b"1"
        other.set("{w}k", "changed")  # another client, between WATCH and EXEC
        pipe.multi()
        pipe.set("{w}k", "mine")
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert r.get("{w}k") == b"changed"
    # Without a conflict the same goes through.
    with r.pipeline(transaction=True) as pipe:
        pipe.watch("{w}k")
        pipe.multi()
        pipe.set("{w}k", "mine")
        assert pipe.execute() == [True]
    assert r.get("{w}k") == b"mine"


def test_a_key_of_another_server_aborts_the_transaction(pool):
    p, servers = pool
    r = client(p.port("rd"))
    # Two keys on different servers (nutcracker's placement: find a pair).
    direct = [redis.Redis(host=HOST, port=s.port) for s in servers]
    r.set("probe-a", 1)
    home = next(i for i, d in enumerate(direct) if d.exists("probe-a"))
    other = None
    for i in range(100):
        k = "p" + hashlib.sha1(str(i).encode()).hexdigest()[:12]
        r.set(k, 1)
        if not direct[home].exists(k):
            other = k
            break
    assert other is not None
    pipe = r.pipeline(transaction=True)
    pipe.set("probe-a", "2").set(other, "2")
    with pytest.raises((redis.exceptions.ExecAbortError, redis.ResponseError)):
        pipe.execute()
    # Nothing of it applied.
    assert r.get("probe-a") == b"1" and r.get(other) == b"1"
    # The client goes on normally.
    assert r.set("after", "ok") and r.get("after") == b"ok"


def test_discard_and_errors_like_redis(pool):
    p, _ = pool
    with RawConn(p.port("rd")) as c:
        def call(*args: str) -> bytes:
            req = b"*%d\r\n" % len(args) + b"".join(
                b"$%d\r\n%s\r\n" % (len(a), a.encode()) for a in args)
            return c.request(req)
        assert call("MULTI") == b"+OK\r\n"
        assert call("SET", "{d}k", "v") == b"+QUEUED\r\n"
        assert call("DISCARD") == b"+OK\r\n"
        assert call("GET", "{d}k") == b"$-1\r\n"
        assert call("EXEC") == b"-ERR EXEC without MULTI\r\n"
        assert call("DISCARD") == b"-ERR DISCARD without MULTI\r\n"
        assert call("MULTI") == b"+OK\r\n"
        assert call("MULTI") == b"-ERR MULTI calls can not be nested\r\n"
        assert call("EXEC") == b"*0\r\n"
        # A command refused while queueing aborts the transaction, as in Redis.
        assert call("MULTI") == b"+OK\r\n"
        assert call("SET", "{d}k", "1") == b"+QUEUED\r\n"
        assert call("NOSUCHCMD").startswith(b"-ERR unknown command")
        assert call("EXEC").startswith(b"-EXECABORT")
        assert call("GET", "{d}k") == b"$-1\r\n"


def test_a_transaction_whose_server_connection_is_lost_closes_its_client(procs):
    """The pinned connection times out inside MULTI (its server is paused):
    the server's MULTI state is gone with it, so the client gets the error
    for the request in flight and is then closed, instead of waiting for
    ever on a connection that no longer exists (or running its next
    commands outside the transaction it believes it is in)."""
    server = procs.redis()
    p = procs.proxy("walnut", {"rd": redis_pool([server], timeout=500)}, extra_args=["--workers", "1"])
    direct = redis.Redis(host=HOST, port=server.port)
    with RawConn(p.port("rd"), timeout=10) as c:
        assert c.request(b"*1\r\n$5\r\nMULTI\r\n", b"\r\n") == b"+OK\r\n"
        direct.execute_command("CLIENT", "PAUSE", "3000", "ALL")
        try:
            got = c.request(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", b"\r\n")
            assert got.startswith(b"-ERR") and b"timed out" in got, got
            # The connection is closed: a PING gets no reply, and no hang.
            c.sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            try:
                rest = c.sock.recv(100)
            except ConnectionResetError:
                rest = b""
            assert rest == b"", rest
        finally:
            direct.execute_command("CLIENT", "UNPAUSE")
    # Other clients are served, and nothing of the transaction was applied.
    r = client(p.port("rd"))
    assert r.ping() is True
    assert r.get("k") is None
