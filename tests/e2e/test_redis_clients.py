"""Real Redis clients through the proxy with no special options: redis-py
(default RESP3 handshake and protocol=2), redis-cli (command and interactive
mode) and redis-benchmark; RESP3 replies for clients that chose RESP3."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
import uuid

import pytest
import redis

from procs import HOST, RawConn, redis_pool


@pytest.fixture(scope="module")
def backends(module_procs):
    return [module_procs.redis() for _ in range(2)]


@pytest.fixture(scope="module")
def proxy(module_procs, proxy_kind, backends):
    if proxy_kind != "walnut":
        pytest.skip("HELLO / RESP3 / CLIENT SETINFO need walnut")
    return module_procs.proxy(proxy_kind, {"beta": redis_pool(backends, hash_tag="{}")})


def uid(prefix: str = "c") -> str:
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


def spread_keys(n: int = 20) -> list[str]:
    return [uid(f"s{i}") for i in range(n)]


@pytest.mark.parametrize("protocol", [None, 2, 3])
def test_redis_py(proxy, protocol):
    kw = {} if protocol is None else {"protocol": protocol}
    r = redis.Redis(host=HOST, port=proxy.port(), socket_timeout=10, **kw)
    try:
        info = r.execute_command("CLIENT", "INFO").decode()
        assert "lib-name=redis-py" in info
        want = 2 if protocol == 2 else 3 if protocol == 3 else None
        if want is not None:
            assert f"resp={want}" in info
        h, z = uid("h"), uid("z")
        r.hset(h, mapping={"a": "1", "b": "2"})
        assert r.hgetall(h) == {b"a": b"1", b"b": b"2"}
        r.zadd(z, {"m": 1.5})
        assert r.zrange(z, 0, -1, withscores=True) in ([(b"m", 1.5)], [[b"m", 1.5]])
        assert r.zscore(z, "m") == 1.5
        keys = spread_keys()
        r.mset({k: k for k in keys[::2]})
        assert r.mget(keys) == [k.encode() if i % 2 == 0 else None for i, k in enumerate(keys)]
        assert r.client_getname() is None
        assert r.client_setname("app") is True and r.client_getname() in ("app", b"app")
        assert r.ping() is True and r.echo("hi") == b"hi"
    finally:
        r.close()


def test_resp3_replies_raw(proxy):
    with RawConn(proxy.port()) as c:
        h = uid("h")
        c.send(f"HSET {h} f v\r\n".encode())
        assert c.read_line() == b":1\r\n"
        c.send(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n")
        assert c.read_until(b"modules\r\n*0\r\n").startswith(b"%7\r\n")
        c.send(f"HGETALL {h}\r\n".encode())
        assert c.read_exactly(len(b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n")) == b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n"
        c.send(f"GET {uid()}\r\n".encode())
        assert c.read_line() == b"_\r\n"
        keys = spread_keys(6)
        c.send(f"SET {keys[0]} x\r\n".encode())
        assert c.read_line() == b"+OK\r\n"
        c.send(("MGET " + " ".join(keys) + "\r\n").encode())
        assert c.read_exactly(len(b"*6\r\n$1\r\nx\r\n" + b"_\r\n" * 5)) == b"*6\r\n$1\r\nx\r\n" + b"_\r\n" * 5
        c.send(b"ZADD " + h.encode() + b"z 1.5 m\r\nZSCORE " + h.encode() + b"z m\r\n")
        assert c.read_line() == b":1\r\n"
        assert c.read_line() == b",1.5\r\n"
        c.send(b"HELLO 2\r\n")
        assert c.read_until(b"modules\r\n*0\r\n").startswith(b"*14\r\n")
        c.send(f"HGETALL {h}\r\n".encode())
        assert c.read_exactly(len(b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n")) == b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
        c.send(("MGET " + " ".join(keys) + "\r\n").encode())
        want = b"*6\r\n$1\r\nx\r\n" + b"$-1\r\n" * 5
        assert c.read_exactly(len(want)) == want


def test_resp3_pipelined_protocol_switch(proxy):
    """Replies follow the protocol in force when each request was sent."""
    k = uid()
    with RawConn(proxy.port()) as c:
        c.send(f"GET {k}\r\nHELLO 3\r\nGET {k}\r\nHELLO 2\r\nGET {k}\r\n".encode())
        assert c.read_line() == b"$-1\r\n"
        c.read_until(b"modules\r\n*0\r\n")
        assert c.read_line() == b"_\r\n"
        c.read_until(b"modules\r\n*0\r\n")
        assert c.read_line() == b"$-1\r\n"


def test_resp3_refused_by_old_backend(procs, proxy_kind):
    """A backend without HELLO (Redis before 6; here a redis-server with
    HELLO renamed away) cannot give RESP3 replies: the first RESP3 client's
    requests fail with an error rather than getting RESP2-shaped replies,
    and from then on HELLO 3 gets -NOPROTO while RESP2 keeps working."""
    if proxy_kind != "walnut":
        pytest.skip("HELLO is walnut's")
    old = procs.redis(extra=["--rename-command", "HELLO", '""'])
    proxy = procs.proxy(proxy_kind, {"old": redis_pool([old])})
    k = uid()
    with RawConn(proxy.port()) as c:
        c.send(b"HELLO 3\r\n")
        assert c.read_until(b"modules\r\n*0\r\n").startswith(b"%7\r\n")
        c.send(f"GET {k}\r\n".encode())
        assert c.read_line() == b"-ERR server does not speak RESP3\r\n"
    with RawConn(proxy.port()) as c:
        c.send(b"HELLO 3\r\n")
        assert c.read_line() == b"-NOPROTO sorry, this protocol version is not supported.\r\n"
        c.send(f"SET {k} v\r\nGET {k}\r\n".encode())
        assert c.read_line() == b"+OK\r\n"
        assert c.read_line() == b"$1\r\n"
        assert c.read_line() == b"v\r\n"
    r = redis.Redis(host=HOST, port=proxy.port(), socket_timeout=10, protocol=2)
    try:
        assert r.get(k) == b"v"
    finally:
        r.close()


def cli(port: int, *args: str, input: bytes | None = None) -> str:
    out = subprocess.run(["redis-cli", "-p", str(port), *args], input=input,
                         capture_output=True, timeout=20, check=True)
    return out.stdout.decode()


def test_redis_cli_commands(proxy):
    port = proxy.port()
    k = uid()
    assert cli(port, "--no-raw", "set", k, "hello world") == "OK\n"
    assert cli(port, "--no-raw", "get", k) == '"hello world"\n'
    assert cli(port, "--no-raw", "mget", k, uid()) == '1) "hello world"\n2) (nil)\n'
    assert cli(port, "--no-raw", "incr", uid()) == "(integer) 1\n"
    assert cli(port, "--no-raw", "keys", "*").startswith("(error) ERR KEYS is refused by the proxy")
    h = uid("h")
    assert cli(port, "-3", "--no-raw", "hset", h, "f", "v") == "(integer) 1\n"
    assert cli(port, "-3", "--no-raw", "hgetall", h) == '1# "f" => "v"\n'
    assert cli(port, "-3", "--no-raw", "get", uid()) == "(nil)\n"
    assert cli(port, input=f"set {k} piped\nget {k}\n".encode()) == "OK\npiped\n"


def test_redis_cli_interactive(proxy):
    """Interactive mode (COMMAND DOCS at start, hints) works like against redis-server."""
    k = uid()
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe("redis-cli", ["redis-cli", "-p", str(proxy.port())], {**os.environ, "TERM": "dumb"})
    out = b""
    try:
        def expect(token: bytes, timeout: float = 10) -> None:
            nonlocal out
            deadline = time.monotonic() + timeout
            while token not in out:
                left = deadline - time.monotonic()
                assert left > 0, f"waiting for {token!r}, got {out[-500:]!r}"
                ready, _, _ = select.select([fd], [], [], left)
                if ready:
                    out += os.read(fd, 65536)
        expect(b"> ")
        os.write(fd, f"set {k} interactive\r".encode())
        expect(b"OK")
        os.write(fd, f"get {k}\r".encode())
        expect(b'"interactive"')
        os.write(fd, b"quit\r")
        _, status = os.waitpid(pid, 0)
        pid = 0
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        if pid:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)
    assert b"ERR" not in out, out


def test_redis_benchmark(proxy):
    out = subprocess.run(
        ["redis-benchmark", "-p", str(proxy.port()), "-n", "20000", "-q", "-t", "get,set,incr,lpush,mset"],
        capture_output=True, timeout=120, check=True,
    ).stdout.decode()
    lines = [ln.rsplit("\r", 1)[-1] for ln in out.splitlines() if "requests per second" in ln]
    names = [ln.split(":")[0].split(" ")[0] for ln in lines]
    assert names == ["SET", "GET", "INCR", "LPUSH", "MSET"], out
