"""Every Redis data type through the proxy, over three redis-server backends.

The client is redis-py with its default settings (HELLO 3 and CLIENT SETINFO
on connect, RESP3 replies). Commands that take several keys use hash tags so
their keys live on one server; placement is checked by asking the backends.
"""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from procs import HOST, redis_pool


@pytest.fixture(scope="module")
def backends(module_procs):
    return [module_procs.redis() for _ in range(3)]


@pytest.fixture(scope="module")
def proxy(module_procs, proxy_kind, backends):
    if proxy_kind != "walnut":
        pytest.skip("RESP3 clients (HELLO 3) need walnut")
    return module_procs.proxy(proxy_kind, {"beta": redis_pool(backends, hash_tag="{}")})


@pytest.fixture
def r(proxy):
    c = redis.Redis(host=HOST, port=proxy.port(), socket_timeout=10)
    yield c
    c.close()


@pytest.fixture
def direct(backends):
    cs = [redis.Redis(host=HOST, port=b.port, socket_timeout=10, protocol=2) for b in backends]
    yield cs
    for c in cs:
        c.close()


def uid(prefix: str = "t") -> str:
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


def tagged(n: int) -> list[str]:
    """``n`` keys sharing one hash tag (one server)."""
    tag = uuid.uuid4().hex[:10]
    return [f"k{i}:{{{tag}}}" for i in range(n)]


def holders(direct, keys) -> set[int]:
    """Indices of the backends holding any of ``keys``."""
    return {i for i, d in enumerate(direct) if any(d.exists(k) for k in keys)}


def test_strings(r):
    k = uid()
    assert r.set(k, "hello") is True
    assert r.append(k, " world") == 11
    assert r.strlen(k) == 11
    assert r.getrange(k, 0, 4) == b"hello"
    assert r.setrange(k, 6, "WORLD") == 11
    assert r.get(k) == b"hello WORLD"
    assert r.getset(k, "x") == b"hello WORLD"
    assert r.set(k, "y", nx=True) is None
    assert r.set(k, "y", xx=True, get=True) == b"x"
    n = uid()
    assert r.incr(n) == 1 and r.incrby(n, 10) == 11 and r.decr(n) == 10
    assert r.decrby(n, 3) == 7
    assert r.incrbyfloat(n, 0.5) == 7.5
    assert r.setnx(uid(), "1") is True
    e = uid()
    assert r.execute_command("SETEX", e, 100, "v") and 0 < r.ttl(e) <= 100
    assert r.execute_command("PSETEX", e, 100000, "v") and 0 < r.pttl(e) <= 100000
    a, b = tagged(2)
    r.set(a, "ohmytext")
    r.set(b, "mynewtext")
    assert r.lcs(a, b) == b"mytext"


def test_getdel_getex(r):
    k = uid()
    r.set(k, "v")
    assert r.getex(k, ex=50) == b"v" and 0 < r.ttl(k) <= 50
    assert r.getex(k, persist=True) == b"v" and r.ttl(k) == -1
    assert r.getdel(k) == b"v"
    assert r.get(k) is None and r.getdel(k) is None


def test_hashes(r):
    h = uid("h")
    assert r.hset(h, mapping={"a": "1", "b": "2", "c": "x"}) == 3
    assert r.hget(h, "a") == b"1"
    assert r.hmget(h, ["a", "zz", "b"]) == [b"1", None, b"2"]
    assert r.hgetall(h) == {b"a": b"1", b"b": b"2", b"c": b"x"}
    assert r.hincrby(h, "a", 5) == 6
    assert r.hincrbyfloat(h, "b", 1.5) == 3.5
    assert sorted(r.hkeys(h)) == [b"a", b"b", b"c"]
    assert sorted(r.hvals(h)) == [b"3.5", b"6", b"x"]
    assert r.hlen(h) == 3 and r.hexists(h, "c") and not r.hexists(h, "q")
    assert r.hsetnx(h, "c", "y") == 0 and r.hstrlen(h, "c") == 1
    assert r.hrandfield(h) in (b"a", b"b", b"c")
    cursor, found = r.hscan(h, 0, count=100)
    assert cursor == 0 and len(found) == 3
    assert r.hdel(h, "a", "b", "nope") == 2
    assert r.hgetall(h) == {b"c": b"x"}
    assert r.hgetall(uid("h")) == {}


