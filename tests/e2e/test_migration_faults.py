"""Online scale-out, its edges: a pool changed again while its migration
runs (keys still on the owner of the first configuration, keys written
since on the owner of the second: both found, both moved; the new
migration is the one reported from the reload on), a reload of
something else meanwhile (pulling goes on), and a new owner that dies
mid-migration (the migration waits for it instead of ending with keys
left behind; only what had already moved to it is lost with it), a walk
of an old server cut off (walked again), a hot
upgrade mid-migration (the new binary carries it on), and a migrator
killed mid-migration (restarted, it ends the migration with nothing
failed), and keys overwritten by clients while the migrator copies them
(the write wins)."""

from __future__ import annotations

import pytest

import hashlib
import random
import signal
import threading
import time

import redis
from pymemcache.client.base import Client as MemcacheClient
from redis.backoff import NoBackoff
from redis.retry import Retry

import os

from procmodel import children, cmdline, wait_gone, wait_log, wait_workers, workers_of
from procs import HOST, Proxy, RawConn, free_port, memcache_pool, redis_pool, to_yaml, wait_until
from test_migration_bg import admin, redis_migrating, sources, state, written_then_grown

# Minutes of work in all: left out of `make quick`.
pytestmark = pytest.mark.slow

N = 2000


def key(i: int) -> str:
    return "f" + hashlib.sha1(str(i).encode()).hexdigest()[:10]


class Checker(threading.Thread):
    """A busy client that reads random keys and checks every value, and
    now and then writes a new value (which later reads must see)."""

    def __init__(self, get, put):
        super().__init__(daemon=True)
        self.get, self.put = get, put
        self.want = {i: f"v{i}".encode() for i in range(N)}
        self.stop = threading.Event()
        self.reads = self.misses = self.stale = self.errors = 0
        self.failures: list[str] = []

    def run(self) -> None:
        rnd = random.Random(7)
        while not self.stop.is_set():
            i = rnd.randrange(N)
            try:
                if rnd.random() < 0.1:
                    v = f"w{i}-{self.reads}".encode()
                    self.put(key(i), v)
                    self.want[i] = v
                    continue
                got = self.get(key(i))
                self.reads += 1
                if got is None:
                    self.misses += 1
                    self.failures.append(f"miss {i}")
                elif got != self.want[i]:
                    self.stale += 1
                    self.failures.append(f"stale {i}: {got!r} != {self.want[i]!r}")
            except Exception as e:  # noqa: BLE001 - every failure is counted
                self.errors += 1
                self.failures.append(f"error {i}: {e!r}")


