"""Redis key placement: walnut and nutcracker side by side in front of the
same redis-server backends. Each key is set through nutcracker, the backend
holding it is found by asking every backend, the backends are emptied, then
the same through walnut: both must pick the same backend for every key."""

from __future__ import annotations

import inspect
import os

import pytest
import redis

from procs import HOST, NUTCRACKER_BIN, redis_pool

COMBOS = [
    ("fnv1a_64", "ketama"), ("murmur", "ketama"), ("md5", "modula"),
    ("crc32a", "modula"), ("hsieh", "ketama"), ("one_at_a_time", "modula"),
]
KEYS = [f"place:{i}" for i in range(150)] + [f"user:{{{i % 7}}}:x{i}" for i in range(50)] + [
    "\u00e9t\u00e9", "a" * 200, "{}empty", "{open", "close}"]


_PARAMS = inspect.signature(redis.Redis.__init__).parameters
#: No CLIENT SETINFO on connect: nutcracker refuses CLIENT.
QUIET = {"driver_info": None} if "driver_info" in _PARAMS else {"lib_name": None, "lib_version": None}


@pytest.fixture(scope="module")
def backends(module_procs):
    return [module_procs.redis() for _ in range(3)]


def holders(proxy_port: int, backends) -> list[int]:
    with redis.Redis(host=HOST, port=proxy_port, protocol=2, socket_timeout=10, **QUIET) as r:
        p = r.pipeline(transaction=False)
        for k in KEYS:
            p.set(k, "1")
        assert all(p.execute())
    found = [-1] * len(KEYS)
    for i, b in enumerate(backends):
        with redis.Redis(host=HOST, port=b.port, protocol=2) as d:
            p = d.pipeline(transaction=False)
            for k in KEYS:
                p.exists(k)
            for j, hit in enumerate(p.execute()):
                if hit:
                    assert found[j] == -1, f"{KEYS[j]} on two backends"
                    found[j] = i
            d.flushall()
    assert -1 not in found
    return found


@pytest.mark.skipif(not os.access(NUTCRACKER_BIN, os.X_OK), reason="nutcracker not installed")
@pytest.mark.parametrize("hash_name,dist", COMBOS, ids=[f"{h}-{d}" for h, d in COMBOS])
def test_same_backend_as_nutcracker(procs, proxy_kind, backends, hash_name, dist):
    if proxy_kind != "walnut":
        pytest.skip("compares walnut with nutcracker")
    pool = redis_pool(backends, hash=hash_name, distribution=dist, hash_tag="{}")
    pool["servers"] = [f"{b.address}:{w}" for b, w in zip(backends, (1, 2, 1))]
    nut = procs.proxy("nutcracker", {"beta": pool})
    wal = procs.proxy("walnut", {"beta": pool})
    want = holders(nut.port(), backends)
    got = holders(wal.port(), backends)
    assert len(set(want)) > 1
    diff = [(k, w, g) for k, w, g in zip(KEYS, want, got) if w != g]
    assert not diff, diff[:10]
