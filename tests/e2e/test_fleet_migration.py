"""A placement change across a fleet: three walnuts in front of the same
servers (`migration: true`), busy clients writing shared counters and lists
through all three, a server added with `walnut fleet apply`. Every
acknowledged write must be there afterwards (the fleet barrier: no member
routes by the new placement until every member stopped routing by the old
one, see ARCHITECTURE.md, "A fleet's placement change")."""

from __future__ import annotations

import os
import random
import signal
import subprocess
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


class Clients:
    """CLIENTS threads running ``self.run(i)`` until ``self.stop`` is set:
    started on entering a ``with`` block, stopped and joined on leaving it."""

    def make_clients(self) -> None:
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(CLIENTS)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=15)


class Load(Clients):
    """Clients writing through every member until stopped; what each write
    was answered is kept, per key."""

    def __init__(self, kind: str, ports: list[int]):
        self.kind = kind
        self.ports = ports
        self.lock = threading.Lock()
        self.incr_acked = [0] * COUNTERS
        self.pushed: list[list[int]] = [[] for _ in range(LISTS)]
        self.acked = 0
        self.refused = 0
        self.errors: list[str] = []
        self.make_clients()

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


class Fleet:
    """etcd, three servers (two in the pool, one to add) and three members."""

    def __init__(self, procs, kind: str, ttl: int = 2, extra: tuple[str, ...] = ()):
        self.procs, self.kind = procs, kind
        self.etcd = start(procs, Etcd(procs.workdir))
        if kind == "redis":
            self.servers = [procs.redis() for _ in range(3)]
            self.make = redis_pool
        else:
            self.servers = [procs.memcached() for _ in range(3)]
            self.make = memcache_pool
        base = free_port()
        self.pools = {"p": self.make(self.servers[:2], listen=f"{HOST}:{base}", migration=True, migration_rate=20000)}
        assert apply(self.etcd, FLEET, procs.workdir, self.pools).returncode == 0
        self.members = [
            start(procs, Member(procs.workdir, self.etcd.url, FLEET, name, [base], offset=off, ttl=ttl, extra=extra))
            for name, off in (("a", 0), ("b", port_offset(base)), ("c", port_offset(base)))
        ]
        self.ports = [m.ports[0] for m in self.members]
        # A member routes a `migration: true` pool once its agent holds a
        # lease and its master runs what etcd holds.
        for p in self.ports:
            wait_for(lambda p=p: redis_or_mc_ok(kind, p), 10, f"member on {p} in step", step=0.05)
        if kind == "memcache":
            c = McClient((HOST, self.ports[0]), timeout=5)
            for i in range(COUNTERS):
                assert c.set(f"c:{i}", "0", noreply=False)

    def add_server(self, wait: float | None = 10) -> subprocess.CompletedProcess:
        self.pools["p"]["servers"] = self.make(self.servers)["servers"]
        return apply(self.etcd, FLEET, self.procs.workdir, self.pools, wait=wait)

    def migration_started(self, m: Member) -> bool:
        out = m.admin("migration")
        return "state=running" in out or "state=done" in out

    def wait_done(self, members) -> None:
        wait_for(lambda: all("state=done" in m.admin("migration") for m in members), 60, "migration done", step=0.2)


def metric_sum(members, name: str) -> float:
    """A worker metric summed over the workers of ``members``."""
    total = 0.0
    for m in members:
        for line in m.metrics().splitlines():
            if line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def report(what: str, load: Load, lost: tuple[int, int], extra: str = "") -> None:
    print(f"{what}: acknowledged {load.acked} writes, refused {load.refused}, "
          f"lost {lost[0]} increments and {lost[1]} pushes{extra}; errors seen: {sorted(set(load.errors))[:3]}")


