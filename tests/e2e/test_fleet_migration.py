"""A placement change across a fleet: three walnuts in front of the same
servers (`migration: true`), busy clients writing shared counters and lists
through all three, a server added with `walnut fleet apply`. Every
acknowledged write must be there afterwards (the fleet barrier: no member
routes by the new placement until every member stopped routing by the old
one, see ARCHITECTURE.md, "A fleet's placement change")."""

from __future__ import annotations

import random
import threading
import time

import pytest
import redis
from pymemcache.client.base import Client as McClient
from redis.backoff import NoBackoff
from redis.retry import Retry

from fleetkit import Etcd, Member, apply, port_offset, status, wait_for
from procs import HOST, free_port, memcache_pool, redis_pool

FLEET = "mig"
COUNTERS = 300
LISTS = 300
CLIENTS = 6


def start(procs, proc):
    procs.started.append(proc)
    return proc.start()


class Load:
    """Clients writing through every member until stopped; what each write
    was answered is kept, per key."""

    def __init__(self, kind: str, ports: list[int]):
        self.kind = kind
        self.ports = ports
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.incr_acked = [0] * COUNTERS
        self.pushed: list[list[int]] = [[] for _ in range(LISTS)]
        self.acked = 0
        self.refused = 0
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(CLIENTS)]

    def client(self, port: int):
        if self.kind == "redis":
            return redis.Redis(host=HOST, port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0))
        return McClient((HOST, port), timeout=5, connect_timeout=5)

    def run(self, n: int) -> None:
        rnd = random.Random(n)
        clients = [self.client(p) for p in self.ports]
        seq = 0
        while not self.stop.is_set():
            c = clients[seq % len(clients)]
            seq += 1
            try:
                if self.kind == "redis" and seq % 2:
                    j = rnd.randrange(LISTS)
                    v = n * 10_000_000 + seq
                    c.rpush(f"l:{j}", v)
                    with self.lock:
                        self.pushed[j].append(v)
                        self.acked += 1
                else:
                    i = rnd.randrange(COUNTERS)
                    if self.kind == "redis":
                        c.incr(f"c:{i}")
                    elif c.incr(f"c:{i}", 1) is None:
                        raise RuntimeError("incr of a missing counter")
                    with self.lock:
                        self.incr_acked[i] += 1
                        self.acked += 1
            except (redis.ResponseError, RuntimeError) as e:
                with self.lock:
                    self.refused += 1
                    if len(self.errors) < 5:
                        self.errors.append(str(e))
            except Exception as e:  # noqa: BLE001 - a failed write is not acknowledged
                with self.lock:
                    self.refused += 1
                    if len(self.errors) < 5:
                        self.errors.append(repr(e))
                clients[(seq - 1) % len(clients)] = self.client(self.ports[(seq - 1) % len(self.ports)])

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=15)


def lost_writes(kind: str, port: int, load: Load) -> tuple[int, int]:
    """(increments lost, pushes lost), read through one member."""
    lost_incr = lost_push = 0
    if kind == "redis":
        r = redis.Redis(host=HOST, port=port, socket_timeout=10)
        for i in range(COUNTERS):
            lost_incr += max(0, load.incr_acked[i] - int(r.get(f"c:{i}") or 0))
        for j in range(LISTS):
            have = set(int(x) for x in r.lrange(f"l:{j}", 0, -1))
            lost_push += sum(1 for v in load.pushed[j] if v not in have)
    else:
        c = McClient((HOST, port), timeout=10)
        for i in range(COUNTERS):
            lost_incr += max(0, load.incr_acked[i] - int(c.get(f"c:{i}") or 0))
    return lost_incr, lost_push


def redis_or_mc_ok(kind: str, port: int) -> bool:
    try:
        if kind == "redis":
            return redis.Redis(host=HOST, port=port, socket_timeout=5).set("probe", "1")
        return McClient((HOST, port), timeout=5).set("probe", "1", noreply=False)
    except Exception:  # noqa: BLE001 - refused until in step
        return False


@pytest.mark.parametrize("kind", ["redis", "memcache"])
def test_a_server_added_across_the_fleet_loses_no_acknowledged_write(procs, kind):
    etcd = start(procs, Etcd(procs.workdir))
    if kind == "redis":
        s1, s2, s3 = procs.redis(), procs.redis(), procs.redis()
        make = redis_pool
    else:
        s1, s2, s3 = procs.memcached(), procs.memcached(), procs.memcached()
        make = memcache_pool
    base = free_port()
    pools = {"p": make([s1, s2], listen=f"{HOST}:{base}", migration=True, migration_rate=20000)}
    assert apply(etcd, FLEET, procs.workdir, pools).returncode == 0
    members = [
        start(procs, Member(procs.workdir, etcd.url, FLEET, name, [base], offset=off, ttl=2))
        for name, off in (("a", 0), ("b", port_offset(base)), ("c", port_offset(base)))
    ]
    ports = [m.ports[0] for m in members]
    # A member routes a `migration: true` pool once its agent holds a
    # lease and its master runs what etcd holds.
    for p in ports:
        wait_for(lambda p=p: redis_or_mc_ok(kind, p), 10, f"member on {p} in step", step=0.05)
    if kind == "memcache":
        c = McClient((HOST, ports[0]), timeout=5)
        for i in range(COUNTERS):
            assert c.set(f"c:{i}", "0", noreply=False)
    with Load(kind, ports) as load:
        wait_for(lambda: load.acked > 2000, 20, "load running")
        pools["p"]["servers"] = make([s1, s2, s3])["servers"]
        t0 = time.monotonic()
        r = apply(etcd, FLEET, procs.workdir, pools, wait=10)
        applied = time.monotonic() - t0
        assert r.returncode == 0, r.stdout + r.stderr
        at_apply = load.acked
        wait_for(lambda: load.acked > at_apply + 3000, 30, "load after the change")
    wait_for(lambda: all("state=done" in m.admin("migration") for m in members), 60, "migration done", step=0.2)
    lost_incr, lost_push = lost_writes(kind, ports[1], load)
    print(f"{kind}: acknowledged {load.acked} writes, refused {load.refused}, "
          f"lost {lost_incr} increments and {lost_push} pushes; applied by all in {applied:.2f} s; "
          f"errors seen: {load.errors[:3]}")
    assert status(etcd, FLEET)["members"] and all(m.alive() for m in members)
    assert (lost_incr, lost_push) == (0, 0)
