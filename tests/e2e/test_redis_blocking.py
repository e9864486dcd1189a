"""Blocking commands through walnut: each on a server connection of its
own (nothing queued behind it waits), not cut by the pool's timeout, keys
that must share a server (else refused), and a client that leaves while
blocked frees its server connection (the server no longer counts it as
blocked, and a later push is not swallowed)."""

from __future__ import annotations

import hashlib
import re
import socket
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from procs import HOST, redis_pool, wait_until


def client(port: int, protocol: int = 2) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, protocol=protocol, retry=Retry(NoBackoff(), 0),
                       socket_timeout=30)


@pytest.fixture
def pool(procs):
    servers = [procs.redis() for _ in range(3)]
    # A short pool timeout: blocks asking for longer must outlive it.
    p = procs.proxy("walnut", {"rd": redis_pool(servers, timeout=400, hash_tag="{}")},
                    extra_args=["--workers", "1"])
    return p, servers


def blocked_on(servers) -> int:
    return sum(redis.Redis(host=HOST, port=s.port).info("clients")["blocked_clients"]
               for s in servers)


@pytest.mark.parametrize("protocol", [2, 3])
def test_blpop_waits_without_holding_up_others(pool, protocol):
    p, servers = pool
    a, b = client(p.port("rd"), protocol), client(p.port("rd"))
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("v", a.blpop(["{q}list"], timeout=20)))
    t.start()
    wait_until(lambda: blocked_on(servers) == 1, 10, what="BLPOP blocked on its server")
    # Other requests, to the same server too, are answered meanwhile.
    for i in range(50):
        b.set(f"{{q}}other{i}", i)
        assert b.get(f"{{q}}other{i}") == str(i).encode()
    assert t.is_alive() and "v" not in got
    b.rpush("{q}list", "hello")
    t.join(10)
    assert list(got["v"]) == [b"{q}list", b"hello"]


def test_a_block_longer_than_the_pool_timeout(pool):
    p, _ = pool
    r = client(p.port("rd"))
    t0 = time.monotonic()
    assert r.blpop(["empty"], timeout=1.5) is None
    assert time.monotonic() - t0 >= 1.4
    # The connection stays usable, as the pool timeout never fired.
    assert r.ping() is True


def test_keys_on_several_servers_are_refused(pool):
    p, servers = pool
    r = client(p.port("rd"))
    # Two keys seen on different servers. The names are hashes: short names
    # that differ in their last characters (k0, k1, ...) cluster under
    # fnv1a_64, as in twemproxy, and for some server ports all of them
    # fall on one server.
    owner = {}
    for i in range(200):
        k = hashlib.sha1(b"%d" % i).hexdigest()[:12]
        r.set(k, "x")
        s = next(s for s in servers if redis.Redis(host=HOST, port=s.port).exists(k))
        owner.setdefault(s.port, k)
        if len(owner) == 2:
            break
    keys = list(owner.values())
    assert len(keys) == 2
    r.delete(*keys)
    with pytest.raises(redis.ResponseError, match="map to one server"):
        r.blpop(keys, timeout=1)
    # Hash tags keep them together.
    r.rpush("{t}b", "x")
    assert r.blpop(["{t}a", "{t}b"], timeout=1) == (b"{t}b", b"x")


def test_a_client_gone_while_blocked_frees_its_connection(pool):
    p, servers = pool
    s = socket.create_connection((HOST, p.port("rd")))
    s.sendall(b"*3\r\n$5\r\nBLPOP\r\n$7\r\nabandon\r\n$1\r\n0\r\n")
    wait_until(lambda: blocked_on(servers) == 1, 10, what="BLPOP blocked")
    s.close()
    wait_until(lambda: blocked_on(servers) == 0, 10, what="the blocked connection closed")
    r = client(p.port("rd"))
    r.rpush("abandon", "kept")
    assert r.llen("abandon") == 1  # nobody popped it