@pytest.mark.parametrize("kind", ["redis", "memcache"])
def test_a_server_added_across_the_fleet_loses_no_acknowledged_write(procs, kind):
    """... and, the barrier being within --fleet-hold, no write is refused:
    a request for a moving key waits for the barrier (held) instead of
    being refused. One member's agent is frozen while the change is
    applied, so the barrier lasts until requests were seen held (on
    loopback it passes in tens of milliseconds, which busy clients on a
    loaded machine may not fall into), then it passes by itself."""
    # A lease long enough that the frozen agent's member stays in step
    # (its page runs to its last renewal plus the TTL) while it is frozen,
    # which lasts until a and b have reloaded and held a request: on a
    # loaded machine their reloads alone took over 1.5 s once.
    f = Fleet(procs, kind, ttl=8)
    a, b, c = f.members
    with Load(kind, f.ports) as load:
        wait_for(lambda: load.acked > 2000, 20, "load running")
        agent = c.freeze_agent()
        try:
            t0 = time.monotonic()
            r = f.add_server(wait=None)
            assert r.returncode == 0, r.stdout + r.stderr
            at_apply = load.acked
            # a and b prepared and wait for c: their requests for moving
            # keys are held, the others served. (In some runs none is seen
            # held within 5 s while a and b serve on, none on the added
            # server either: under investigation. Writes acknowledged are
            # checked below either way.)
            deadline = time.monotonic() + 5
            while (held_frozen := metric_sum([a, b], "walnut_worker_fleet_held_requests_total")) == 0:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            assert not f.migration_started(a) and not f.migration_started(b)
        finally:
            os.kill(agent, signal.SIGCONT)
        wait_for(lambda: all(f.migration_started(m) for m in f.members), 10, "barrier passed", step=0.05)
        applied = time.monotonic() - t0
        wait_for(lambda: load.acked > at_apply + 3000, 30, "load after the change")
    f.wait_done(f.members)
    lost = lost_writes(kind, f.ports[1], load)
    held = metric_sum(f.members, "walnut_worker_fleet_held_requests_total")
    held_s = metric_sum(f.members, "walnut_worker_fleet_held_seconds_total")
    refused = metric_sum(f.members, "walnut_worker_fleet_refused_requests_total")
    report(kind, load, lost, f"; applied by all in {applied:.2f} s (one agent frozen until {held_frozen:.0f} held); "
           f"{held:.0f} requests held by the barrier, {held_s / max(held, 1) * 1000:.1f} ms on average, {refused:.0f} refused")
    assert all(m.alive() for m in f.members)
    assert lost == (0, 0)
    # The held requests were answered once the barrier passed, none refused.
    assert held >= held_frozen
    assert refused == 0 and load.refused == 0, load.errors
    # The go reached the masters by the agents' wake-up (SIGURG), not by
    # their timed passes: a member whose master was mid-pass when its
    # agent wrote the go may find it first, not all three.
    woken = [m for m in f.members if "moved keys are pulled (go read on the agent's wake-up)" in m.log_path.read_text()]
    assert woken, "no member's master read the go on its agent's wake-up"


@pytest.mark.parametrize("when", ["before_prepare", "after_go"])
def test_a_member_killed_mid_change_holds_the_others_no_longer_than_its_lease(procs, when):
    f = Fleet(procs, "redis", ttl=2)
    a, b, c = f.members
    with Load("redis", f.ports[:2]) as load:
        wait_for(lambda: load.acked > 1000, 20, "load running")
        if when == "before_prepare":
            os.kill(c.pid, signal.SIGKILL)
        t0 = time.monotonic()
        assert f.add_server(wait=None).returncode == 0
        wait_for(lambda: f.migration_started(a) and f.migration_started(b), 10, "barrier passed", step=0.05)
        waited = time.monotonic() - t0
        if when == "after_go":
            os.kill(c.pid, signal.SIGKILL)
        at = load.acked
        wait_for(lambda: load.acked > at + 2000, 30, "load after the change")
    if when == "before_prepare":
        # The barrier waited for c's lease (2 s after its last renewal),
        # no longer.
        assert 0.5 < waited < 2 + 1.5, waited
    else:
        assert waited < 1.5, waited
    f.wait_done([a, b])
    lost = lost_writes("redis", f.ports[0], load)
    report(f"redis, member killed {when}", load, lost, f"; barrier passed {waited:.2f} s after the apply")
    assert lost == (0, 0)