def test_lists(r):
    lst = uid("l")
    assert r.rpush(lst, "a", "b", "c") == 3
    assert r.lpush(lst, "z") == 4
    assert r.lrange(lst, 0, -1) == [b"z", b"a", b"b", b"c"]
    assert r.lindex(lst, 1) == b"a"
    assert r.linsert(lst, "BEFORE", "b", "a") == 5
    assert r.lpos(lst, "a") == 1
    assert r.lpos(lst, "a", count=0) == [1, 2]
    assert r.lpos(lst, "nope") is None
    assert r.lset(lst, 0, "Z") is True
    assert r.lrem(lst, 0, "a") == 2
    assert r.llen(lst) == 3
    assert r.rpop(lst, 2) == [b"c", b"b"]
    assert r.lpop(lst) == b"Z" and r.lpop(lst) is None
    r.rpush(lst, *"123456")
    assert r.ltrim(lst, 1, 3) is True and r.lrange(lst, 0, -1) == [b"2", b"3", b"4"]
    src, dst = tagged(2)
    r.rpush(src, "a", "b", "c")
    assert r.lmove(src, dst, "LEFT", "RIGHT") == b"a"
    assert r.rpoplpush(src, dst) == b"c"
    assert r.lrange(dst, 0, -1) == [b"c", b"a"]
    assert r.lmpop(2, src, dst, direction="LEFT") == [src.encode(), [b"b"]]


def test_sets(r, direct):
    s = uid("s")
    assert r.sadd(s, "a", "b", "c") == 3
    assert r.smembers(s) == {b"a", b"b", b"c"}
    assert r.sismember(s, "a") and not r.sismember(s, "z")
    assert r.smismember(s, ["a", "z"]) == [1, 0]
    assert r.scard(s) == 3 and r.srem(s, "c") == 1
    assert r.spop(s) in (b"a", b"b") and r.srandmember(s) in (b"a", b"b")
    a, b, out = tagged(3)
    r.sadd(a, 1, 2, 3)
    r.sadd(b, 2, 3, 4)
    assert r.sinter(a, b) == {b"2", b"3"}
    assert r.sunion(a, b) == {b"1", b"2", b"3", b"4"}
    assert r.sdiff(a, b) == {b"1"}
    assert r.sinterstore(out, [a, b]) == 2
    assert r.sintercard(2, [a, b]) == 2
    assert r.smove(a, b, 1) is True and r.scard(b) == 4
    cursor, found = r.sscan(b, 0, count=100)
    assert cursor == 0 and len(found) == 4
    assert len(holders(direct, [a, b, out])) == 1


def test_sorted_sets(r):
    z = uid("z")
    assert r.zadd(z, {"a": 1, "b": 2, "c": 3.5}) == 3
    assert r.zscore(z, "c") == 3.5
    assert r.zincrby(z, 2, "a") == 3.0
    assert r.zrange(z, 0, -1) == [b"b", b"a", b"c"]
    assert r.zrange(z, 0, -1, withscores=True) == [(b"b", 2.0), (b"a", 3.0), (b"c", 3.5)]
    assert r.zrangebyscore(z, 2.5, "+inf") == [b"a", b"c"]
    assert r.zrevrange(z, 0, 0) == [b"c"]
    assert r.zrank(z, "a") == 1 and r.zrevrank(z, "a") == 1
    assert r.zcount(z, "-inf", 3) == 2 and r.zcard(z) == 3
    assert r.zmscore(z, ["a", "nope"]) == [3.0, None]
    assert r.zlexcount(z, "-", "+") == 3
    assert r.zpopmin(z) == [(b"b", 2.0)]
    assert r.zrem(z, "a") == 1
    a, b, out = tagged(3)
    r.zadd(a, {"x": 1, "y": 2})
    r.zadd(b, {"y": 10, "w": 5})
    assert r.zunionstore(out, [a, b]) == 3
    assert r.zscore(out, "y") == 12.0
    assert r.zinterstore(out, [a, b]) == 1
    assert r.zrangestore(out, a, 0, 0) == 1
    assert r.zinter([a, b], withscores=True) == [(b"y", 12.0)]


