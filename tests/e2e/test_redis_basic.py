"""Redis through the proxy over two redis-server backends (smoke level)."""

from __future__ import annotations

import inspect
import uuid

import pytest
import redis

from procs import HOST, RawConn, redis_pool


@pytest.fixture(scope="module")
def backends(module_procs):
    return [module_procs.redis() for _ in range(2)]


@pytest.fixture
def proxy(procs, proxy_kind, backends):
    return procs.proxy(proxy_kind, {"beta": redis_pool(backends, hash_tag="{}")})


def connect(port: int) -> redis.Redis:
    """A RESP2 client that sends no CLIENT SETINFO on connect (proxies refuse CLIENT)."""
    params = inspect.signature(redis.Redis.__init__).parameters
    quiet = {"driver_info": None} if "driver_info" in params else {"lib_name": None, "lib_version": None}
    return redis.Redis(host=HOST, port=port, socket_timeout=10, protocol=2, **quiet)


@pytest.fixture
def client(proxy):
    c = connect(proxy.port())
    yield c
    c.close()


def unique(prefix: str = "r") -> str:
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


def test_set_get_del(client):
    k = unique()
    assert client.set(k, b"v") is True
    assert client.get(k) == b"v"
    assert client.delete(k) == 1
    assert client.get(k) is None


def test_mget_mset_across_servers_keeps_order(client, backends):
    keys = [unique(f"m{i}") for i in range(40)]
    assert client.mset({k: k.encode() for k in keys[::2]}) is True
    got = client.mget(keys)
    assert got == [k.encode() if i % 2 == 0 else None for i, k in enumerate(keys)]
    direct = [connect(b.port) for b in backends]
    try:
        counts = [sum(1 for k in keys[::2] if d.exists(k)) for d in direct]
    finally:
        for d in direct:
            d.close()
    assert sum(counts) == 20 and min(counts) > 0, counts


def test_hash_tag_keeps_keys_together(client, backends):
    tag = uuid.uuid4().hex[:8]
    keys = [f"user:{{{tag}}}:{field}" for field in ("a", "b", "c", "d", "e")]
    for k in keys:
        client.set(k, b"1")
    holders = set()
    for i, b in enumerate(backends):
        with connect(b.port) as d:
            if any(d.exists(k) for k in keys):
                holders.add(i)
    assert len(holders) == 1


def test_incr_expire_ttl(client):
    k = unique()
    assert client.incrby(k, 5) == 5
    assert client.expire(k, 100) is True
    assert 0 < client.ttl(k) <= 100


def test_ping_raw(proxy):
    with RawConn(proxy.port()) as c:
        assert c.request(b"*1\r\n$4\r\nPING\r\n") == b"+PONG\r\n"