def test_a_second_change_while_the_first_migrates(procs):
    """A server removed while the keys of the one just added still move:
    the second barrier fences keys that moved under either earlier
    placement; members pull from both."""
    f = Fleet(procs, "redis")
    s1, s2, s3 = f.servers
    # Keys the clients leave alone: only the migrator moves them, at 50 a
    # second, so the first migration is still running at the second change.
    r0 = redis.Redis(host=HOST, port=f.ports[0], socket_timeout=10)
    pipe = r0.pipeline(transaction=False)
    for i in range(2000):
        pipe.set(f"x:{i}", i)
    pipe.execute()
    with Load("redis", f.ports) as load:
        wait_for(lambda: load.acked > 1500, 20, "load running")
        f.pools["p"]["migration_rate"] = 50
        assert f.add_server().returncode == 0
        at = load.acked
        wait_for(lambda: load.acked > at + 1000, 30, "load after the first change")
        wait_for(lambda: all("state=running" in m.admin("migration") for m in f.members), 10, "first migration running", step=0.05)
        f.pools["p"]["servers"] = f.make([s1, s3])["servers"]
        f.pools["p"]["migration_rate"] = 20000
        r = apply(f.etcd, FLEET, procs.workdir, f.pools, wait=10)
        assert r.returncode == 0, r.stdout + r.stderr
        at = load.acked
        wait_for(lambda: load.acked > at + 2000, 30, "load after the second change")
    f.wait_done(f.members)
    lost = lost_writes("redis", f.ports[2], load)
    report("redis, second change in flight", load, lost)
    assert lost == (0, 0)
    assert r0.mget([f"x:{i}" for i in range(2000)]) == [str(i).encode() for i in range(2000)]


def test_a_member_frozen_past_its_lease_fences_itself_until_it_caught_up(procs):
    f = Fleet(procs, "redis", ttl=2)
    a, b, c = f.members
    queued: list = []
    with Load("redis", f.ports[:2]) as load:
        wait_for(lambda: load.acked > 1000, 20, "load running")
        os.killpg(c.pid, signal.SIGSTOP)
        try:
            assert f.add_server(wait=None).returncode == 0
            wait_for(lambda: f.migration_started(a) and f.migration_started(b), 10, "barrier passed without c", step=0.05)
            at = load.acked
            wait_for(lambda: load.acked > at + 1000, 30, "load while c is frozen")
            # Requests that reach c while it is frozen: it reads them first
            # thing when it runs again, under its stale view.
            rc = redis.Redis(host=HOST, port=c.ports[0], socket_timeout=10)
            keys = [f"c:{i}" for i in random.Random(7).sample(range(COUNTERS), 200)]

            def send():
                pipe = rc.pipeline(transaction=False)
                for k in keys:
                    pipe.incr(k)
                queued.extend(pipe.execute(raise_on_error=False))

            t = threading.Thread(target=send)
            t.start()
            time.sleep(0.3)
        finally:
            os.killpg(c.pid, signal.SIGCONT)
        t.join(timeout=15)
        assert len(queued) == len(keys)
        for k, v in zip(keys, queued):
            if not isinstance(v, Exception):
                load.incr_acked[int(k[2:])] += 1
        # Refused while it is not in step (or, if its agent caught up
        # first, refused for moved keys while the barrier holds, or served
        # by the new placement once it passed: how many of each depends on
        # which comes first on waking). Without the fence they would be
        # served under the stale placement, writing moved keys to their
        # old owner: the lost-write count below is what tells.
        refused = [v for v in queued if isinstance(v, Exception)]
        assert all("fleet" in str(v) for v in refused), refused[:3]
        lapsed = [v for v in refused if "fleet membership lapsed" in str(v)]
        rev = status(f.etcd, FLEET)["revision"]
        wait_for(lambda: c.revision() >= rev and f.migration_started(c), 15, "c caught up", step=0.05)
        # Caught up, it serves by the new placement (pulling moved keys).
        for k in keys[:50]:
            rc.incr(k)
            load.incr_acked[int(k[2:])] += 1
    f.wait_done(f.members)
    lost = lost_writes("redis", f.ports[0], load)
    report("redis, member frozen", load, lost, f"; of 200 requests queued at the frozen member {len(refused)} refused, {len(lapsed)} as lapsed")
    assert lost == (0, 0)