def test_a_second_change_while_a_migration_runs(procs):
    mcs = procs.memcacheds(4)
    rds = [procs.redis() for _ in range(4)]
    mc_port, rd_port = free_port(), free_port()

    def conf(idx: list[int], rate: int, ports=(mc_port, rd_port), **extra) -> dict:
        mc = memcache_pool([mcs[i] for i in idx], listen=f"{HOST}:{ports[0]}", migration=True,
                           migration_rate=rate, **extra)
        rd = redis_pool([rds[i] for i in idx], listen=f"{HOST}:{ports[1]}", migration=True,
                        migration_rate=rate, **extra)
        return {"mc": mc, "rd": rd}

    p = Proxy("walnut", procs.workdir, {}, extra_args=["--workers", "2"])
    p.conf_path.write_text(to_yaml(conf([0, 1], 150)))
    p.ports = {"mc": mc_port, "rd": rd_port}
    procs.started.append(p)
    p.start()
    gen = wait_workers(p.pid, 2)
    mc = MemcacheClient((HOST, mc_port))
    r = redis.Redis(host=HOST, port=rd_port, protocol=2)
    for i in range(N):
        mc.set(key(i), f"v{i}".encode(), noreply=False)
        r.set(key(i), f"v{i}")

    mcc = MemcacheClient((HOST, mc_port), timeout=10)
    rc = redis.Redis(host=HOST, port=rd_port, protocol=2, retry=Retry(NoBackoff(), 0),
                     socket_timeout=10)
    checkers = [
        Checker(mcc.get, lambda k, v: mcc.set(k, v, noreply=False)),
        Checker(rc.get, rc.set),
    ]
    for c in checkers:
        c.start()

    def reload(doc: dict) -> None:
        nonlocal gen
        p.conf_path.write_text(to_yaml(doc))
        p.signal(signal.SIGHUP)
        gen = wait_workers(p.pid, 2, exclude=gen.values())

    # A → B: a server added, moving slowly. The migrator walking the old
    # servers is what is waited for, not keys it moved: the busy checkers'
    # reads and writes pull the moving keys they name, and in some runs
    # they named nearly all of them before the migrator moved 30 (its
    # pace backs off for them), which then ended with fewer moved.
    reload(conf([0, 1, 2], 150))
    for pool in ("mc", "rd"):
        wait_until(lambda pool=pool: int(state(p.admin_port, pool).get("scanned", 0)) > 30, 30,
                   what=f"the migrator of {pool} walking")
    # Something else changes: the migration and the pulling go on (the
    # same migrator, moving on; or, when the busy checkers' reads had
    # pulled nearly every key left, ending).
    def migrator(pool: str) -> list[int]:
        return [c for c in children(p.pid) if cmdline(c).startswith(f"walnut: migrator {pool}")]

    migrators = {pool: migrator(pool) for pool in ("mc", "rd")}
    reload(conf([0, 1, 2], 150, timeout=4000))
    moved = {pool: int(state(p.admin_port, pool)["moved"]) for pool in ("mc", "rd")}
    for pool in ("mc", "rd"):
        def going_on(pool=pool) -> bool:
            st = state(p.admin_port, pool)
            return int(st["moved"]) > moved[pool] + 20 or st["state"] == "done"
        wait_until(going_on, 30, what=f"{pool}'s migration going on after an unrelated reload")
        if state(p.admin_port, pool)["state"] != "done":
            assert migrator(pool) == migrators[pool], (pool, migrators[pool])
    # B → C before B's migration ended: the first server leaves, a fourth
    # comes. Keys are on A's or B's owners; all of them must end on C's.
    reload(conf([1, 2, 3], 50000, timeout=4000))
    for pool in ("mc", "rd"):
        wait_until(lambda pool=pool: state(p.admin_port, pool).get("state") == "done", 90,
                   what=f"migration of {pool} to end")
    time.sleep(0.2)  # a few more checked reads after the end
    for c in checkers:
        c.stop.set()
        c.join(10)
    for c in checkers:
        assert c.reads > 200, c.reads
        assert (c.misses, c.stale, c.errors) == (0, 0, 0), c.failures[:10]

    # The oracle: nutcracker on C finds every key, with the last value written.
    oracle_ports = (free_port(), free_port())
    oracle = conf([1, 2, 3], 1, oracle_ports)
    for v in oracle.values():
        del v["migration"], v["migration_rate"]
    procs.proxy("nutcracker", oracle)
    mwant, rwant = checkers[0].want, checkers[1].want
    with RawConn(oracle_ports[0]) as c:
        for i in range(N):
            k = key(i).encode()
            got = c.request(b"get %s\r\n" % k, b"END\r\n")
            v = mwant[i]
            assert got == b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, len(v), v), (i, got)
    nr = redis.Redis(host=HOST, port=oracle_ports[1], protocol=2, lib_name=None, lib_version=None)
    for i in range(N):
        assert nr.get(key(i)) == rwant[i], i
    # And nowhere else: the server that left holds nothing of the pool.
    assert redis.Redis(host=HOST, port=rds[0].port).dbsize() == 0
    assert sum(redis.Redis(host=HOST, port=x.port).dbsize() for x in rds) == N
    assert not MemcacheClient((HOST, mcs[0].port)).get_many([key(i) for i in range(N)])