def test_hyperloglog(r):
    a, b, m = tagged(3)
    assert r.pfadd(a, *[f"x{i}" for i in range(100)]) == 1
    assert r.pfadd(b, *[f"x{i}" for i in range(50, 200)]) == 1
    assert 95 <= r.pfcount(a) <= 105
    assert r.pfmerge(m, a, b) is True
    assert 190 <= r.pfcount(m) <= 210


def test_geo(r):
    g = uid("g")
    assert r.geoadd(g, [13.361389, 38.115556, "Palermo", 15.087269, 37.502669, "Catania"]) == 2
    assert abs(r.geodist(g, "Palermo", "Catania", unit="km") - 166.2742) < 0.01
    pos = r.geopos(g, "Palermo", "nowhere")
    assert abs(pos[0][0] - 13.361389) < 1e-4 and pos[1] is None
    assert r.geohash(g, "Palermo") == ["sqc8b49rny0"]
    assert r.geosearch(g, longitude=15, latitude=37, radius=200, unit="km", sort="ASC") == [
        b"Catania", b"Palermo"]
    assert r.georadius(g, 15, 37, 100, unit="km") == [b"Catania"]


def test_bitmaps(r, direct):
    k = uid("b")
    assert r.setbit(k, 7, 1) == 0
    assert r.getbit(k, 7) == 1 and r.getbit(k, 100) == 0
    assert r.bitcount(k) == 1 and r.bitpos(k, 1) == 7
    assert r.bitfield(k).incrby("u8", 8, 200).get("u8", 0).execute() == [200, 1]
    a, b, dest = tagged(3)
    r.set(a, b"\xf0")
    r.set(b, b"\x3c")
    assert r.bitop("AND", dest, a, b) == 1
    assert r.get(dest) == b"\x30"
    assert len(holders(direct, [a, b, dest])) == 1


def test_streams(r):
    s = uid("x")
    i1 = r.xadd(s, {"f": "1"})
    i2 = r.xadd(s, {"f": "2"})
    assert r.xlen(s) == 2
    assert [e[0] for e in r.xrange(s)] == [i1, i2]
    assert r.xrevrange(s, count=1)[0][0] == i2
    got = r.xread({s: 0})
    assert got[s.encode()][0][1] == {b"f": b"1"} if isinstance(got, dict) else got[0][1][0][1] == {b"f": b"1"}
    assert r.xgroup_create(s, "g", id="0") is True
    got = r.xreadgroup("g", "c1", {s: ">"}, count=10)
    entries = got[s.encode()][0] if isinstance(got, dict) else got[0][1]
    assert [e[0] for e in entries] == [i1, i2]
    assert r.xack(s, "g", i1) == 1
    assert r.xpending(s, "g")["pending"] == 1
    assert r.xinfo_stream(s)["length"] == 2
    assert r.xdel(s, i1) == 1
    assert r.xtrim(s, maxlen=0) == 1 and r.xlen(s) == 0


def test_ttl_commands(r):
    k = uid()
    r.set(k, "v")
    assert r.ttl(k) == -1 and r.ttl(uid()) == -2
    assert r.expire(k, 100) is True and 0 < r.ttl(k) <= 100
    assert r.pexpire(k, 50000) is True and 0 < r.pttl(k) <= 50000
    assert r.expiretime(k) > time.time()
    assert r.persist(k) is True and r.ttl(k) == -1
    assert r.expireat(k, int(time.time()) + 1000) is True
    assert 900 < r.ttl(k) <= 1000
    assert r.pexpire(k, 1) is True
    time.sleep(0.05)
    assert r.get(k) is None


def test_keyspace_single(r, direct):
    k = uid()
    r.set(k, "v")
    assert r.type(k) == b"string" and r.type(uid()) == b"none"
    assert r.object("encoding", k) == b"embstr"
    dumped = r.dump(k)
    k2 = uid()
    assert r.restore(k2, 0, dumped) in (True, b"OK") and r.get(k2) == b"v"
    a, b = tagged(2)
    r.set(a, "1")
    assert r.rename(a, b) is True and r.get(b) == b"1"
    assert r.copy(b, a) is True and r.get(a) == b"1"
    assert r.renamenx(a, b) is False
    assert len(holders(direct, [a, b])) == 1