def test_etcd_stopped_in_the_middle_of_a_change(procs):
    f = Fleet(procs, "redis", ttl=2, extra=("--fleet-hold", "1000"))
    with Load("redis", f.ports) as load:
        wait_for(lambda: load.acked > 1000, 20, "load running")
        assert f.add_server(wait=None).returncode == 0
        f.etcd.stop()
        # Without etcd: requests for moved keys are held, then refused once
        # the hold's bound passed (--fleet-hold), and once the members'
        # leases cannot be known alive, every request of the pool, after
        # the same bound; none is answered wrongly. A client going round
        # the members waits out each member's waits in turn (the barrier's,
        # then the lapse's: at most 1 s each) before refusals come at once.
        at = load.refused
        wait_for(lambda: load.refused > at + 100, 2 + 3 * 2 * 1 + 6, "refusals while etcd is down")
        time.sleep(1)
        f.etcd.start()
        wait_for(lambda: all(f.migration_started(m) for m in f.members), 20, "change completes", step=0.1)
        at = load.acked
        wait_for(lambda: load.acked > at + 2000, 30, "load after etcd is back")
    f.wait_done(f.members)
    lost = lost_writes("redis", f.ports[0], load)
    report("redis, etcd stopped mid-change", load, lost)
    assert lost == (0, 0)


def test_a_request_held_by_a_barrier_that_cannot_pass_is_refused_after_the_bound(procs):
    """etcd stopped in the middle of a change, with the barrier still
    waiting (a member frozen before it prepared): a request for a moving
    key is held for --fleet-hold, then refused with the clear error; other
    clients are answered meanwhile; the refused writes are not applied and
    the change completes once etcd is back."""
    hold = 1.5
    f = Fleet(procs, "redis", ttl=6, extra=("--fleet-hold", str(int(hold * 1000))))
    a, b, c = f.members
    os.killpg(c.pid, signal.SIGSTOP)
    try:
        assert f.add_server(wait=None).returncode == 0
        rev = status(f.etcd, FLEET)["revision"]
        # a and b prepared (their placement switch done), c cannot: the
        # barrier waits.
        wait_for(lambda: all(int(m["prepared"]) >= rev for m in status(f.etcd, FLEET)["members"] if m["id"] in ("a", "b")),
                 10, "a and b prepared", step=0.05)
        f.etcd.stop()
        # Keys unlike each other (the pool's FNV hash puts keys that differ
        # only in their last characters close together on the ring).
        keys = [f"{random.Random(i).getrandbits(64):016x}" for i in range(32)]
        got: dict = {}

        def incr(k: str) -> None:
            r = redis.Redis(host=HOST, port=a.ports[0], socket_timeout=10, retry=Retry(NoBackoff(), 0))
            t = time.monotonic()
            try:
                v = r.incr(k)
            except redis.ResponseError as e:
                v = e
            got[k] = (v, t, time.monotonic())

        threads = [threading.Thread(target=incr, args=(k,)) for k in keys]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
        assert len(got) == len(keys)
        refused = [k for k in keys if isinstance(got[k][0], Exception)]
        served = [k for k in keys if not isinstance(got[k][0], Exception)]
        print(f"held then refused: {[(k, round(got[k][2] - got[k][1], 2)) for k in refused]}; "
              f"served: {[(k, round(got[k][2] - got[k][1], 2)) for k in served]}")
        # About a third of the keys move to the server added.
        assert refused and served
        first = min(got[k][1] for k in keys)
        for k in refused:
            v, t0, t1 = got[k]
            assert "key moving: a fleet change is in progress" in str(v), v
            # Held until the bound of the wait, which began with the first.
            assert hold - 0.2 < t1 - first < hold + 1.0, (k, t1 - first)
        # Keys that do not move are answered at once, while the others wait.
        for k in served:
            v, t0, t1 = got[k]
            assert v == 1 and t1 - t0 < 0.5, (k, v, t1 - t0)
        # The wait's bound spent, a moving key is refused at once.
        r = redis.Redis(host=HOST, port=a.ports[0], socket_timeout=10, retry=Retry(NoBackoff(), 0))
        t = time.monotonic()
        with pytest.raises(redis.ResponseError, match="key moving"):
            r.incr(refused[0])
        assert time.monotonic() - t < 0.5
        assert metric_sum([a], "walnut_worker_fleet_held_requests_total") >= len(refused)
        assert metric_sum([a], "walnut_worker_fleet_refused_requests_total") >= len(refused) + 1
        f.etcd.start()
    finally:
        os.killpg(c.pid, signal.SIGCONT)
    wait_for(lambda: all(f.migration_started(m) for m in f.members), 20, "change completes", step=0.1)
    f.wait_done(f.members)
    # The refused increments were not applied; the served ones were.
    r = redis.Redis(host=HOST, port=f.ports[1], socket_timeout=10)
    for k in keys:
        assert r.get(k) == (None if k in refused else b"1"), k