def test_a_change_after_a_migration_ended_is_the_one_reported(procs):
    """The admin reports the migration a reload starts from the reload on:
    pending until the placement switch, never the end of the one before,
    which a script waiting for `state=done` would take for the new one's
    (and then find keys not moved yet)."""
    rds = [procs.redis() for _ in range(4)]
    p, _ = redis_migrating(procs, rds, rate=100000, workers=2)  # on rds[0], rds[1]
    port = p.ports["rd"]

    def conf(idx: list[int]) -> str:
        return to_yaml({"rd": redis_pool([rds[i] for i in idx], listen=f"{HOST}:{port}",
                                         migration=True, migration_rate=100000)})

    gen = wait_workers(p.pid, 2)
    r = redis.Redis(host=HOST, port=port, protocol=2)
    pipe = r.pipeline(transaction=False)
    for i in range(500):
        pipe.set(key(i), f"v{i}")
    pipe.execute()
    p.conf_path.write_text(conf([0, 1, 2]))
    p.signal(signal.SIGHUP)
    gen = wait_workers(p.pid, 2, exclude=gen.values())
    wait_until(lambda: state(p.admin_port, "rd").get("state") == "done", 30,
               what="the first migration to end")
    assert len(sources(p.admin_port, "rd")) == 2

    # The first admin reply that shows the reload's generation (`status`
    # and `migration` answered together, from one state of the master)
    # comes before the new workers have taken over (no placement switch,
    # no migrator started yet, unless this test was held off the CPU):
    # the migration reported is the new one, walking the three servers of
    # the configuration before, pending (or under way, or done), never
    # the first one's end.
    gen_line = next(x for x in admin(p.admin_port, "status").splitlines()
                    if x.startswith("generation:"))
    p.conf_path.write_text(conf([1, 2, 3]))
    p.signal(signal.SIGHUP)
    reply = wait_until(lambda: (r := admin(p.admin_port, "status\r\nmigration"))
                       and gen_line not in r.splitlines() and r, 10, interval=0.001,
                       what="the reload")
    lines = [dict(w.split("=", 1) for w in line.split() if "=" in w)
             for line in reply.splitlines()]
    pool = [kv for kv in lines if kv.get("pool") == "rd" and "source" not in kv]
    walked = sorted(kv["source"] for kv in lines if kv.get("pool") == "rd" and "source" in kv)
    assert walked == sorted(f"{HOST}:{rds[i].port}" for i in (0, 1, 2)), (walked, pool)
    assert pool[0]["state"] in ("pending", "running", "done"), pool
    wait_until(lambda: state(p.admin_port, "rd").get("state") == "done", 30,
               what="the second migration to end")
    # Done means done: every key on its owner of the last configuration.
    assert redis.Redis(host=HOST, port=rds[0].port).dbsize() == 0
    for i in range(500):
        assert r.get(key(i)) == f"v{i}".encode(), i


