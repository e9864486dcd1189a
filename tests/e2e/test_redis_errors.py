"""Redis through the proxy when things go wrong or get busy: malformed RESP,
AUTH, redis_db, dead and stopped backends, split requests with a failed
fragment, deep pipelines over several server connections, many clients."""

from __future__ import annotations

import signal
import socket
import threading
import uuid

import pytest
import redis

from procs import HOST, RawConn, redis_pool


@pytest.fixture(autouse=True)
def walnut_only(proxy_kind):
    if proxy_kind != "walnut":
        pytest.skip("walnut's replies and RESP3 handshake")


def uid(prefix: str = "e") -> str:
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


def client(port: int, **kw) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, socket_timeout=10, **kw)


class Dead:
    """A backend address nothing listens on: the port stays bound (without
    listen) for the test, so no other process can take it."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((HOST, 0))
        self.port = self.sock.getsockname()[1]
        self.address = f"{HOST}:{self.port}"


@pytest.fixture
def dead():
    d = Dead()
    yield d
    d.sock.close()


@pytest.fixture(scope="module")
def backends(module_procs):
    return [module_procs.redis() for _ in range(3)]


@pytest.fixture(scope="module")
def proxy(module_procs, proxy_kind, backends):
    return module_procs.proxy(proxy_kind, {"beta": redis_pool(backends, server_connections=4)})


MALFORMED = [
    (b"*2\r\n$3\r\nGET\r\n:1\r\n", b"-ERR Protocol error: expected '$', got ':'\r\n"),
    (b"*-5\r\n*1\r\n$x\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n$-3\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*abc\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
    (b"*99999999999\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
    (b"*1\r\n$99999999999999\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n$1x\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*" + b"7" * 70000, b"-ERR Protocol error: too big mbulk count string\r\n"),
    (b"*1\r\n$" + b"7" * 70000, b"-ERR Protocol error: too big bulk count string\r\n"),
    (b"*1\r\n7\r\n", b"-ERR Protocol error: expected '$', got '7'\r\n"),
    (b"GET \"unbalanced\r\n", b"-ERR Protocol error: unbalanced quotes in request\r\n"),
    (b"\x00\x01garbage" * 10000, b"-ERR Protocol error: too big inline request\r\n"),
]


@pytest.mark.parametrize("data,reply", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_resp_closes_with_protocol_error(proxy, data, reply):
    with client(proxy.port(), protocol=2) as other:
        k = uid()
        other.set(k, "before")
        with RawConn(proxy.port()) as c:
            c.send(b"PING\r\n")
            assert c.read_line() == b"+PONG\r\n"
            c.send(data)
            assert c.read_line() == reply
            assert c.is_closed()
        assert other.get(k) == b"before"
    with RawConn(proxy.port()) as c:
        assert c.request(b"*1\r\n$4\r\nPING\r\n") == b"+PONG\r\n"


def test_deep_pipeline_many_server_connections(proxy, backends):
    """2000 commands in one pipeline, read-your-writes, with server_connections: 4."""
    clients = [client(proxy.port()) for _ in range(6)]
    try:
        for c in clients:
            keys = [uid(f"p{i}") for i in range(400)]
            p = c.pipeline(transaction=False)
            for i, k in enumerate(keys):
                p.set(k, i)
                p.incr(k)
                p.append(k, "x")
                p.get(k)
                p.mget([k, keys[i - 1]])
            out = p.execute()
            assert len(out) == 2000
            for i in range(400):
                prev = str(i).encode() + b"x" if i else None
                assert out[5 * i: 5 * i + 5] == [True, i + 1, len(str(i + 1)) + 1,
                                                 str(i + 1).encode() + b"x", [str(i + 1).encode() + b"x", prev]]
    finally:
        for c in clients:
            c.close()


def test_300_concurrent_clients(proxy):
    errors: list[str] = []

    def run(n: int) -> None:
        try:
            with client(proxy.port(), protocol=2 if n % 2 else 3) as c:
                for j in range(20):
                    k = f"cc:{n}:{j}"
                    c.set(k, f"{n}-{j}")
                    if c.get(k) != f"{n}-{j}".encode():
                        errors.append(f"{k} mismatch")
                if c.mget([f"cc:{n}:{j}" for j in range(20)]) != [f"{n}-{j}".encode() for j in range(20)]:
                    errors.append(f"mget {n} mismatch")
        except Exception as e:  # noqa: BLE001 - collected and reported
            errors.append(f"{n}: {e!r}")

    threads = [threading.Thread(target=run, args=(n,)) for n in range(300)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:10]


def test_auth(procs):
    backends = [procs.redis(extra=["--requirepass", "s3cret"]) for _ in range(2)]
    p = procs.proxy("walnut", {"beta": redis_pool(backends, redis_auth="s3cret")})
    with RawConn(p.port()) as c:
        assert c.request(b"GET foo\r\n") == b"-NOAUTH Authentication required\r\n"
        assert c.request(b"AUTH wrong\r\n") == b"-ERR invalid password\r\n"
        assert c.request(b"GET foo\r\n") == b"-NOAUTH Authentication required\r\n"
        assert c.request(b"AUTH s3cret\r\n") == b"+OK\r\n"
        assert c.request(b"SET foo bar\r\n") == b"+OK\r\n"
        assert c.request(b"GET foo\r\n", b"bar\r\n") == b"$3\r\nbar\r\n"
    with client(p.port(), password="s3cret") as r:
        keys = [uid() for _ in range(20)]
        r.mset({k: "1" for k in keys})
        assert r.exists(*keys) == 20
    with pytest.raises(redis.AuthenticationError):
        client(p.port(), password="nope").ping()


PRE_AUTH = [
    b"*11\r\n",
    b"*1\r\n$16385\r\n",
    b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000000\r\n",
]


@pytest.mark.parametrize("data", PRE_AUTH, ids=range(len(PRE_AUTH)))
def test_pre_auth_limits_as_redis_server(procs, data):
    """Before AUTH, redis-server reads at most 10 arguments and bulk strings
    of at most 16384 bytes: walnut answers such input as a password-protected
    redis-server does, byte for byte, and closes, so an unauthenticated peer
    cannot make it buffer a large request."""
    backend = procs.redis(extra=["--requirepass", "s3cret"])
    p = procs.proxy("walnut", {"beta": redis_pool([backend], redis_auth="s3cret")})
    replies = []
    for port in (backend.port, p.port()):
        with RawConn(port) as c:
            c.send(data)
            replies.append(c.read_line())
            assert c.is_closed()
    assert replies[0].startswith(b"-ERR Protocol error: unauthenticated")
    assert replies[1] == replies[0]
    # Authenticated, the same sizes pass.
    with RawConn(p.port()) as c:
        assert c.request(b"AUTH s3cret\r\n") == b"+OK\r\n"
        value = b"v" * 20000
        req = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$20000\r\n" + value + b"\r\n"
        assert c.request(req) == b"+OK\r\n"
        assert c.request(b"STRLEN k\r\n") == b":20000\r\n"


def test_redis_db_selects_on_backends(procs):
    backends = [procs.redis() for _ in range(2)]
    p = procs.proxy("walnut", {"beta": redis_pool(backends, redis_db=2)})
    keys = [uid() for _ in range(10)]
    with client(p.port()) as r, client(p.port(), protocol=2) as r2:
        r.mset({k: "db2" for k in keys[:5]})
        r2.mset({k: "db2" for k in keys[5:]})
        assert r.mget(keys) == [b"db2"] * 10
    counts = {}
    for db in (0, 2):
        counts[db] = 0
        for b in backends:
            with client(b.port, db=db, protocol=2) as d:
                counts[db] += d.exists(*keys)
    db0, db2 = counts[0], counts[2]
    assert (db2, db0) == (10, 0)


def test_backend_down_is_connection_refused(procs, dead):
    p = procs.proxy("walnut", {"beta": redis_pool([dead])})
    with RawConn(p.port()) as c:
        assert c.request(b"GET k\r\n") == b"-ERR Connection refused\r\n"
        assert c.request(b"MGET a b c\r\n") == b"-ERR Connection refused\r\n"
        assert c.request(b"PING\r\n") == b"+PONG\r\n"


def test_failed_fragment_is_an_error_not_partial(procs, dead):
    live = procs.redis()
    p = procs.proxy("walnut", {"beta": redis_pool([live, dead])})
    keys = [uid("frag") for _ in range(40)]  # random: similar keys hash alike under fnv1a_64
    with client(p.port(), protocol=2) as r:
        for cmd in (("MGET", *keys), ("DEL", *keys), ("EXISTS", *keys),
                    ("MSET", *[x for k in keys for x in (k, "v")])):
            with pytest.raises(redis.ResponseError, match="^Connection refused$"):
                r.execute_command(*cmd)
        assert r.ping() is True


def test_stopped_backend_times_out(procs):
    backends = [procs.redis() for _ in range(2)]
    p = procs.proxy("walnut", {"beta": redis_pool(backends, timeout=200)})
    with client(p.port(), protocol=2) as r:
        keys = [uid() for _ in range(20)]
        r.mset({k: "1" for k in keys})
        stopped = backends[0]
        stopped.signal(signal.SIGSTOP)
        try:
            with client(backends[1].port, protocol=2) as other:
                on_stopped = [k for k in keys if other.exists(k) == 0]
            assert on_stopped
            with RawConn(p.port()) as c:
                assert c.request(f"GET {on_stopped[0]}\r\n".encode(), timeout=5) == \
                    b"-ERR Connection timed out\r\n"
                c.send(("MGET " + " ".join(keys) + "\r\n").encode())
                assert c.read_line(timeout=5) == b"-ERR Connection timed out\r\n"
        finally:
            stopped.signal(signal.SIGCONT)
