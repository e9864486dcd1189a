"""Routing across pools, against real servers: a route pool (`routes:`)
sends keys to other pools by longest prefix, splitting multi-key requests
across them and merging the replies; a shadow pool (`shadow:`) gets a copy
of a pool's requests, and its death or stall changes nothing for clients."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.request

import pytest
import redis
from pymemcache.client.base import Client as MemcacheClient
from redis.backoff import NoBackoff
from redis.retry import Retry

from procmodel import start_walnut
from procs import HOST, memcache_pool, redis_pool, wait_until


def rclient(port: int) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, retry=Retry(NoBackoff(), 0), socket_timeout=10)


def holder(servers, key: str) -> list[int]:
    """Indexes of the servers that hold ``key``."""
    return [i for i, s in enumerate(servers) if rclient(s.port).exists(key)]


def test_redis_prefix_routes_split_and_merge(procs):
    users = [procs.redis(), procs.redis()]
    sessions = [procs.redis()]
    legacy = [procs.redis()]
    p = start_walnut(procs, {
        # (fnv1a_64 puts "user:0".."user:39" all on one server.)
        "users": redis_pool(users, hash="murmur"),
        "sessions": redis_pool(sessions, hash="crc32a"),
        "legacy": redis_pool(legacy),
        "front": {"redis": True, "timeout": 2000,
                  "routes": ["user: users", "user:sess: sessions", "sess: sessions", "* legacy"]},
    }, args=["--workers", "1"])
    r = rclient(p.port("front"))
    direct_users = rclient(p.port("users"))
    keys = [f"user:{i}" for i in range(40)] + [f"sess:{i}" for i in range(10)] + \
        ["user:sess:1", "plain:1", "x"]
    for k in keys:
        assert r.set(k, f"v-{k}")
    # Per-route requests: each SET counted for the route its key takes.
    counts = {"user:": 40, "user:sess:": 1, "sess:": 10, "*": 2}
    wait_until(lambda: route_requests(p, "front") == counts, 10,
               what=f"requests per route: {route_requests(p, 'front')}")
    # Each key is where its own pool puts it.
    for k in keys:
        if k.startswith("user:sess:") or k.startswith("sess:"):
            assert holder(sessions, k) == [0] and holder(users + legacy, k) == [], k
        elif k.startswith("user:"):
            assert len(holder(users, k)) == 1 and holder(sessions + legacy, k) == [], k
            assert direct_users.get(k) == f"v-{k}".encode(), "the users pool places it the same"
        else:
            assert holder(legacy, k) == [0] and holder(users + sessions, k) == [], k
    # A multi-key request across three pools: split, merged in key order.
    assert r.mget(keys) == [f"v-{k}".encode() for k in keys]
    # Counted once for each route its keys take (all four).
    counts = {route: n + 1 for route, n in counts.items()}
    wait_until(lambda: route_requests(p, "front") == counts, 10,
               what=f"requests per route: {route_requests(p, 'front')}")
    assert r.get("user:1") and r.get("plain:1")
    counts["user:"] += 1
    counts["*"] += 1
    wait_until(lambda: route_requests(p, "front") == counts, 10,
               what=f"requests per route: {route_requests(p, 'front')}")
    assert r.exists(*keys) == len(keys)
    assert r.delete("user:1", "sess:1", "x", "nothing:here") == 3
    assert r.mget(["user:1", "sess:1", "x", "user:2"]) == [None, None, None, b"v-user:2"]
    # Per-route stats: the route pool's servers are the routed pools'.
    def every_server_counted() -> bool:
        front = p.stats()["front"]
        return all(front[s.address]["requests"] > 0 for s in users + sessions + legacy)
    wait_until(every_server_counted, 10,
               what=f"requests counted per routed server: {p.stats()['front']}")


def test_redis_route_strips_its_prefix(procs):
    users, other = [procs.redis(), procs.redis()], [procs.redis()]
    p = start_walnut(procs, {
        "users": redis_pool(users, hash="murmur"),
        "other": redis_pool(other),
        "front": {"redis": True, "timeout": 2000, "routes": ["user: users strip", "* other"]},
    }, args=["--workers", "1"])
    r = rclient(p.port("front"))
    direct = rclient(p.port("users"))
    assert r.mset({f"user:{i}": f"u{i}" for i in range(30)} | {"x": "user:1"})
    assert r.set("user:solo", "s")
    for i in range(30):
        # Stored without the prefix, where the users pool's own clients find it.
        assert direct.get(str(i)) == f"u{i}".encode()
        assert sum(rclient(s.port).exists(str(i)) for s in users) == 1
    assert direct.get("solo") == b"s"
    assert rclient(other[0].port).get("x") == b"user:1", "a value is never stripped"
    assert r.mget(["user:3", "x", "user:29"]) == [b"u3", b"user:1", b"u29"]
    assert r.delete("user:3", "x") == 2 and direct.get("3") is None


def test_memcached_prefix_routes_multiget(procs):
    a = [procs.memcached(), procs.memcached()]
    b = [procs.memcached()]
    p = start_walnut(procs, {
        "a": memcache_pool(a),
        "b": memcache_pool(b),
        "front": {"timeout": 2000, "routes": ["a: a", "* b"]},
    }, args=["--workers", "1"])
    m = MemcacheClient((HOST, p.port("front")), timeout=10)
    values = {f"a:{i}": f"A{i}".encode() for i in range(30)}
    values.update({f"b{i}": f"B{i}".encode() for i in range(30)})
    for k, v in values.items():
        m.set(k, v, noreply=False)
    assert m.get_many(list(values)) == values
    only_b = MemcacheClient((HOST, b[0].port), timeout=10)
    assert only_b.get("b3") == b"B3" and only_b.get("a:3") is None


def metric(p, name: str) -> int:
    with urllib.request.urlopen(f"http://{HOST}:{p.admin_port}/metrics", timeout=10) as resp:
        body = resp.read().decode()
    return sum(int(float(l.rsplit(" ", 1)[1])) for l in body.splitlines()
               if l.startswith(name + "{") or l.startswith(name + " "))


def route_requests(p, pool: str) -> dict[str, int]:
    """``walnut_route_requests_total`` of ``pool``, by route label."""
    with urllib.request.urlopen(f"http://{HOST}:{p.admin_port}/metrics", timeout=10) as resp:
        body = resp.read().decode()
    out = {}
    for line in body.splitlines():
        head = f'walnut_route_requests_total{{pool="{pool}",route="'
        if line.startswith(head):
            label, value = line[len(head):].rsplit('"} ', 1)
            out[label] = int(value)
    return out


class Busy:
    """Persistent clients setting and getting without pause, without retry
    (pymemcache, or redis-py with ``Retry(NoBackoff(), 0)``): any failure a
    client sees is recorded and ends its thread. Each round's latency is
    recorded under the phase it started in."""

    def __init__(self, port: int, n: int = 3, redis_: bool = False):
        self.port, self.redis, self.rounds, self.errors = port, redis_, 0, []
        self.phase = "start"
        self.latencies: dict[str, list[float]] = {}
        self.stop_flag = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(n)]

    def run(self, i: int) -> None:
        if self.redis:
            r = rclient(self.port)
            set_, get = (lambda k, v: r.set(k, v)), r.get
        else:
            m = MemcacheClient((HOST, self.port), timeout=10)
            set_, get = (lambda k, v: m.set(k, v, noreply=False)), m.get
        j, deadline = 0, time.monotonic() + 90
        while not self.stop_flag.is_set() and time.monotonic() < deadline:
            j += 1
            phase, t0 = self.phase, time.perf_counter()
            try:
                assert set_(f"k{i}:{j % 500}", str(j).encode())
                assert get(f"k{i}:{j % 500}") == str(j).encode()
                self.rounds += 1
            except Exception as e:  # noqa: BLE001 - every failure counts
                self.errors.append(repr(e))
                return
            self.latencies.setdefault(phase, []).append(time.perf_counter() - t0)

    def start(self) -> "Busy":
        for t in self.threads:
            t.start()
        return self

    def progress(self, n: int = 300) -> None:
        base = self.rounds
        wait_until(lambda: self.rounds >= base + n or self.errors, 30, what="client progress")
        assert not self.errors, self.errors

    def p99(self, phase: str) -> float:
        lat = sorted(self.latencies[phase])
        return lat[min(len(lat) - 1, int(len(lat) * 0.99))]

    def stop(self) -> None:
        self.stop_flag.set()
        for t in self.threads:
            t.join(30)


def mc_stat(server, name: str) -> int:
    return int(MemcacheClient((HOST, server.port), timeout=10).stats()[name.encode()])


def copies_done(main: MemcacheClient, shadow) -> int:
    """Wait until the shadow has processed every copy sent so far: copies
    reach it in order on one connection, so once a marker written after
    them is there, they are too. (A new marker per try: with
    ``shadow_sample`` only some are copied.) Returns how many keys it
    asked the shadow for."""
    direct = MemcacheClient((HOST, shadow.port), timeout=10)
    sent = []

    def marker_seen() -> bool:
        sent.append(f"marker:{len(sent)}")
        main.set(sent[-1], b"m", noreply=False)
        asked[0] += len(sent)
        return bool(direct.get_many(sent))
    asked = [0]
    wait_until(marker_seen, 20, what="the copies processed by the shadow")
    return asked[0]


def test_shadow_pool_copies_and_never_hurts_clients(procs):
    main = [procs.memcached(), procs.memcached()]
    shadow = procs.memcached()
    p = start_walnut(procs, {
        "main": memcache_pool(main, shadow="copy", shadow_mode="writes"),
        "copy": memcache_pool([shadow], timeout=300),
    }, args=["--workers", "1"])
    m = MemcacheClient((HOST, p.port("main")), timeout=10)
    m.set("seen", b"1", noreply=False)
    shadow_direct = MemcacheClient((HOST, shadow.port), timeout=10)
    wait_until(lambda: shadow_direct.get("seen") == b"1", 10, what="the write copied")
    gets = mc_stat(shadow, "cmd_get")
    for i in range(50):
        assert m.get("seen") == b"1"
    asked = copies_done(m, shadow)
    assert mc_stat(shadow, "cmd_get") == gets + asked, "shadow_mode: writes copies no read"
    busy = Busy(p.port("main")).start()
    try:
        busy.progress()
        busy.phase = "before"
        busy.progress(3000)
        # A stalled shadow: copies queue up to the bound, then are dropped.
        os.kill(shadow.pid, signal.SIGSTOP)
        busy.phase = "stalled"
        busy.progress(3000)
        wait_until(lambda: metric(p, "walnut_worker_shadow_dropped_total") > 0, 20,
                   what="copies dropped while the shadow is stalled")
        os.kill(shadow.pid, signal.SIGCONT)
        busy.phase = "after"
        busy.progress()
        # A dead shadow.
        os.kill(shadow.pid, signal.SIGKILL)
        shadow.proc.wait(timeout=10)
        dropped = metric(p, "walnut_worker_shadow_dropped_total")
        busy.phase = "dead"
        busy.progress(2000)
        assert metric(p, "walnut_worker_shadow_dropped_total") > dropped
    finally:
        busy.stop()
    assert not busy.errors, busy.errors
    assert busy.rounds > 5000
    # The shadow's stall or death does not hold the clients: their p99 stays
    # within a bound generous enough for a loaded machine's jitter, far
    # below what waiting on a stalled server costs (the 2 s timeout).
    before = busy.p99("before")
    for phase in ("stalled", "dead"):
        during = busy.p99(phase)
        assert during <= max(5 * before, before + 0.05), (phase, before, during)


def test_shadow_mode_all_copies_reads_and_a_sample_copies_a_share(procs):
    main, everything, sampled = procs.memcached(), procs.memcached(), procs.memcached()
    p = start_walnut(procs, {
        "all": memcache_pool([main], shadow="copy_all"),
        "some": memcache_pool([main], shadow="copy_some", shadow_sample=25),
        "copy_all": memcache_pool([everything]),
        "copy_some": memcache_pool([sampled]),
    }, args=["--workers", "1"])
    a = MemcacheClient((HOST, p.port("all")), timeout=10)
    n = 400
    for i in range(n):
        a.set(f"a{i}", b"v", noreply=False)
    for i in range(n):
        assert a.get(f"a{i}") == b"v"
    copies_done(a, everything)
    # The reads reached the shadow, where the copied writes had put the keys.
    assert mc_stat(everything, "get_hits") >= n
    assert MemcacheClient((HOST, everything.port), timeout=10).get(f"a{n - 1}") == b"v"
    s = MemcacheClient((HOST, p.port("some")), timeout=10)
    keys = [f"s{i}" for i in range(1000)]
    for k in keys:
        s.set(k, b"v", noreply=False)
    copies_done(s, sampled)
    copied = len(MemcacheClient((HOST, sampled.port), timeout=10).get_many(keys))
    # A quarter of them (the bound is loose: which ones is the proxy's choice).
    assert 150 <= copied <= 350, copied
    assert all(v == b"v" for v in MemcacheClient((HOST, main.port), timeout=10)
               .get_many(keys).values())


def test_bad_routing_config_is_refused(procs, tmp_path):
    import subprocess

    from procs import walnut_bin
    conf = tmp_path / "bad.yml"
    conf.write_text(
        "a:\n  listen: 127.0.0.1:1\n  servers:\n    - 127.0.0.1:11211:1\n"
        "front:\n  listen: 127.0.0.1:2\n  routes:\n    - \"x: nowhere\"\n    - \"* a\"\n"
        "  shadow: front\n")
    out = subprocess.run([walnut_bin(), "-t", "-c", str(conf)], capture_output=True, text=True,
                         timeout=30)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert "bad.yml:8" in text and "names no pool 'nowhere'" in text, text
    assert "'shadow' cannot name the pool itself" in text, text


def test_zones_write_everywhere_and_read_the_next_zone_on_a_miss(procs):
    za = [procs.memcached(), procs.memcached()]
    zb = [procs.memcached()]
    p = start_walnut(procs, {
        "za": memcache_pool(za),
        "zb": memcache_pool(zb),
        "z": {"timeout": 2000, "zones": ["za", "zb"]},
    }, args=["--workers", "1"])
    z = MemcacheClient((HOST, p.port("z")), timeout=10)
    local = MemcacheClient((HOST, p.port("za")), timeout=10)
    remote = MemcacheClient((HOST, p.port("zb")), timeout=10)
    for i in range(50):
        z.set(f"k{i}", f"v{i}".encode(), noreply=False)
    for i in range(50):
        assert local.get(f"k{i}") == f"v{i}".encode(), "the local zone answered"
    wait_until(lambda: all(remote.get(f"k{i}") == f"v{i}".encode() for i in range(50)), 10,
               what="the copies in the remote zone")
    # Only the remote zone has it: a miss in the local zone fails over.
    remote.set("only-remote", b"r", noreply=False)
    assert local.get("only-remote") is None
    assert z.get("only-remote") == b"r"
    assert z.get("nowhere") is None
    # A multi-get too, per key: the local zone's values, the remote's for
    # its misses, in one reply.
    before = zone_failovers(p)
    assert z.get_many(["k2", "only-remote", "nowhere", "k3"]) == {
        "k2": b"v2", "only-remote": b"r", "k3": b"v3"}
    assert zone_failovers(p) == before + 1
    z.delete("k1", noreply=False)
    wait_until(lambda: remote.get("k1") is None, 10, what="the delete copied")


def test_redis_zone_read_fails_over_on_a_miss(procs):
    za, zb = [procs.redis()], [procs.redis()]
    p = start_walnut(procs, {
        "za": redis_pool(za), "zb": redis_pool(zb),
        "z": {"redis": True, "timeout": 2000, "zones": ["za", "zb"], "zone_failover": "miss"},
    }, args=["--workers", "1"])
    rclient(zb[0].port).set("there", "b")
    z = rclient(p.port("z"))
    assert z.get("there") == b"b"
    assert z.get("missing") is None
    assert z.set("w", "1")
    wait_until(lambda: rclient(zb[0].port).get("w") == b"1", 10, what="the copy")


def zone_failovers(p, pool: str = "z") -> int:
    return p.stats()[pool]["zone_failovers"]


def test_a_multiget_moves_to_the_next_zone_when_its_local_server_is_lost(procs):
    za, zb = [procs.memcached(), procs.memcached()], [procs.memcached()]
    p = start_walnut(procs, {
        "za": memcache_pool(za),
        "zb": memcache_pool(zb),
        "z": {"timeout": 2000, "zones": ["za", "zb"], "zone_writes": "sync"},
    }, args=["--workers", "1"])
    z = MemcacheClient((HOST, p.port("z")), timeout=10)
    keys = [f"lost:{i}" for i in range(100)]
    for k in keys:
        z.set(k, k.encode(), noreply=False)
    os.kill(za[0].pid, signal.SIGKILL)
    za[0].proc.wait(timeout=10)
    # Until it is ejected, its keys' fragment fails and moves to zone b.
    for _ in range(3):
        assert z.get_many(keys) == {k: k.encode() for k in keys}


def test_a_zone_lost_under_load_with_sync_writes(procs):
    za = [procs.memcached(), procs.memcached()]
    zb = [procs.memcached()]
    p = start_walnut(procs, {
        "za": memcache_pool(za),
        "zb": memcache_pool(zb),
        "z": {"timeout": 2000, "zones": ["za", "zb"], "zone_writes": "sync"},
    }, args=["--workers", "1"])
    busy = Busy(p.port("z")).start()
    try:
        busy.progress()
        assert zone_failovers(p) == 0, "the local zone answers while it is there"
        for m in za:  # the local zone goes away
            os.kill(m.pid, signal.SIGKILL)
            m.proc.wait(timeout=10)
        busy.progress(3000)
    finally:
        busy.stop()
    assert not busy.errors, busy.errors
    def lost_counted() -> bool:
        return sum(v.get("server_err", 0) for k, v in p.stats()["z"].items()
                   if isinstance(v, dict) and k in {m.address for m in za}) > 0
    wait_until(lost_counted, 10, what="the lost zone's failures counted")
    wait_until(lambda: zone_failovers(p) >= 3000, 10, what="the failovers counted")


@pytest.mark.parametrize("redis_", [False, True], ids=["memcached", "redis"])
def test_a_zone_lost_under_load_with_async_writes(procs, redis_):
    """The default `zone_writes: async`: once the local zone is lost, its
    writes are answered by the surviving zone, and its reads fail over."""
    backend, pool = (procs.redis, redis_pool) if redis_ else (procs.memcached, memcache_pool)
    za, zb = [backend(), backend()], [backend()]
    p = start_walnut(procs, {
        "za": pool(za),
        "zb": pool(zb),
        "z": {"redis": redis_, "timeout": 2000, "zones": ["za", "zb"]},
    }, args=["--workers", "1"])
    busy = Busy(p.port("z"), redis_=redis_).start()
    try:
        busy.progress()
        assert zone_failovers(p) == 0, "the local zone answers while it is there"
        for s in za:  # the local zone goes away
            os.kill(s.pid, signal.SIGKILL)
            s.proc.wait(timeout=10)
        busy.progress(3000)
    finally:
        busy.stop()
    assert not busy.errors, busy.errors
    # Each round after the loss is a write and a read answered by zone b.
    wait_until(lambda: zone_failovers(p) >= 6000, 10, what="the failovers counted")
    assert metric(p, "walnut_pool_zone_failovers_total") >= 6000
    # What the clients wrote last is in the surviving zone.
    direct = rclient(zb[0].port) if redis_ else MemcacheClient((HOST, zb[0].port), timeout=10)
    front = rclient(p.port("z")) if redis_ else MemcacheClient((HOST, p.port("z")), timeout=10)
    for i in range(3):
        for j in range(0, 500, 50):
            assert direct.get(f"k{i}:{j}") == front.get(f"k{i}:{j}") is not None


def test_warm_up_of_10k_keys_with_no_miss(procs):
    cold = [procs.memcached(), procs.memcached()]
    warm = [procs.memcached(), procs.memcached()]
    p = start_walnut(procs, {
        "cold": memcache_pool(cold),
        "warm": memcache_pool(warm),
        "fresh": {"timeout": 2000, "warm_up": ["cold", "warm"]},
    }, args=["--workers", "1"])
    w = MemcacheClient((HOST, p.port("warm")), timeout=10)
    c = MemcacheClient((HOST, p.port("cold")), timeout=10)
    keys = [f"item:{i}" for i in range(10_000)]
    for i in range(0, len(keys), 500):
        w.set_many({k: f"v{k}".encode() for k in keys[i:i + 500]}, expire=600)
    f = MemcacheClient((HOST, p.port("fresh")), timeout=10)
    misses = sum(1 for k in keys if f.get(k) != f"v{k}".encode())
    assert misses == 0
    # Copied to the cold pool, TTL kept (about 600 s left, not 0 = never).
    wait_until(lambda: c.get(keys[-1]) == f"v{keys[-1]}".encode(), 10, what="the last copy")
    assert sum(1 for k in keys[:2000] if c.get(k) == f"v{k}".encode()) == 2000
    raw = MemcacheClient((HOST, cold[0].port), timeout=10)
    owner = next(k for k in keys if raw.get(k) is not None)
    ttl = raw.raw_command(f"mg {owner} t".encode(), end_tokens=b"\r\n")
    assert ttl.startswith(b"HD t") and 500 < int(ttl.split(b"t")[1]) <= 600, ttl
    # Writes go to the cold pool only; deletes to both.
    f.set("new", b"n", noreply=False)
    assert c.get("new") == b"n" and w.get("new") is None
    f.delete(keys[0], noreply=False)
    wait_until(lambda: w.get(keys[0]) is None, 10, what="the delete reached the warm pool")
    assert c.get(keys[0]) is None and f.get(keys[0]) is None


def test_redis_warm_up_keeps_the_ttl(procs):
    cold, warm = [procs.redis()], [procs.redis()]
    p = start_walnut(procs, {
        "cold": redis_pool(cold), "warm": redis_pool(warm),
        "fresh": {"redis": True, "timeout": 2000, "warm_up": ["cold", "warm"]},
    }, args=["--workers", "1"])
    rw = rclient(warm[0].port)
    rw.set("s", "v", px=500_000)
    rw.rpush("l", "a", "b")
    f = rclient(p.port("fresh"))
    assert f.get("s") == b"v"
    assert f.lrange("l", 0, -1) == [b"a", b"b"]
    rc = rclient(cold[0].port)
    wait_until(lambda: rc.exists("s") and rc.exists("l"), 10, what="copies in the cold pool")
    assert 400_000 < rc.pttl("s") <= 500_000
    assert rc.pttl("l") == -1
    rc.set("s", "newer")
    rw.set("s", "older")
    assert f.get("s") == b"newer", "the cold pool answers first once it has the key"


class FlagSerde:
    """Values as (bytes, flags), to see the flags a reply carries."""

    def serialize(self, key, value):
        return value

    def deserialize(self, key, value, flags):
        return value, flags


def test_warm_up_multiget_falls_over_per_key(procs):
    cold = [procs.memcached(), procs.memcached()]
    warm = [procs.memcached(), procs.memcached()]
    p = start_walnut(procs, {
        "cold": memcache_pool(cold),
        "warm": memcache_pool(warm),
        "fresh": {"timeout": 2000, "warm_up": ["cold", "warm"]},
    }, args=["--workers", "1"])
    w = MemcacheClient((HOST, p.port("warm")), timeout=10, serde=FlagSerde())
    keys = [f"mg:{i}" for i in range(2000)]
    want = {k: (f"v{k}".encode(), i % 7, 300 + i % 200) for i, k in enumerate(keys)}
    start = time.monotonic()
    for k, (v, flags, ttl) in want.items():
        w.set(k, (v, flags), expire=ttl, noreply=True)
    assert w.get(keys[-1]) == want[keys[-1]][:2]
    f = MemcacheClient((HOST, p.port("fresh")), timeout=10, serde=FlagSerde())
    misses, wrong = 0, []
    for i in range(0, len(keys), 50):
        batch = keys[i:i + 50] + ["mg:nowhere"]
        got = f.get_many(batch)
        assert "mg:nowhere" not in got
        for k in keys[i:i + 50]:
            if k not in got:
                misses += 1
            elif got[k] != want[k][:2]:
                wrong.append((k, got[k]))
    assert misses == 0 and not wrong, (misses, wrong[:5])
    # Every value copied to the cold pool, flags and TTL kept.
    c = MemcacheClient((HOST, p.port("cold")), timeout=10, serde=FlagSerde())
    wait_until(lambda: len(c.get_many(keys[-50:])) == 50, 10, what="the last copies")
    held = {}
    for i in range(0, len(keys), 100):
        held.update(c.get_many(keys[i:i + 100]))
    assert {k: held.get(k) for k in keys} == {k: want[k][:2] for k in keys}
    elapsed = time.monotonic() - start
    raw = MemcacheClient((HOST, p.port("cold")), timeout=10)
    for k in keys[::97]:
        line = raw.raw_command(f"mg {k} t".encode(), end_tokens=b"\r\n")
        assert line.startswith(b"HD t"), line
        left = int(line.split(b"t")[1])
        assert want[k][2] - elapsed - 2 <= left <= want[k][2], (k, left, want[k][2], elapsed)
    # Now the cold pool answers: a newer value there wins over the warm one.
    c.set(keys[0], (b"newer", 1), noreply=False)
    assert f.get_many(keys[:3])[keys[0]] == (b"newer", 1)


def test_redis_warm_up_mget_falls_over_per_key(procs):
    cold, warm = [procs.redis(), procs.redis()], [procs.redis(), procs.redis()]
    p = start_walnut(procs, {
        "cold": redis_pool(cold), "warm": redis_pool(warm),
        "fresh": {"redis": True, "timeout": 2000, "warm_up": ["cold", "warm"]},
    }, args=["--workers", "1"])
    rw, rc = rclient(p.port("warm")), rclient(p.port("cold"))
    keys = [f"rk:{i}" for i in range(300)]
    want = {}
    for i, k in enumerate(keys):
        if i % 5 == 4:
            want[k] = None  # nowhere
        elif i % 5 == 3:
            rc.set(k, f"cold{i}")  # already in the cold pool
            rw.set(k, f"old{i}", px=300_000)
            want[k] = f"cold{i}".encode()
        else:
            rw.set(k, f"v{i}", px=300_000)
            want[k] = f"v{i}".encode()
    f = rclient(p.port("fresh"))
    for i in range(0, len(keys), 60):
        batch = keys[i:i + 60]
        assert f.mget(batch) == [want[k] for k in batch]
    found = [k for k in keys if want[k] is not None]
    wait_until(lambda: all(rc.mget(found[-20:])), 10, what="the copies")
    assert rc.mget(keys) == [want[k] for k in keys]
    assert rc.exists(*[k for k in keys if want[k] is None]) == 0, "a miss is not copied"
    for i in range(0, len(keys), 7):
        k = keys[i]
        if i % 5 == 3:
            assert rc.pttl(k) == -1, "the cold pool's own value stays"
        elif i % 5 != 4:
            assert 290_000 < rc.pttl(k) <= 300_000, (k, rc.pttl(k))
