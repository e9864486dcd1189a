"""Hot keys: admin `hotkeys [POOL] [N]` and /metrics name the keys clients
ask for most, per pool, with the server that holds each, from a sampled
sketch in every worker (2 workers here, merged)."""

from __future__ import annotations

import threading

import redis
from pymemcache.client.base import Client as MemcacheClient

from procs import HOST, memcache_pool, redis_pool, wait_until
from test_migration_bg import admin


def hot_lines(port: int, *args: str) -> list[dict[str, str]]:
    out = []
    for line in admin(port, " ".join(["hotkeys", *args])).splitlines():
        kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if "key" in kv:
            out.append(kv)
    return out


class Hammer(threading.Thread):
    """One hot key, one warm, many cold, without pause until stopped."""

    def __init__(self, get, hot: str, warm: str):
        super().__init__(daemon=True)
        self.get, self.hot, self.warm = get, hot, warm
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            if i % 2 == 0:
                self.get(self.hot)
            elif i % 5 == 0:
                self.get(self.warm)
            else:
                self.get(f"cold:{i}")


def test_the_hottest_key_of_each_pool_comes_first_with_its_server(procs):
    mcs = procs.memcacheds(2)
    rds = [procs.redis() for _ in range(2)]
    p = procs.proxy("walnut", {"mc": memcache_pool(mcs), "rd": redis_pool(rds)},
                    extra_args=["--workers", "2"])
    mc = MemcacheClient((HOST, p.port("mc")))
    mc.set("hot:mc", b"v", noreply=False)
    r = redis.Redis(host=HOST, port=p.port("rd"), protocol=2)
    r.set("hot:rd", "v")
    hammers = [Hammer(mc.get, "hot:mc", "warm:mc"), Hammer(r.get, "hot:rd", "warm:rd")]
    for h in hammers:
        h.start()
    try:
        def ready() -> bool:
            lines = hot_lines(p.admin_port)
            keys = [(x["pool"], x["key"]) for x in lines]
            return ("mc", "hot:mc") in keys and ("rd", "hot:rd") in keys
        wait_until(ready, 20, what="hot keys published")
        for pool, key, backends in (("mc", "hot:mc", mcs), ("rd", "hot:rd", rds)):
            top = hot_lines(p.admin_port, pool, "3")
            assert 1 <= len(top) <= 3 and {x["pool"] for x in top} == {pool}, top
            assert top[0]["key"] == key, top
            assert int(top[0]["rate"]) > 50, top
            # The server named is the one that holds the key.
            if pool == "mc":
                holder = [m for m in backends if MemcacheClient((HOST, m.port)).get(key)]
            else:
                holder = [x for x in backends if redis.Redis(host=HOST, port=x.port).exists(key)]
            assert len(holder) == 1 and top[0]["server"] == holder[0].address, (top, holder)
        metrics = admin(p.admin_port, "metrics")
        assert "# TYPE walnut_hotkey_requests_per_second gauge" in metrics
        assert 'walnut_hotkey_requests_per_second{pool="rd",server="' in metrics
        assert 'key="hot:rd"}' in metrics
    finally:
        for h in hammers:
            h.stop.set()
            h.join(5)
    assert admin(p.admin_port, "hotkeys nosuchpool").startswith("ERR")