def test_etcd_stopped_in_steady_state(procs):
    """Pools without `migration: true` serve on; a `migration: true` pool
    is refused with a clear error once the lease cannot be known alive
    (another member could have gone on without this one), and serves again
    when etcd is back."""
    etcd = start(procs, Etcd(procs.workdir))
    r1 = procs.redis()
    base, base2 = free_port(), free_port()
    pools = {
        "plain": redis_pool([r1], listen=f"{HOST}:{base}"),
        "mig": redis_pool([r1], listen=f"{HOST}:{base2}", migration=True),
    }
    assert apply(etcd, FLEET, procs.workdir, pools).returncode == 0
    m = start(procs, Member(procs.workdir, etcd.url, FLEET, "a", [base, base2], ttl=2))
    plain = redis.Redis(host=HOST, port=m.ports[0], socket_timeout=5)
    mig = redis.Redis(host=HOST, port=m.ports[1], socket_timeout=10, retry=Retry(NoBackoff(), 0))
    wait_for(lambda: redis_or_mc_ok("redis", m.ports[1]), 10, "in step")
    etcd.stop()
    t0 = time.monotonic()

    def refused() -> bool:
        try:
            mig.set("k", "v")
            return False
        except redis.ResponseError as e:
            assert "fleet membership lapsed" in str(e)
            return True

    # The first request refused waited for the member to be in step again
    # (--fleet-hold, by default the TTL plus 1 s), no longer; the wait's
    # bound being spent, the next ones are refused at once.
    hold = 2 + 1
    wait_for(refused, 2 + hold + 2, "mig refused")
    assert time.monotonic() - t0 <= 2 + hold + 0.5
    t1 = time.monotonic()
    assert refused()
    assert time.monotonic() - t1 < 0.5
    assert plain.set("k", "v") and plain.get("k") == b"v"
    etcd.start()
    wait_for(lambda: redis_or_mc_ok("redis", m.ports[1]), 15, "mig serves again", step=0.05)


JOIN_COUNTERS = 2000
#: What every counter holds before the change: an increment sent to a
#: moved counter's new owner before its value came over (a member without
#: the earlier placement) loses this much.
JOIN_BASE = 1000


class CounterLoad(Clients):
    """Clients INCRing shared counters through every member in ``ports``
    (a list the test may extend), in turn, without retries; a failed
    client is replaced by a new connection."""

    def __init__(self, ports: list[int], kind: str = "redis"):
        self.ports = ports
        self.kind = kind
        self.lock = threading.Lock()
        self.incr_acked = [0] * JOIN_COUNTERS
        self.acked = 0
        self.refused = 0
        self.errors: list[str] = []
        self.make_clients()

    def run(self, n: int) -> None:
        rnd = random.Random(100 + n)
        clients: dict = {}
        seq = 0
        while not self.stop.is_set():
            port = self.ports[seq % len(self.ports)]
            seq += 1
            c = clients.get(port)
            if c is None:
                if self.kind == "redis":
                    c = redis.Redis(host=HOST, port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0))
                else:
                    c = McClient((HOST, port), timeout=5, connect_timeout=5)
                clients[port] = c
            i = rnd.randrange(JOIN_COUNTERS)
            try:
                if self.kind == "redis":
                    c.incr(f"j:{i}")
                elif c.incr(f"j:{i}", 1) is None:
                    raise RuntimeError("incr of a missing counter")
                with self.lock:
                    self.incr_acked[i] += 1
                    self.acked += 1
            except Exception as e:  # noqa: BLE001 - a failed write is not acknowledged
                with self.lock:
                    self.refused += 1
                    if len(self.errors) < 5:
                        self.errors.append(str(e) if isinstance(e, redis.ResponseError) else repr(e))
                if not isinstance(e, (redis.ResponseError, RuntimeError)):
                    clients.pop(port, None)


    def lost(self, port: int) -> tuple[int, int]:
        """(increments lost, counters that lost some), read through one
        member."""
        if self.kind == "redis":
            r = redis.Redis(host=HOST, port=port, socket_timeout=10)
            read = r.mget
        else:
            m = McClient((HOST, port), timeout=10)

            def read(keys):
                got = m.get_many(keys)
                return [got.get(k) for k in keys]
        lost = counters = 0
        for start in range(0, JOIN_COUNTERS, 500):
            keys = [f"j:{i}" for i in range(start, min(start + 500, JOIN_COUNTERS))]
            for i, v in zip(range(start, start + len(keys)), read(keys)):
                short = JOIN_BASE + self.incr_acked[i] - int(v or 0)
                if short > 0:
                    lost += short
                    counters += 1
        return lost, counters