def test_multi_key_across_servers(r, direct):
    keys = [uid(f"m{i}") for i in range(60)]
    assert r.mset({k: f"v-{k}" for k in keys[::2]}) is True
    assert r.mget(keys) == [f"v-{k}".encode() if i % 2 == 0 else None for i, k in enumerate(keys)]
    per_server = [sum(d.exists(k) for k in keys[::2]) for d in direct]
    assert sum(per_server) == 30 and all(n > 0 for n in per_server), per_server
    present = keys[::2]
    assert r.exists(*keys) == 30
    assert r.exists(present[0], present[0], keys[1]) == 2
    assert r.touch(*keys) == 30
    assert r.delete(*keys[:20]) == 10
    assert r.unlink(*keys) == 20
    assert r.exists(*keys) == 0
    assert r.mget(keys[:3]) == [None, None, None]


def test_hash_tags_colocate(r, direct):
    for _ in range(5):
        keys = tagged(8)
        r.mset({k: "1" for k in keys})
        held = [sum(d.exists(k) for k in keys) for d in direct]
        assert sorted(held) == [0, 0, 8], held


def test_eval_and_evalsha_route_by_first_key(r, direct):
    script = "redis.call('set', KEYS[1], ARGV[1]); return redis.call('get', KEYS[1])"
    getter = "return redis.call('get', KEYS[1])"
    sha = {direct[0].script_load(script)}
    sha_ro = {direct[0].script_load(getter)}
    for d in direct[1:]:
        sha.add(d.script_load(script))
        sha_ro.add(d.script_load(getter))
    assert len(sha) == len(sha_ro) == 1
    (sha,), (sha_ro,) = sha, sha_ro
    for i in range(10):
        k = uid(f"e{i}")
        assert r.eval(script, 1, k, f"v{i}") == f"v{i}".encode()
        assert r.get(k) == f"v{i}".encode()
        assert r.evalsha(sha, 1, k, "w") == b"w"
        assert r.evalsha_ro(sha_ro, 1, k) == b"w"
        assert r.eval_ro(getter, 1, k) == b"w"
        assert len(holders(direct, [k])) == 1
    a, b = tagged(2)
    assert r.eval("return redis.call('mset', KEYS[1], ARGV[1], KEYS[2], ARGV[2])", 2, a, b, "1", "2") == b"OK"
    assert r.mget([a, b]) == [b"1", b"2"]
    # No key: sent to one server (test_redis_compat.py checks which).
    assert r.eval("return 1", 0) == 1


@pytest.mark.parametrize("cmd", [
    # KEYS and FLUSHALL only where the pool allows them (test_redis_keyspace.py).
    ("KEYS", "*"), ("FLUSHALL",),
    ("SCRIPT", "KILL"), ("WAIT", "1", "0"),
])
def test_unsupported_commands_named(r, cmd):
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command(*cmd)
    assert cmd[0] in str(e.value)
    k = uid()
    assert r.set(k, "still") and r.get(k) == b"still"


def test_unknown_command(r):
    with pytest.raises(redis.ResponseError, match="unknown command 'frobnicate'"):
        r.execute_command("frobnicate", "a")
    assert r.ping() is True


def test_pipeline_read_your_writes(r):
    keys = [uid(f"p{i}") for i in range(500)]
    p = r.pipeline(transaction=False)
    for i, k in enumerate(keys):
        p.set(k, i)
        p.get(k)
        p.incr(k)
        p.get(k)
    out = p.execute()
    assert len(out) == 2000
    for i in range(500):
        assert out[4 * i: 4 * i + 4] == [True, str(i).encode(), i + 1, str(i + 1).encode()]


def test_binary_safe_4mb(r):
    value = bytes(range(256)) * (4 * 1024 * 1024 // 256)
    k = uid("bin")
    assert r.set(k, value) is True
    assert r.get(k) == value
    assert r.strlen(k) == len(value)
    kb = b"bin\x00\r\n\xff" + uuid.uuid4().bytes
    assert r.set(kb, bytes(range(256))) is True
    assert r.get(kb) == bytes(range(256))
    assert r.mget([kb, k])[0] == bytes(range(256))
