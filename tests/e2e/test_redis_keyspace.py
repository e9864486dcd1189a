"""The keyspace of a Redis pool spread over three servers, as one: SCAN
walks every server (a key present for the whole walk is returned, while
other keys come and go), DBSIZE and INFO's keyspace are the servers' sums,
RANDOMKEY names a key that exists, KEYS, FLUSHALL and FLUSHDB only where
the pool allows them."""

from __future__ import annotations

import hashlib
import threading

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from procs import HOST, redis_pool


def client(p, pool: str = "rd", protocol: int = 2) -> redis.Redis:
    return redis.Redis(host=HOST, port=p.port(pool), protocol=protocol,
                       retry=Retry(NoBackoff(), 0), socket_timeout=20)


@pytest.fixture
def three(procs):
    servers = [procs.redis() for _ in range(3)]
    p = procs.proxy("walnut", {
        "rd": redis_pool(servers),
        "open": redis_pool(servers, allow_keys=True, allow_flush=True),
    })
    return p, servers


@pytest.mark.parametrize("protocol", [2, 3])
def test_scan_returns_every_key_present_throughout(three, protocol):
    p, servers = three
    r = client(p, protocol=protocol)
    pipe = r.pipeline(transaction=False)
    stable = {f"stable:{i}" for i in range(10_000)}
    for k in stable:
        pipe.set(k, "v")
    for i in range(2000):
        pipe.set(f"gone:{i}", "v")
    pipe.execute()
    # Every server holds a share: the walk must cross them all.
    shares = [redis.Redis(host=HOST, port=s.port).dbsize() for s in servers]
    assert all(n > 1000 for n in shares), shares

    stop = threading.Event()
    churn_errors: list[str] = []

    def churn() -> None:
        w = client(p)
        i = 0
        while not stop.is_set():
            try:
                w.set(f"new:{i}", "v")
                w.delete(f"gone:{i % 2000}")
            except redis.RedisError as e:  # counted, and fails the test
                churn_errors.append(repr(e))
            i += 1

    t = threading.Thread(target=churn, daemon=True)
    t.start()
    try:
        seen = set()
        for k in r.scan_iter(count=200):
            seen.add(k.decode())
    finally:
        stop.set()
        t.join(10)
    assert not churn_errors, churn_errors[:3]
    missing = stable - seen
    assert not missing, f"{len(missing)} keys present throughout were not returned"
    # MATCH and TYPE go through to every server.
    r.hset("hash:1", "f", "v")
    matched = {k.decode() for k in r.scan_iter(match="stable:99*", count=500)}
    assert matched == {k for k in stable if k.startswith("stable:99")}
    assert {k.decode() for k in r.scan_iter(_type="hash", count=1000)} == {"hash:1"}


def test_dbsize_randomkey_keys_and_flushall(three):
    p, servers = three
    r, o = client(p), client(p, "open")
    for i in range(600):
        r.set(f"k:{i}", i)
    direct = [redis.Redis(host=HOST, port=s.port) for s in servers]
    assert r.dbsize() == sum(d.dbsize() for d in direct) == 600
    # INFO: walnut's own, with the servers' keyspace summed.
    for i in range(0, 600, 3):
        r.expire(f"k:{i}", 1000)
    info = r.info()
    assert info["proxy"] == "walnut" and info["servers"] == 3, info
    assert info["db0"]["keys"] == 600 and info["db0"]["expires"] == 200, info
    for _ in range(20):
        k = r.randomkey()
        assert k is not None and r.exists(k) == 1
    # KEYS blocks every server: refused unless the pool allows it.
    with pytest.raises(redis.ResponseError, match="allow_keys"):
        r.keys("k:1*")
    assert sorted(k.decode() for k in o.keys("k:1*")) == sorted(
        f"k:{i}" for i in range(600) if str(i).startswith("1"))
    with pytest.raises(redis.ResponseError, match="allow_flush"):
        r.flushall()
    assert r.dbsize() == 600
    assert o.flushall() is True
    assert [d.dbsize() for d in direct] == [0, 0, 0]
    assert r.randomkey() is None
    assert r.dbsize() == 0
    # FLUSHDB likewise: refused unless allowed, then to every server, and
    # only the pool's database (a key in db 1 stays).
    for i in range(60):
        r.set(f"f:{i}", i)
    other_db = redis.Redis(host=HOST, port=servers[0].port, db=1)
    other_db.set("elsewhere", "1")
    with pytest.raises(redis.ResponseError, match="allow_flush"):
        r.flushdb()
    assert r.dbsize() == 60
    assert o.flushdb() is True
    assert [d.dbsize() for d in direct] == [0, 0, 0]
    assert other_db.get("elsewhere") == b"1"
    # A cursor that is not a number gets redis-server's error.
    with pytest.raises(redis.ResponseError, match="invalid cursor"):
        r.execute_command("SCAN", "nope")


def lib_names(libs) -> list[bytes]:
    """Library names of a FUNCTION LIST reply (RESP2: flat name/value lists)."""
    out = []
    for entry in libs:
        if not isinstance(entry, dict):
            entry = dict(zip(entry[::2], entry[1::2]))
        out.append(entry[b"library_name"])
    return out


def test_functions_are_loaded_on_every_server(three):
    """FUNCTION LOAD reaches every server, so FCALL works for a key on any
    of them; FUNCTION LIST answers as one server would; FLUSH empties all."""
    p, servers = three
    r = client(p)
    lib = ("#!lua name=wlib\n"
           "redis.register_function('wset', function(keys, args) "
           "return redis.call('SET', keys[1], args[1]) end)")
    assert r.function_load(lib) == b"wlib"
    for s in servers:
        assert lib_names(redis.Redis(host=HOST, port=s.port).function_list()) == [b"wlib"], s.port
    # Hashed names: short ones that differ in their last characters
    # cluster on one server under fnv1a_64.
    keys = [hashlib.sha1(b"%d" % i).hexdigest()[:12] for i in range(60)]
    for k in keys:
        assert r.fcall("wset", 1, k, "v") == b"OK"
    # The keys are spread: FCALL ran on every server.
    assert all(redis.Redis(host=HOST, port=s.port).dbsize() > 0 for s in servers)
    assert lib_names(r.function_list()) == [b"wlib"]
    assert r.function_flush() in (True, b"OK")
    for s in servers:
        assert redis.Redis(host=HOST, port=s.port).function_list() == []
    with pytest.raises(redis.ResponseError, match="[Ff]unction not found"):
        r.fcall("wset", 1, keys[0], "v")