@pytest.mark.parametrize("kind,how", [
    ("redis", "restarted_after_go"), ("redis", "restarted_in_barrier"), ("redis", "started_after_go"),
    ("memcache", "restarted_after_go"),
])
def test_a_member_started_mid_migration_joins_it(procs, kind, how):
    """A member SIGKILLed and started again while the fleet migrates (after
    the barrier passed, or while it waits for that member), or a fourth
    member started after the barrier: it takes the earlier configuration
    from etcd, fences moved keys until the barrier passed for it, then
    pulls them as the others do. Without the earlier placement its INCR of
    a moved counter would land on the new owner before the value came
    over, and the pull would then drop the old value (Redis: INCR creates
    the key there; memcached's incr of a missing key is refused instead,
    so the memcached case checks the joining, not that loss)."""
    f = Fleet(procs, kind, ttl=2)
    a, b, c = f.members
    if kind == "redis":
        pipe = redis.Redis(host=HOST, port=f.ports[0], socket_timeout=10).pipeline(transaction=False)
        for i in range(JOIN_COUNTERS):
            pipe.set(f"j:{i}", JOIN_BASE)
        pipe.execute()
    else:
        assert McClient((HOST, f.ports[0]), timeout=10).set_many({f"j:{i}": str(JOIN_BASE) for i in range(JOIN_COUNTERS)}, noreply=False) == []
    # Slow enough that the migration still runs when the member comes back.
    f.pools["p"]["migration_rate"] = 100
    ports = list(f.ports)
    joined = c
    with CounterLoad(ports, kind) as load:
        wait_for(lambda: load.acked > 1000, 20, "load running")
        t0 = time.monotonic()
        if how == "restarted_in_barrier":
            # The others wait for c's lease (2 s); c is back before it ends.
            c.kill()
            assert f.add_server(wait=None).returncode == 0
            c.start()
        else:
            assert f.add_server(wait=None).returncode == 0
        wait_for(lambda: f.migration_started(a) and f.migration_started(b), 10, "barrier passed", step=0.05)
        barrier = time.monotonic() - t0
        if how == "restarted_after_go":
            c.kill()
            c.start()
        elif how == "started_after_go":
            joined = start(procs, Member(procs.workdir, f.etcd.url, FLEET, "d", [f.ports[0]], offset=port_offset(f.ports[0]), ttl=2))
            ports.append(joined.ports[0])
        wait_for(lambda: redis_or_mc_ok(kind, joined.ports[0]), 15, "the member serves", step=0.05)
        # Still migrating when it joined: the others' migrators have not
        # ended.
        running = not all("state=done" in m.admin("migration") for m in (a, b))
        at = load.acked
        wait_for(lambda: load.acked > at + 3000, 60, "load after the member joined")
    f.wait_done([a, b])
    lost = load.lost(f.ports[0])
    print(f"{kind}, member {how}: acknowledged {load.acked} increments, refused {load.refused}, "
          f"lost {lost[0]} increments on {lost[1]} counters; barrier passed {barrier:.2f} s after the apply; "
          f"migration still running when it served: {running}; errors seen: {sorted(set(load.errors))[:3]}")
    assert lost == (0, 0)
    # It took part: its own migrator ran and ended.
    wait_for(lambda: "state=done" in joined.admin("migration"), 60, "the joined member's migration done", step=0.2)
    if how == "started_after_go":
        # After `done`: members report the pool done at this revision, so a
        # member starting now has no earlier placement for it (nothing to
        # fence, pull or walk) and serves at once.
        late = start(procs, Member(procs.workdir, f.etcd.url, FLEET, "e", [f.ports[0]], offset=port_offset(f.ports[0]), ttl=2))
        wait_for(lambda: redis_or_mc_ok("redis", late.ports[0]), 15, "the late member serves", step=0.05)
        assert "state=" not in late.admin("migration")
        assert status(f.etcd, FLEET)["members"] and any(
            m["id"] == "e" and m["pools"] == {"p": "steady"} for m in status(f.etcd, FLEET)["members"])
        assert int(redis.Redis(host=HOST, port=late.ports[0], socket_timeout=5).get("j:0")) == JOIN_BASE + load.incr_acked[0]