def test_a_new_owner_that_dies_mid_migration(procs):
    rds = [procs.redis() for _ in range(3)]
    p, conf = redis_migrating(procs, rds, rate=200, workers=2)
    port = p.ports["rd"]
    gen = wait_workers(p.pid, 2)
    r = redis.Redis(host=HOST, port=port, protocol=2, retry=Retry(NoBackoff(), 0),
                    socket_timeout=10)
    written_then_grown(p, conf, r, [key(i) for i in range(N)])
    wait_workers(p.pid, 2, exclude=gen.values())
    wait_until(lambda: int(state(p.admin_port, "rd").get("moved", 0)) > 40, 30, what="keys moving")
    # The new owner dies: what had moved to it is lost with it (as any
    # data on a dead server); the migration neither ends nor hangs.
    rds[2].kill()
    wait_until(lambda: int(state(p.admin_port, "rd").get("failed", 0)) > 0, 30,
               what="moves to the dead server failing")
    moved = int(state(p.admin_port, "rd")["moved"])
    # Keys that stay where they were are served meanwhile.
    on_live = [i for i in range(N)
               if any(redis.Redis(host=HOST, port=x.port).exists(key(i)) for x in rds[:2])]
    served = errors = 0
    for i in on_live[:300]:
        try:
            served += r.get(key(i)) == f"v{i}".encode()
        except redis.RedisError:
            errors += 1  # a key due to move to the dead server
    assert served + errors == 300 and served > 150, (served, errors)
    st = state(p.admin_port, "rd")
    assert st["state"] == "running" and st["keys"] == str(N) and int(st["eta_seconds"]) >= 0, st
    # The same progress in the pool's object of the stats JSON.
    doc = p.stats()["rd"]
    assert doc["migration_state"] == "running" and doc["migration_keys"] == N, doc
    assert doc["migration_moved"] >= moved and doc["migration_failed"] > 0, doc
    # It comes back, empty: the keys not moved yet move now, and then the
    # migration ends with nothing left on a server that does not own it.
    procs.redis(port=rds[2].port)
    wait_until(lambda: state(p.admin_port, "rd").get("state") == "done", 90,
               what="the migration to end once the server is back")
    found = sum(redis.Redis(host=HOST, port=x.port).dbsize() for x in rds)
    assert N - found == moved, (found, moved)
    # Every surviving key is where nutcracker puts it.
    oracle_port = free_port()
    procs.proxy("nutcracker", {"rd": redis_pool(rds, listen=f"{HOST}:{oracle_port}")})
    nr = redis.Redis(host=HOST, port=oracle_port, protocol=2, lib_name=None, lib_version=None)
    assert sum(1 for i in range(N) if nr.get(key(i)) == f"v{i}".encode()) == found


def test_a_walk_that_breaks_off_is_walked_again(procs):
    """The migrator's connection to the old server it walks is killed
    mid-walk: that server is walked again in a next pass, so the migration
    does not end with keys left where no worker looks for them any more."""
    rds = [procs.redis() for _ in range(3)]
    p, conf = redis_migrating(procs, rds, rate=60, workers=2)
    r = redis.Redis(host=HOST, port=p.ports["rd"], protocol=2, socket_timeout=10)
    keys = [key(i) for i in range(1200)]
    written_then_grown(p, conf, r, keys)
    first = f"{HOST}:{rds[0].port}"
    # The first old server is walked first; it is the one whose walk is
    # cut while its keys move, slowly.
    wait_until(lambda: sources(p.admin_port, "rd").get(first, {}).get("moved", 0) > 10, 30,
               what="keys of the first old server moving")
    old = redis.Redis(host=HOST, port=rds[0].port)
    assert old.client_kill_filter(_type="normal", skipme=True) >= 1
    st = state(p.admin_port, "rd")
    assert st["state"] == "running" and int(st["moved"]) < 300, st
    wait_until(lambda: state(p.admin_port, "rd").get("state") == "done", 90,
               what="the migration to end")
    assert int(state(p.admin_port, "rd")["failed"]) >= 1
    # Every key readable through the proxy (no worker pulls any more):
    # none was left behind on an old server that no longer owns it.
    assert [k for k in keys if r.get(k) is None] == []


