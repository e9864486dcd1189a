"""Redis commands routed as redis-server (and predixy) users expect,
checked against redis-server 7 directly and nutcracker side by side:
keyless EVAL and TIME go to one server (`keyless_server`), SCRIPT LOAD
reaches every server, MSETNX works when its keys share a server, MEMORY
USAGE is routed by its key, and a split DEL whose fragment fails answers
the failing server's own error."""

from __future__ import annotations

import uuid

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from procs import HOST, RawConn, free_port, redis_cli, redis_pool


def resp(*args: str) -> bytes:
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a.encode())
    return out


def client(port: int) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, retry=Retry(NoBackoff(), 0), socket_timeout=10)


@pytest.fixture
def two(procs):
    backends = [procs.redis(), procs.redis()]
    for i, b in enumerate(backends):
        client(b.port).set("marker", f"s{i}")
    return backends


def marker_script(r: redis.Redis) -> bytes:
    return r.eval("return redis.call('get', 'marker')", 0)


def test_keyless_eval_and_time_go_to_the_first_server(procs, two):
    p = procs.proxy("walnut", {"rp": redis_pool(two)})
    r = client(p.port())
    assert {marker_script(r) for _ in range(10)} == {b"s0"}
    secs, micros = r.time()
    assert secs > 1_600_000_000 and micros >= 0


def test_keyless_random_spreads_and_script_load_reaches_every_server(procs, two):
    p = procs.proxy("walnut", {"rp": redis_pool(two, keyless_server="random")})
    r = client(p.port())
    assert {marker_script(r) for _ in range(60)} == {b"s0", b"s1"}
    sha = r.script_load("return redis.call('get', 'marker')")
    assert sha == client(two[0].port).script_load("return redis.call('get', 'marker')")
    for b in two:
        assert client(b.port).script_exists(sha) == [True]
    assert {r.evalsha(sha, 0) for _ in range(60)} == {b"s0", b"s1"}
    assert r.script_flush() is True
    for b in two:
        assert client(b.port).script_exists(sha) == [False]
    with pytest.raises(redis.ResponseError, match="SCRIPT KILL"):
        r.script_kill()


def test_bad_keyless_server_value_is_a_config_error(procs, two):
    with pytest.raises(RuntimeError, match="keyless_server"):
        procs.proxy("walnut", {"rp": redis_pool(two, keyless_server="last")})


def test_msetnx_on_one_server_as_redis_server(procs, two):
    p = procs.proxy("walnut", {"rp": redis_pool(two, hash_tag="{}")})
    r, direct = client(p.port()), client(two[0].port)
    tag = uuid.uuid4().hex[:8]
    a, b, c = (f"{{{tag}}}.{n}" for n in "abc")
    for target in (direct, r):
        assert target.msetnx({a: "1", b: "2"}) is True
        assert target.msetnx({a: "9", c: "3"}) is False
        assert target.mget([a, b, c]) == [b"1", b"2", None]
        target.delete(a, b, c)
    # Keys on different servers: refused, nothing set.
    keys = [f"spread-{uuid.uuid4().hex}" for _ in range(40)]
    with pytest.raises(redis.ResponseError, match="MSETNX keys must all map to one server"):
        r.msetnx({k: "v" for k in keys})
    assert r.exists(*keys) == 0
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        r.execute_command("MSETNX", "a")


def test_memory_usage_routed_by_key(procs, two):
    p = procs.proxy("walnut", {"rp": redis_pool(two)})
    r = client(p.port())
    for i in range(6):
        k = f"mem-{uuid.uuid4().hex}"
        r.set(k, "x" * 100)
        owner = [b for b in two if client(b.port).exists(k)]
        assert len(owner) == 1
        assert r.memory_usage(k) == client(owner[0].port).memory_usage(k)
    assert r.memory_usage("mem-none") is None
    with pytest.raises(redis.ResponseError, match="MEMORY DOCTOR"):
        r.execute_command("MEMORY", "DOCTOR")


def test_split_del_with_a_failing_fragment(procs, two):
    """walnut answers the failing server's own error (what redis-server
    answers for a key on it); nutcracker answers `ERR Invalid argument`.
    Either way the fragment on the healthy server is applied."""
    pools = {"rp": redis_pool(two)}
    walnut = procs.proxy("walnut", pools)
    nutcracker = procs.proxy("nutcracker", pools)
    r = client(walnut.port())
    keys = [f"del-{uuid.uuid4().hex}" for _ in range(40)]
    readonly, healthy = two
    on_readonly = [k for k in keys if r.set(k, "v") and client(readonly.port).exists(k)]
    on_healthy = [k for k in keys if k not in on_readonly]
    assert on_readonly and on_healthy
    # A replica refuses writes: it points at a port where nothing listens.
    redis_cli(readonly.port, "REPLICAOF", HOST, str(free_port()))
    try:
        with pytest.raises(redis.ResponseError) as direct_err:
            client(readonly.port).delete(on_readonly[0])
        for cmd in ("DEL", "UNLINK"):
            with pytest.raises(redis.ResponseError) as through:
                r.execute_command(cmd, *keys)
            assert type(through.value) is type(direct_err.value) is redis.exceptions.ReadOnlyError
            assert str(through.value) == str(direct_err.value)
        # (nutcracker 0.5 has no UNLINK: it closes the connection.)
        with RawConn(nutcracker.port()) as c:
            assert c.request(resp("DEL", *keys)) == b"-ERR Invalid argument\r\n"
        with RawConn(walnut.port()) as c:
            assert c.request(resp("DEL", *keys)).startswith(b"-READONLY ")
        assert r.exists(*on_healthy) == 0, "the healthy fragment was applied"
        assert r.exists(*on_readonly) == len(on_readonly)
    finally:
        redis_cli(readonly.port, "REPLICAOF", "NO", "ONE")


def test_a_command_whose_keys_live_on_two_servers_is_refused(procs, two):
    """A command naming several keys runs on one server, which sees only
    its own: COPY to a key of the other server, BITOP over keys it does not
    hold or a two-key EVAL would answer wrongly without an error. walnut
    refuses it, as a Redis Cluster node answers CROSSSLOT; hash tags keep
    such keys together."""
    p = procs.proxy("walnut", {"rp": redis_pool(two, hash_tag="{}")})
    r = client(p.port("rp"))
    owner: dict[int, str] = {}
    for i in range(400):
        k = f"apart:{uuid.uuid4().hex}"
        r.set(k, "v")
        port = next(s.port for s in two if redis.Redis(host=HOST, port=s.port).exists(k))
        owner.setdefault(port, k)
        if len(owner) == 2:
            break
    a, b = owner.values()
    for cmd in (["COPY", a, b], ["RENAME", a, b], ["SUNIONSTORE", a, a, b], ["BITOP", "AND", a, a, b],
                ["EVAL", "return 1", "2", a, b], ["LCS", a, b]):
        with pytest.raises(redis.ResponseError, match="keys must all map to one server"):
            r.execute_command(*cmd)
    # Nothing was changed on either server.
    assert r.get(a) == b"v" and r.get(b) == b"v"
    # Keys of one hash tag are on one server: the same commands run.
    r.set("{t}a", "x")
    assert r.execute_command("COPY", "{t}a", "{t}b") == 1
    assert r.get("{t}b") == b"x"
    assert r.execute_command("EVAL", "return #KEYS", "2", "{t}a", "{t}b") == 2