def test_every_blocking_command(pool):
    p, _ = pool
    r = client(p.port("rd"))
    r.rpush("{b}src", "1", "2")
    assert r.blmove("{b}src", "{b}dst", 1, "LEFT", "RIGHT") == b"1"
    assert r.brpoplpush("{b}src", "{b}dst", 1) == b"2"
    assert r.lrange("{b}dst", 0, -1) == [b"2", b"1"]
    assert r.brpop(["{b}dst"], timeout=1) == (b"{b}dst", b"1")
    assert r.blmpop(1, 1, "{b}dst", direction="LEFT") == [b"{b}dst", [b"2"]]
    r.zadd("{z}set", {"a": 1, "b": 2, "c": 3})
    assert r.bzpopmin(["{z}set"], timeout=1) == (b"{z}set", b"a", 1.0)
    assert r.bzpopmax(["{z}set"], timeout=1) == (b"{z}set", b"c", 3.0)
    assert r.bzmpop(1, 1, ["{z}set"], min=True) == [b"{z}set", [[b"b", b"2"]]]
    r.xadd("stream", {"f": "v"}, id="1-1")
    got = r.xread({"stream": "0"}, block=1000)
    assert got == [[b"stream", [(b"1-1", {b"f": b"v"})]]]
    t0 = time.monotonic()
    assert r.xread({"stream": "$"}, block=800) in (None, [], {})
    assert time.monotonic() - t0 >= 0.7


def test_xreadgroup_block(pool):
    p, servers = pool
    r = client(p.port("rd"))
    r.xgroup_create("{x}s", "g", id="$", mkstream=True)
    got = {}
    reader = client(p.port("rd"))
    t = threading.Thread(target=lambda: got.setdefault(
        "v", reader.xreadgroup("g", "c1", {"{x}s": ">"}, block=20000)))
    t.start()
    wait_until(lambda: blocked_on(servers) == 1, 10, what="XREADGROUP blocked on its server")
    assert t.is_alive() and "v" not in got
    # Added from another client while the group reader blocks: it wakes
    # with that entry, delivered to the group (pending for c1).
    entry = r.xadd("{x}s", {"f": "v"})
    t.join(10)
    assert got["v"] == [[b"{x}s", [(entry, {b"f": b"v"})]]]
    assert r.xpending("{x}s", "g")["pending"] == 1
    assert blocked_on(servers) == 0


def test_blocked_time_is_not_slow(procs):
    """A blocking command that waits out its timeout is not a slow request
    (Redis's SLOWLOG leaves blocked time out too): not in the slow log, not
    logged, not in the latency figures. A script that keeps the server busy
    as long still is, so the slow log is on."""
    from test_admin_port import SLOW, admin

    server = procs.redis()
    p = procs.proxy("walnut", {"rd": redis_pool([server], slowlog_threshold=20000)},
                    extra_args=["--workers", "1"])
    r = client(p.port("rd"))
    for _ in range(3):
        assert r.blpop(["nokey:zz"], timeout=0.3) is None
    assert r.xread({"nostream": "$"}, block=300) in (None, [], {})
    assert admin(p.admin_port, "slowlog len").startswith("0")
    servers = admin(p.admin_port, "servers")
    assert " count=0 " in servers, servers
    assert "slow request" not in p.log_path.read_text()
    # The slow log is on: a busy server is slow.
    r.eval(SLOW, 0, 60000)
    assert admin(p.admin_port, "slowlog len").startswith("1")
    assert re.search(r"slow request: pool 'rd' .* EVAL", p.log_path.read_text())
    assert " count=1 " in admin(p.admin_port, "servers")


def test_info_clients_through_the_proxy(pool):
    """INFO answers the sections a pool can answer truthfully: the pool's
    client connections to walnut, and a client blocked through walnut
    counted once (Redis's own test helpers wait on blocked_clients)."""
    p, servers = pool
    r = client(p.port("rd"))
    others = [client(p.port("rd")) for _ in range(3)]
    for o in others:
        o.ping()
    info = r.info("clients")
    assert info["connected_clients"] == 4, info
    assert info["blocked_clients"] == 0, info
    got = {}
    blocker = client(p.port("rd"))
    t = threading.Thread(target=lambda: got.setdefault("v", blocker.blpop(["{i}q"], timeout=20)))
    t.start()
    wait_until(lambda: r.info("clients")["blocked_clients"] == 1, 10,
               what="blocked_clients 1 through walnut")
    full = r.info()
    assert full["redis_version"] == redis.Redis(host=HOST, port=servers[0].port).info()["redis_version"]
    assert full["connected_clients"] == 5 and full["proxy"] == "walnut", full
    for name in ("keyspace_hits", "keyspace_misses", "total_commands_processed"):
        assert name in full, full
    r.rpush("{i}q", "x")
    t.join(10)
    assert got["v"] == (b"{i}q", b"x")
    wait_until(lambda: r.info("clients")["blocked_clients"] == 0, 10, what="unblocked")