def test_a_hot_upgrade_while_a_migration_runs(procs):
    rds = [procs.redis() for _ in range(3)]
    port = free_port()

    def conf(n: int, rate: int) -> str:
        return to_yaml({"rd": redis_pool(rds[:n], listen=f"{HOST}:{port}", migration=True,
                                         migration_rate=rate)})

    p = Proxy("walnut", procs.workdir, {}, extra_args=["--workers", "2"])
    p.conf_path.write_text(conf(2, 100))
    p.ports = {"rd": port}
    procs.started.append(p)
    p.start()
    gen = wait_workers(p.pid, 2)
    r = redis.Redis(host=HOST, port=port, protocol=2)
    pipe = r.pipeline(transaction=False)
    for i in range(N):
        pipe.set(key(i), f"v{i}")
    pipe.execute()
    rc = redis.Redis(host=HOST, port=port, protocol=2, retry=Retry(NoBackoff(), 0),
                     socket_timeout=10)
    checker = Checker(rc.get, rc.set)
    checker.start()
    p.conf_path.write_text(conf(3, 100))
    p.signal(signal.SIGHUP)
    gen = wait_workers(p.pid, 2, exclude=gen.values())
    wait_until(lambda: int(state(p.admin_port, "rd").get("moved", 0)) > 20, 30, what="keys moving")
    # The new binary reads the file: same servers, a faster migration.
    p.conf_path.write_text(conf(3, 50000))
    new_master = None
    try:
        p.signal(signal.SIGUSR2)

        def new_binary():
            kids = [c for c in children(p.pid) if c not in gen.values()]
            return next((k for k in kids if cmdline(k) == " ".join(p.argv)), None)

        new_master = wait_until(new_binary, 10, interval=0.01, what="new master")
        wait_workers(new_master, 2)
        wait_log(p.log_path, "carrying on the migrations of the previous binary")
        p.signal(signal.SIGQUIT)
        p.proc.wait(timeout=30)
        # The new binary's migrator starts once the old binary is gone,
        # and moves what is left.
        wait_until(lambda: state(p.admin_port, "rd").get("state") == "done", 60,
                   what="the carried-on migration to end")
        checker.stop.set()
        checker.join(10)
        assert checker.reads > 100, checker.reads
        assert (checker.misses, checker.stale, checker.errors) == (0, 0, 0), checker.failures[:10]
        oracle_port = free_port()
        procs.proxy("nutcracker", {"rd": redis_pool(rds, listen=f"{HOST}:{oracle_port}")})
        nr = redis.Redis(host=HOST, port=oracle_port, protocol=2, lib_name=None, lib_version=None)
        for i in range(N):
            assert nr.get(key(i)) == checker.want[i], i
        assert sum(redis.Redis(host=HOST, port=x.port).dbsize() for x in rds) == N
    finally:
        checker.stop.set()
        if new_master is not None:
            kids = list(workers_of(new_master).values())
            os.kill(new_master, signal.SIGTERM)
            wait_gone(new_master)
            for w in kids:
                wait_gone(w)


def test_a_replicated_pool_grows_under_load(procs):
    """replicas: 2, a fourth server added: every key ends on exactly its two
    new owners (reads through a fresh walnut that picks a random replica
    find every value; nutcracker finds each on its first owner)."""
    mcs = procs.memcacheds(4)
    port = free_port()

    def pool(n: int, rate: int, listen: int = port, **extra) -> dict:
        return memcache_pool(mcs[:n], listen=f"{HOST}:{listen}", replicas=2, **extra,
                             **({"migration": True, "migration_rate": rate} if rate else {}))

    p = Proxy("walnut", procs.workdir, {}, extra_args=["--workers", "2"])
    p.conf_path.write_text(to_yaml({"mc": pool(3, 300)}))
    p.ports = {"mc": port}
    procs.started.append(p)
    p.start()
    gen = wait_workers(p.pid, 2)
    mc = MemcacheClient((HOST, port))
    for i in range(N):
        mc.set(key(i), f"v{i}".encode(), noreply=False)
    mcc = MemcacheClient((HOST, port), timeout=10)
    checker = Checker(mcc.get, lambda k, v: mcc.set(k, v, noreply=False))
    checker.start()
    p.conf_path.write_text(to_yaml({"mc": pool(4, 300)}))
    p.signal(signal.SIGHUP)
    wait_workers(p.pid, 2, exclude=gen.values())
    wait_until(lambda: state(p.admin_port, "mc").get("state") == "done", 90,
               what="the replicated pool's migration to end")
    checker.stop.set()
    checker.join(10)
    assert checker.reads > 100, checker.reads
    assert (checker.misses, checker.stale, checker.errors) == (0, 0, 0), checker.failures[:10]
    assert int(state(p.admin_port, "mc")["moved"]) > 0
    # Exactly two copies of every key, nowhere else.
    direct = [MemcacheClient((HOST, m.port)) for m in mcs]
    names = [key(i) for i in range(N)]
    copies = [d.get_many(names) for d in direct]
    for i, k in enumerate(names):
        held = [c[k] for c in copies if k in c]
        assert held == [checker.want[i]] * 2, (i, held)
    # On the right two: a walnut without migration reading a random replica.
    fresh_port = free_port()
    procs.proxy("walnut", {"mc": pool(4, 0, fresh_port, replica_read="random")})
    fresh = MemcacheClient((HOST, fresh_port))
    for _ in range(3):
        got = fresh.get_many(names)
        assert all(got.get(k) == checker.want[i] for i, k in enumerate(names))
    oracle_port = free_port()
    procs.proxy("nutcracker", {"mc": memcache_pool(mcs, listen=f"{HOST}:{oracle_port}")})
    nc = MemcacheClient((HOST, oracle_port))
    assert all(nc.get(k) == checker.want[i] for i, k in enumerate(names))


def migrator_of(master: int, pool: str) -> int | None:
    """The pid of the migrator of ``pool`` (a child of ``master``), if any."""
    for pid in children(master):
        if cmdline(pid) == f"walnut: migrator {pool}":
            return pid
    return None


def test_a_killed_migrator_is_restarted_and_finishes(procs):
    """SIGKILL of the migrator mid-migration (a key possibly copied but not
    yet deleted from its old owner): the master starts another, which
    moves what is left; the migration ends done, nothing failed, and
    every key is on its new owner only."""
    mcs = procs.memcacheds(3)
    rds = [procs.redis() for _ in range(3)]
    ports = (free_port(), free_port())

    def pools(n: int, ports=ports, migration=True) -> dict:
        extra = {"migration": True, "migration_rate": 200} if migration else {}
        return {"mc": memcache_pool(mcs[:n], listen=f"{HOST}:{ports[0]}", **extra),
                "rd": redis_pool(rds[:n], listen=f"{HOST}:{ports[1]}", **extra)}

    p = Proxy("walnut", procs.workdir, {}, extra_args=["--workers", "2"])
    p.conf_path.write_text(to_yaml(pools(2)))
    p.ports = {"mc": ports[0], "rd": ports[1]}
    procs.started.append(p)
    p.start()
    gen = wait_workers(p.pid, 2)
    mc = MemcacheClient((HOST, ports[0]))
    r = redis.Redis(host=HOST, port=ports[1], protocol=2, retry=Retry(NoBackoff(), 0),
                    socket_timeout=10)
    pipe = r.pipeline(transaction=False)
    for i in range(N):
        mc.set(key(i), f"v{i}".encode(), noreply=False, flags=i % 3)
        pipe.set(key(i), f"v{i}").hset(f"h{key(i)}", "f", str(i))
    pipe.execute()
    p.conf_path.write_text(to_yaml(pools(3)))
    p.signal(signal.SIGHUP)
    wait_workers(p.pid, 2, exclude=gen.values())
    for pool in ("mc", "rd"):
        # At 200 keys a second the third of the keys that move take
        # seconds: it is surely in the middle when killed.
        wait_until(lambda pool=pool: int(state(p.admin_port, pool).get("moved", 0)) > 20
                   and migrator_of(p.pid, pool), 30, what=f"{pool}'s migrator moving keys")
        killed = migrator_of(p.pid, pool)
        assert killed and state(p.admin_port, pool)["state"] == "running"
        os.kill(killed, signal.SIGKILL)
        wait_log(p.log_path, f"pool '{pool}': migrator (pid {killed}) ended abnormally; restarting")
    for pool in ("mc", "rd"):
        wait_until(lambda pool=pool: state(p.admin_port, pool).get("state") == "done", 90,
                   what=f"{pool}'s restarted migration to end")
        st = state(p.admin_port, pool)
        assert st["failed"] == "0", st
    log = p.log_path.read_text()
    for pool in ("mc", "rd"):
        # Started after the reload, then once more after the kill.
        assert log.count(f"pool '{pool}': migrator started, pid") == 2, pool
    # Each key once, and where nutcracker computes for the new servers.
    assert sum(len(MemcacheClient((HOST, m.port)).get_many([key(i) for i in range(N)]))
               for m in mcs) == N
    assert sum(redis.Redis(host=HOST, port=x.port).dbsize() for x in rds) == 2 * N
    assert redis.Redis(host=HOST, port=rds[2].port).dbsize() > 0
    oracle_ports = (free_port(), free_port())
    procs.proxy("nutcracker", pools(3, oracle_ports, migration=False))
    with RawConn(oracle_ports[0]) as c:
        for i in range(N):
            k = key(i).encode()
            want = b"VALUE %s %d %d\r\nv%d\r\nEND\r\n" % (k, i % 3, len(b"v%d" % i), i)
            assert c.request(b"get %s\r\n" % k, b"END\r\n") == want, i
    nr = redis.Redis(host=HOST, port=oracle_ports[1], protocol=2, lib_name=None, lib_version=None)
    for i in range(N):
        assert nr.get(key(i)) == f"v{i}".encode() and nr.hget(f"h{key(i)}", "f") == str(i).encode(), i


def migrator_order_redis(d: redis.Redis) -> list[str]:
    """The order `SCAN` lists a server's keys in, as the migrator will (the
    cursor walks buckets in a fixed order; deleting keys, as moving them
    does, neither reorders nor resizes a table that stays this full)."""
    return [k.decode() for k in d.scan_iter(count=100)]


def migrator_order_memcache(port: int) -> list[str]:
    """The order `lru_crawler metadump all` lists a server's keys in (the
    migrator's; nearly the same a few seconds later with no reads)."""
    with RawConn(port, timeout=10) as c:
        dump = c.request(b"lru_crawler metadump all\r\n", b"END\r\n")
    return [w[4:].decode() for line in dump.split(b"\n") for w in line.split()[:1] if w.startswith(b"key=")]


def test_a_write_while_the_migrator_copies_the_key_wins(procs):
    """Clients overwrite keys through walnut right where the migrator is
    (following its per-server progress through its old servers' listing
    order), so that its copy of a key and a client's pull-then-write of the
    same key overlap: whichever copies first, the migrator's `RESTORE`
    without `REPLACE` / `ms ... ME` never replaces the client's value. At
    the end every overwritten key has its new value, on the owner
    nutcracker computes for the new configuration only; every other key its
    first value."""
    mcs = procs.memcacheds(3)
    rds = [procs.redis() for _ in range(3)]
    mc_port, rd_port = free_port(), free_port()

    def conf(n: int, ports=(mc_port, rd_port), migration=True) -> dict:
        extra = {"migration": True, "migration_rate": 100} if migration else {}
        return {"mc": memcache_pool(mcs[:n], listen=f"{HOST}:{ports[0]}", **extra),
                "rd": redis_pool(rds[:n], listen=f"{HOST}:{ports[1]}", **extra)}

    p = Proxy("walnut", procs.workdir, {}, extra_args=["--workers", "2"])
    p.conf_path.write_text(to_yaml(conf(2)))
    p.ports = {"mc": mc_port, "rd": rd_port}
    procs.started.append(p)
    p.start()
    gen = wait_workers(p.pid, 2)
    mc = MemcacheClient((HOST, mc_port), timeout=10)
    r = redis.Redis(host=HOST, port=rd_port, protocol=2, retry=Retry(NoBackoff(), 0), socket_timeout=10)
    pipe = r.pipeline(transaction=False)
    for i in range(N):
        mc.set(key(i), f"v{i}".encode(), noreply=False)
        pipe.set(key(i), f"v{i}")
    pipe.execute()
    mc_order = [migrator_order_memcache(m.port) for m in mcs[:2]]
    rd_order = [migrator_order_redis(redis.Redis(host=HOST, port=x.port)) for x in rds[:2]]
    assert sum(map(len, mc_order)) == N and sum(map(len, rd_order)) == N
    p.conf_path.write_text(to_yaml(conf(3)))
    p.signal(signal.SIGHUP)
    wait_workers(p.pid, 2, exclude=gen.values())

    mc_direct = [MemcacheClient((HOST, m.port)) for m in mcs]
    rd_direct = [redis.Redis(host=HOST, port=x.port) for x in rds]
    written: dict[str, dict[str, bytes]] = {"mc": {}, "rd": {}}
    # Keys still on the server they were written to when overwritten (so
    # not moved yet, by the migrator or a pull).
    unmoved: dict[str, set[str]] = {"mc": set(), "rd": set()}
    failures: list[str] = []

    def follow(pool: str, orders: list[list[str]], backends, direct, get, put) -> None:
        try:
            deadline = time.monotonic() + 120
            for si, order in enumerate(orders):
                pos = 0
                while pos < len(order) and time.monotonic() < deadline:
                    st = state(p.admin_port, pool)
                    if st.get("state") == "done":
                        return
                    src = sources(p.admin_port, pool).get(backends[si].address, {})
                    # The key it looked at last (it may be copying it now)
                    # and the next one.
                    upto = min(len(order), src.get("scanned", 0) + 1)
                    if pos < upto - 2:
                        pos = upto - 2
                    if pos >= upto:
                        time.sleep(0.002)  # it walks on at its own pace
                        continue
                    k = order[pos]
                    pos += 1
                    still = direct[si].get(k) is not None
                    v = f"new-{k}".encode()
                    put(k, v)
                    written[pool][k] = v
                    if still:
                        unmoved[pool].add(k)
                    if (got := get(k)) != v:
                        failures.append(f"{pool} {k}: read {got!r} after writing {v!r}")
                        return
        except Exception as e:  # noqa: BLE001 - every failure counts
            failures.append(f"{pool}: {e!r}")

    threads = [
        threading.Thread(target=follow, args=("mc", mc_order, mcs, mc_direct, mc.get,
                                              lambda k, v: mc.set(k, v, noreply=False)), daemon=True),
        threading.Thread(target=follow, args=("rd", rd_order, rds, rd_direct, r.get, r.set), daemon=True),
    ]
    for t in threads:
        t.start()
    for pool in ("mc", "rd"):
        wait_until(lambda pool=pool: state(p.admin_port, pool).get("state") == "done", 120,
                   what=f"migration of {pool} to end")
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert not failures, failures[:5]
    for pool in ("mc", "rd"):
        st = state(p.admin_port, pool)
        assert st["failed"] == "0" and int(st["moved"]) > 0, (pool, st)

    oracle_ports = (free_port(), free_port())
    procs.proxy("nutcracker", conf(3, oracle_ports, migration=False))
    nr = redis.Redis(host=HOST, port=oracle_ports[1], protocol=2, lib_name=None, lib_version=None)
    with RawConn(oracle_ports[0]) as c:
        for i in range(N):
            k = key(i)
            want = written["mc"].get(k, f"v{i}".encode())
            got = c.request(b"get %s\r\n" % k.encode(), b"END\r\n")
            assert got == b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k.encode(), len(want), want), (k, got)
            assert nr.get(k) == written["rd"].get(k, f"v{i}".encode()), k
    # Each key on one server only (the oracle's owner).
    keys = [key(i) for i in range(N)]
    assert sum(len(c.get_many(keys)) for c in mc_direct) == N
    assert sum(d.dbsize() for d in rd_direct) == N
    # The overwrites raced the migrator: many keys were written while
    # still on their old server, and ended on the new one.
    for pool, direct in (("mc", mc_direct), ("rd", rd_direct)):
        onto_new = [k for k in unmoved[pool] if direct[2].get(k) is not None]
        print(f"\n{pool}: {len(written[pool])} keys overwritten near the migrator, "
              f"{len(unmoved[pool])} not moved yet, {len(onto_new)} of them moved to the new server")
        assert len(onto_new) > 20, (pool, len(onto_new))
