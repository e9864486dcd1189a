"""A pool's servers change under load (`migration: true`): a server added,
one removed, or one weighed more, by editing the config and sending HUP.
Every key a client asks for is served from where it is — pulled from its
old owner to its new one on first use, with its TTL and flags — so busy
clients that check every value they read see no miss, no stale value and
no error; once the background migrator is done, every key is on the owner
Debian's nutcracker computes for the new configuration (the oracle), with
its TTL and flags, and nowhere else."""

from __future__ import annotations

import base64
import hashlib
import signal
import threading
import time

import pytest
import redis
from pymemcache.client.base import Client as MemcacheClient
from redis.backoff import NoBackoff
from redis.retry import Retry

from procmodel import wait_gone, wait_log, wait_workers
from procs import HOST, Proxy, RawConn, free_port, memcache_pool, redis_pool, to_yaml, wait_until
from test_migration_bg import admin, metrics, state

# Minutes of work in all: left out of `make quick`.
pytestmark = pytest.mark.slow

N = 600
T = 40


def tkey(i: int) -> str:
    """Key names spread over the ring (short keys differing only in their
    last character hash close together with fnv1a)."""
    return "t" + hashlib.sha1(str(i).encode()).hexdigest()[:12]


def mc_ttl(i: int) -> int:
    """memcached expiry of k{i}, in seconds (0: none)."""
    return 0 if i % 2 else 300


def rd_ttl(i: int) -> int:
    """Redis expiry of k{i}, in seconds (0: none)."""
    return 0 if i % 2 else 500


class Written:
    """A key's last write: its value, and the monotonic times just before
    it was sent and just after it was acknowledged, so its expiry is known
    to lie between the two plus its TTL whatever the machine's pace."""

    __slots__ = ("value", "ttl", "before", "after")

    def __init__(self, value: bytes, ttl: int, before: float, after: float):
        self.value, self.ttl, self.before, self.after = value, ttl, before, after


class Checkers:
    """Clients that each own a share of the keys, so they know every value:
    they read and check, overwrite, delete and re-set, without pause. Every
    write keeps the key's TTL policy and flags (memcached `i % 7`), and is
    recorded in `mc` / `rd` for the checks at the end."""

    def __init__(self, mc_port: int, rd_port: int, mc: dict, rd: dict, n: int = 3):
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.ops = 0
        self.errors: list[str] = []
        self.mc, self.rd = mc, rd
        self.threads = [threading.Thread(target=self._mc, args=(mc_port, i, n), daemon=True) for i in range(n)]
        self.threads += [threading.Thread(target=self._rd, args=(rd_port, i, n), daemon=True) for i in range(n)]

    def _fail(self, msg: str) -> None:
        with self.lock:
            self.errors.append(msg)

    def _mc(self, port: int, me: int, n: int) -> None:
        c = MemcacheClient((HOST, port), connect_timeout=5, timeout=5)

        def put(i: int, v: bytes) -> None:
            t0 = time.monotonic()
            c.set(f"k{i}", v, expire=mc_ttl(i), noreply=False, flags=i % 7)
            self.mc[f"k{i}"] = Written(v, mc_ttl(i), t0, time.monotonic())

        round_ = 0
        # A bound in case the test never stops them; the test stops them
        # long before on any machine.
        deadline = time.monotonic() + 300
        while not self.stop_ev.is_set() and time.monotonic() < deadline:
            round_ += 1
            for j, i in enumerate(range(me, N, n)):
                if self.stop_ev.is_set():
                    break
                k = f"k{i}"
                want = self.mc[k].value
                try:
                    got = c.get(k)
                    if got != want:
                        self._fail(f"mc {k}: got {got!r}, want {want!r}")
                        return
                    if (j + round_) % 3 == 0:
                        put(i, f"v{k}.{round_}".encode())
                    elif (j + round_) % 17 == 0:
                        c.delete(k, noreply=False)
                        if (got := c.get(k)) is not None:
                            self._fail(f"mc {k}: {got!r} after delete")
                            return
                        put(i, want)
                except Exception as e:  # noqa: BLE001 - every failure counts
                    self._fail(f"mc {k}: {e!r}")
                    return
                with self.lock:
                    self.ops += 1

    def _rd(self, port: int, me: int, n: int) -> None:
        r = redis.Redis(host=HOST, port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0),
                        single_connection_client=True)

        def put(i: int, v: bytes) -> None:
            t0 = time.monotonic()
            r.set(f"k{i}", v, ex=rd_ttl(i) or None)
            self.rd[f"k{i}"] = Written(v, rd_ttl(i), t0, time.monotonic())

        round_ = 0
        deadline = time.monotonic() + 300
        while not self.stop_ev.is_set() and time.monotonic() < deadline:
            round_ += 1
            for j, i in enumerate(range(me, N, n)):
                if self.stop_ev.is_set():
                    break
                k = f"k{i}"
                want = self.rd[k].value
                try:
                    got = r.get(k)
                    if got != want:
                        self._fail(f"rd {k}: got {got!r}, want {want!r}")
                        return
                    lst = r.lrange(f"l{k}", 0, -1)
                    if lst != [b"a", b"b"]:
                        self._fail(f"rd l{k}: got {lst!r}")
                        return
                    if (j + round_) % 3 == 0:
                        put(i, f"v{k}.{round_}".encode())
                    elif (j + round_) % 17 == 0:
                        r.delete(k)
                        if (got := r.get(k)) is not None:
                            self._fail(f"rd {k}: {got!r} after DEL")
                            return
                        put(i, want)
                except Exception as e:  # noqa: BLE001 - every failure counts
                    self._fail(f"rd {k}: {e!r}")
                    return
                with self.lock:
                    self.ops += 1

    def start(self) -> "Checkers":
        for t in self.threads:
            t.start()
        wait_until(lambda: self.ops > 300 or self.errors, 20, what="checkers to start")
        return self

    def progress(self, n: int = 1500) -> None:
        before = self.ops
        wait_until(lambda: self.ops > before + n or self.errors, 30, what="checkers to go on")
        assert not self.errors, self.errors[:5]

    def stop(self) -> None:
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout=15)
        assert not any(t.is_alive() for t in self.threads), "a checker did not stop"


def check_ttl(what: str, got_s: float, w: Written, asked: float, answered: float, slack: float) -> None:
    """`got_s`, the seconds a server says are left (< 0: no expiry), read
    between `asked` and `answered`, agrees with the write `w` to within
    `slack` seconds. The bounds come from the times measured around the
    write and the read, not from a guess of how long the test took: a
    slow machine widens the window by exactly its slowness."""
    if w.ttl == 0:
        assert got_s < 0, (what, got_s)
        return
    lo = w.before + w.ttl - answered - slack
    hi = w.after + w.ttl - asked + slack
    assert lo <= got_s <= hi, (what, got_s, lo, hi)


# Tolerances of the TTL check. Redis: `PTTL` is exact to the millisecond,
# and a copy (`DUMP`+`PTTL`, then `RESTORE` with that PTTL a round trip
# later) only stretches the expiry by that round trip: 1 s, the bound the
# migration promises. memcached: a server keeps expiry times and answers
# `mg k t` in whole seconds of a clock that ticks once a second, so one
# reading is off by less than 1 s either way, and a key copied once
# (read with `mg k t` on its old owner, written with `ms k T<n>` on the
# new, whose clock ticks at another moment) by less than 2 s: the 1 s
# promised plus 1 s of the servers' granularity (give or take how late a
# server's once-a-second timer fires, milliseconds over a test). A key
# moves at most once here (one change of placement; a client's write after
# the move writes a fresh expiry on the new owner).
RD_SLACK = 1.0
MC_SLACK = 2.0


@pytest.mark.parametrize("change", ["add", "remove", "weight"])
def test_servers_change_under_load_without_a_miss(procs, change):
    mcs = procs.memcacheds(3)
    rds = [procs.redis() for _ in range(3)]
    mc_port, rd_port = free_port(), free_port()
    before, after = {
        "add": ([0, 1], [0, 1, 2]),
        "remove": ([0, 1, 2], [0, 1]),
        # The first server weighs 3 instead of 1.
        "weight": ([0, 1, 2], [0, 1, 2]),
    }[change]

    def pools(idx: list[int], heavy: bool, ports=(mc_port, rd_port), migration=True) -> dict:
        def servers(backends) -> list[str]:
            return [f"{backends[i].address}:{3 if heavy and i == 0 else 1}" for i in idx]
        extra = {"migration": True} if migration else {}
        mc = memcache_pool([], listen=f"{HOST}:{ports[0]}", **extra)
        mc["servers"] = servers(mcs)
        rd = redis_pool([], listen=f"{HOST}:{ports[1]}", **extra)
        rd["servers"] = servers(rds)
        return {"mc": mc, "rd": rd}

    p = Proxy("walnut", procs.workdir, {})
    p.conf_path.write_text(to_yaml({**pools(before, False), "_walnut": {"workers": 2}}))
    p.ports = {"mc": mc_port, "rd": rd_port}
    procs.started.append(p)
    p.start()
    gen1 = wait_workers(p.pid, 2)
    mc = MemcacheClient((HOST, mc_port))
    r = redis.Redis(host=HOST, port=rd_port, protocol=2)
    mc_w: dict[str, Written] = {}
    rd_w: dict[str, Written] = {}
    for i in range(N):
        k, v = f"k{i}", f"v{i}".encode()
        t0 = time.monotonic()
        mc.set(k, v, expire=mc_ttl(i), noreply=False, flags=i % 7)
        mc_w[k] = Written(v, mc_ttl(i), t0, time.monotonic())
        t0 = time.monotonic()
        pipe = r.pipeline(transaction=False)
        pipe.set(k, v, ex=rd_ttl(i) or None)
        pipe.rpush(f"lk{i}", "a", "b")
        pipe.execute()
        rd_w[k] = Written(v, rd_ttl(i), t0, time.monotonic())
        rd_w[f"lk{i}"] = Written(b"", 0, t0, t0)
    # Keys no client touches: their TTLs and flags must come along when
    # moved (by a read, or by the migrator).
    for i in range(T):
        t0 = time.monotonic()
        mc.set(tkey(i), b"x", expire=300, noreply=False, flags=3)
        mc_w[tkey(i)] = Written(b"x", 300, t0, time.monotonic())
        t0 = time.monotonic()
        r.set(tkey(i), "x", ex=500)
        rd_w[tkey(i)] = Written(b"x", 500, t0, time.monotonic())
    mc_direct = [MemcacheClient((HOST, m.port)) for m in mcs]
    rd_direct = [redis.Redis(host=HOST, port=x.port) for x in rds]

    def holders() -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        """The servers (indices) holding each key, read on each directly."""
        mh: dict[str, list[int]] = {k: [] for k in mc_w}
        for si, c in enumerate(mc_direct):
            for k in c.get_many(list(mc_w)):
                mh[k].append(si)
        rh: dict[str, list[int]] = {k: [] for k in rd_w}
        for si, d in enumerate(rd_direct):
            pipe = d.pipeline(transaction=False)
            for k in rd_w:
                pipe.exists(k)
            for k, there in zip(rd_w, pipe.execute()):
                if there:
                    rh[k].append(si)
        return mh, rh

    mc_before, rd_before = holders()
    assert all(len(v) == 1 for v in mc_before.values()) and all(len(v) == 1 for v in rd_before.values())
    load = Checkers(mc_port, rd_port, mc_w, rd_w).start()
    try:
        p.conf_path.write_text(to_yaml({**pools(after, change == "weight"), "_walnut": {"workers": 2}}))
        p.signal(signal.SIGHUP)
        wait_workers(p.pid, 2, exclude=gen1.values())
        for pid in gen1.values():
            wait_gone(pid, timeout=10)
        wait_log(p.log_path, "keys whose owner changed are pulled")
        load.progress()
        # Read through walnut while keys are moving: the meta protocol
        # (its key given base64-encoded here) and plain gets find the
        # untouched keys with their flags, wherever they are yet.
        with RawConn(mc_port) as c:
            for i in range(10):
                k64 = base64.b64encode(tkey(i).encode())
                assert c.request(b"mg %s b v f\r\n" % k64, b"x\r\n") == b"VA 1 f3\r\nx\r\n"
            for i in range(T):
                k = tkey(i).encode()
                assert c.request(b"get %s\r\n" % k, b"END\r\n") == b"VALUE %s 3 1\r\nx\r\nEND\r\n" % k
                assert r.get(tkey(i)) == b"x"
        # The migrator moves what nobody asks for; clients go on checking
        # until it has ended, and for a while after (no fallback then).
        for pool in ("mc", "rd"):
            wait_until(lambda pool=pool: state(p.admin_port, pool).get("state") == "done" or load.errors,
                       120, what=f"migration of {pool} to end")
        assert not load.errors, load.errors[:5]
        load.progress(600)
    finally:
        load.stop()
    assert not load.errors, load.errors[:5]
    st = {pool: state(p.admin_port, pool) for pool in ("mc", "rd")}
    assert st["mc"]["failed"] == "0" and st["rd"]["failed"] == "0", st

    # The oracle: nutcracker on the new configuration finds every key with
    # its last value and flags.
    oracle_ports = (free_port(), free_port())
    procs.proxy("nutcracker", pools(after, change == "weight", oracle_ports, migration=False))
    with RawConn(oracle_ports[0]) as c:
        for k, w in mc_w.items():
            flags = 3 if k.startswith("t") else int(k[1:]) % 7
            got = c.request(b"get %s\r\n" % k.encode(), b"END\r\n")
            assert got == b"VALUE %s %d %d\r\n%s\r\nEND\r\n" % (k.encode(), flags, len(w.value), w.value), \
                (k, got)
    # nutcracker knows neither HELLO nor CLIENT SETINFO.
    nr = redis.Redis(host=HOST, port=oracle_ports[1], protocol=2, lib_name=None, lib_version=None)
    for k, w in rd_w.items():
        if k.startswith("l"):
            assert nr.lrange(k, 0, -1) == [b"a", b"b"], k
        else:
            assert nr.get(k) == w.value, k

    # And nowhere else: each key on exactly one server (so the oracle's
    # owner), where its TTL is what remains of the one it was written with.
    mc_after, rd_after = holders()
    assert {k: v for k, v in mc_after.items() if len(v) != 1} == {}
    assert {k: v for k, v in rd_after.items() if len(v) != 1} == {}
    conns = [RawConn(m.port) for m in mcs]
    try:
        for k, w in mc_w.items():
            c = conns[mc_after[k][0]]
            asked = time.monotonic()
            head = c.request(b"mg %s t f\r\n" % k.encode(), b"\r\n")
            answered = time.monotonic()
            flags = 3 if k.startswith("t") else int(k[1:]) % 7
            assert head.startswith(b"HD t") and head.endswith(b" f%d\r\n" % flags), (k, head)
            check_ttl(f"mc {k}", int(head.split(b" t")[1].split()[0]), w, asked, answered, MC_SLACK)
    finally:
        for c in conns:
            c.close()
    for k, w in rd_w.items():
        d = rd_direct[rd_after[k][0]]
        asked = time.monotonic()
        pttl = d.pttl(k)
        answered = time.monotonic()
        check_ttl(f"rd {k}", pttl / 1000 if pttl >= 0 else -1, w, asked, answered, RD_SLACK)

    # The change moved keys, the way it should.
    for name, b, a in (("mc", mc_before, mc_after), ("rd", rd_before, rd_after)):
        moved = {k: (b[k][0], a[k][0]) for k in b if b[k] != a[k]}
        print(f"\n{change} {name}: {len(moved)} of {len(b)} keys moved")
        assert moved, f"{name}: no key moved"
        if change == "add":
            assert {t for _, t in moved.values()} == {2}, name
        elif change == "remove":
            assert {f for f, _ in moved.values()} == {2} and all(x[0] != 2 for x in a.values()), name
        else:
            # The heavier server holds more keys than it did.
            on0 = (sum(x == [0] for x in b.values()), sum(x == [0] for x in a.values()))
            assert on0[1] > on0[0], (name, on0)


def crawling_pool(procs, workers: int, shadow=None):
    """walnut over the first 2 of 3 redis-servers, hash tags on, with a
    background migrator that crawls (`migration_rate: 1`, a key a second),
    so that after the third server is added the keys a test names are
    pulled by its own requests (with ``shadow``, a redis-server, the pool
    copies its requests to a pool ``copy`` over it). The servers,
    ``config(n)`` (the YAML over the first n), the proxy, its first
    generation and a client that never retries."""
    rds = [procs.redis() for _ in range(3)]
    port, shadow_port = free_port(), free_port()

    def config(n: int) -> str:
        pools = {"rd": redis_pool(rds[:n], listen=f"{HOST}:{port}", hash_tag="{}",
                                  migration=True, migration_rate=1)}
        if shadow:
            pools["rd"]["shadow"] = "copy"
            pools["copy"] = redis_pool([shadow], listen=f"{HOST}:{shadow_port}")
        return to_yaml({**pools, "_walnut": {"workers": workers}})

    p = Proxy("walnut", procs.workdir, {})
    p.conf_path.write_text(config(2))
    p.ports = {"rd": port, **({"copy": shadow_port} if shadow else {})}
    procs.started.append(p)
    p.start()
    gen1 = wait_workers(p.pid, workers)
    r = redis.Redis(host=HOST, port=port, protocol=2, socket_timeout=10, retry=Retry(NoBackoff(), 0))
    return rds, config, p, gen1, r


def grown_to_three(p: Proxy, config, gen1: dict, r: redis.Redis, rds, tags: list[str]) -> list[str]:
    """Reload ``p`` onto all 3 servers (``config(3)``), wait for its new
    generation, pause its migrator, and return the tags whose keys the
    added server now owns (a key never written before, in each tag, is
    placed there: nothing to pull, it goes straight to its owner, and only
    one holds it). Paused, the migrator moves none of the keys a test
    checks the place of: at a key a second it would move a few while the
    test runs (one test found a key already moved once, in a full run)."""
    p.conf_path.write_text(config(3))
    p.signal(signal.SIGHUP)
    wait_workers(p.pid, len(gen1), exclude=gen1.values())
    for pid in gen1.values():
        wait_gone(pid, timeout=10)
    wait_log(p.log_path, "keys whose owner changed are pulled")
    wait_until(lambda: admin(p.admin_port, "migration pause rd").startswith("OK"), 10,
               what="the migrator paused")
    direct = [redis.Redis(host=HOST, port=x.port) for x in rds]
    moved = []
    for t in tags:
        assert r.set(f"{t}probe", "1") is True
        owners = [i for i, d in enumerate(direct) if d.exists(f"{t}probe")]
        assert len(owners) == 1, (t, owners)
        if owners[0] == 2:
            moved.append(t)
    return moved


def test_every_key_of_a_multi_key_command_is_pulled(procs):
    """SMOVE, RENAME(NX), LMOVE, SUNIONSTORE, EVAL with two keys and a
    WATCH / MULTI / EXEC, on hash-tagged keys whose owner changed: every key
    the command names is on its new owner before it runs there. Were only
    the first one pulled, the others would be written on the new owner
    while their old copies wait on the old one, then be lost (a later pull
    finds the key present and drops the old copy) or be read as missing."""
    rds, config, p, gen1, r = crawling_pool(procs, workers=2)
    tags = ["{" + tkey(i) + "}" for i in range(60)]
    for t in tags:
        pipe = r.pipeline(transaction=False)
        pipe.sadd(f"{t}sa", "a1", "a2").sadd(f"{t}sb", "b1")
        pipe.set(f"{t}nx1", "n1").set(f"{t}nx2", "n2")
        pipe.set(f"{t}rn1", "r1").rpush(f"{t}rn2", "old")
        pipe.rpush(f"{t}l1", "q", "r").rpush(f"{t}l2", "p")
        pipe.sadd(f"{t}u1", "x").sadd(f"{t}u2", "y").sadd(f"{t}u", "stale")
        pipe.set(f"{t}e1", "ev").sadd(f"{t}e2", "old")
        pipe.set(f"{t}w1", "wv").sadd(f"{t}w2", "w")
        pipe.execute()
    p.conf_path.write_text(config(3))
    p.signal(signal.SIGHUP)
    wait_workers(p.pid, 2, exclude=gen1.values())
    for pid in gen1.values():
        wait_gone(pid, timeout=10)
    wait_log(p.log_path, "keys whose owner changed are pulled")
    script = "redis.call('SADD', KEYS[2], redis.call('GET', KEYS[1])) return redis.call('SCARD', KEYS[2])"
    for t in tags:
        assert r.smove(f"{t}sa", f"{t}sb", "a1") is True, t
        assert r.renamenx(f"{t}nx1", f"{t}nx2") is False, t
        assert r.rename(f"{t}rn1", f"{t}rn2") is True, t
        assert r.lmove(f"{t}l1", f"{t}l2", "LEFT", "RIGHT") == b"q", t
        assert r.sunionstore(f"{t}u", [f"{t}u1", f"{t}u2"]) == 2, t
        assert r.eval(script, 2, f"{t}e1", f"{t}e2") == 2, t
        with r.pipeline(transaction=True) as tx:
            tx.watch(f"{t}w1")
            assert tx.get(f"{t}w1") == b"wv", t
            tx.multi()
            tx.get(f"{t}w1").sadd(f"{t}w2", "z")
            assert tx.execute() == [b"wv", 1], t
    # Sources and destinations hold the old data with the new.
    for t in tags:
        assert r.smembers(f"{t}sa") == {b"a2"} and r.smembers(f"{t}sb") == {b"a1", b"b1"}, t
        assert r.get(f"{t}nx1") == b"n1" and r.get(f"{t}nx2") == b"n2", t
        assert r.exists(f"{t}rn1") == 0 and r.get(f"{t}rn2") == b"r1", t
        assert r.lrange(f"{t}l1", 0, -1) == [b"r"] and r.lrange(f"{t}l2", 0, -1) == [b"p", b"q"], t
        assert r.smembers(f"{t}u") == {b"x", b"y"}, t
        assert r.smembers(f"{t}e2") == {b"old", b"ev"}, t
        assert r.smembers(f"{t}w2") == {b"w", b"z"}, t
    # Each key on one server only, a share of them on the new one.
    direct = [redis.Redis(host=HOST, port=x.port) for x in rds]
    names = ["sa", "sb", "nx1", "nx2", "rn2", "l1", "l2", "u1", "u2", "u", "e1", "e2", "w1", "w2"]
    on_new = 0
    for t in tags:
        for n in names:
            owners = [i for i, d in enumerate(direct) if d.exists(f"{t}{n}")]
            assert len(owners) == 1, (t, n, owners)
            on_new += owners[0] == 2
    assert on_new > 0, "no group moved to the new server"


def test_a_pulled_keys_request_runs_behind_its_copy(procs):
    """A request whose key is pulled goes to the new owner right behind
    the key's copy (`RESTORE`), on the same connection, without waiting
    for the copy's answer: it finds the value copied with its TTL, or,
    when the new owner already had a newer value (the copy refused with
    BUSYKEY), that value; the old copy is deleted in both cases, and a
    pipeline's later requests wait for the pull and keep their order.
    (GETRANGE, not GET: a GET of a moved key is read where the key is,
    without a pull; see test_a_moved_keys_get_is_read_where_the_key_is.)"""
    rds, config, p, gen1, r = crawling_pool(procs, workers=1)
    tags = ["{" + tkey(i) + "}" for i in range(200)]
    for i, t in enumerate(tags):
        r.set(f"{t}k", f"old{i}", ex=500 if i % 2 else None)
        r.set(f"{t}p", f"p{i}")
    moved = grown_to_three(p, config, gen1, r, rds, tags)
    direct = [redis.Redis(host=HOST, port=x.port) for x in rds]
    assert len(moved) >= 10, len(moved)
    # Half of the moved keys get a newer value on their new owner, written
    # there directly (as another client's write through another proxy).
    newer = set(moved[::2])
    for t in newer:
        assert direct[2].set(f"{t}k", "newer", nx=True) is True, t
    for t in moved:
        i = tags.index(t)
        pipe = r.pipeline(transaction=False)
        pipe.getrange(f"{t}k", 0, -1).ttl(f"{t}k").getrange(f"{t}p", 0, -1).set(f"{t}p", "q")
        pipe.get(f"{t}p")
        got = pipe.execute()
        if t in newer:
            assert got[:2] == [b"newer", -1], (t, got)
        else:
            assert got[0] == f"old{i}".encode(), (t, got)
            assert (0 < got[1] <= 500) if i % 2 else got[1] == -1, (t, got)
        assert got[2:] == [f"p{i}".encode(), True, b"q"], (t, got)
    # Each key on one server only: the old copies went, newer or not.
    for t in moved:
        for n in ("k", "p"):
            owners = [i for i, d in enumerate(direct) if d.exists(f"{t}{n}")]
            assert owners == [2], (t, n, owners)


def test_a_moved_keys_get_is_read_where_the_key_is(procs):
    """A GET of a key whose owner changed is not pulled: it is answered
    by whichever of the key's servers has it (the old owner before the
    key moved, the new one after), and the key stays where it is. A key
    on neither is a nil. A write of a moved key pulls it, and by the time
    the write is answered the old copy is gone, so later GETs find the
    written value (or, after a DEL, nothing), never the old copy. A
    pipeline's GET, SET and GET of one moved key keep their order."""
    rds, config, p, gen1, r = crawling_pool(procs, workers=1)
    tags = ["{" + tkey(i) + "}" for i in range(200)]
    for i, t in enumerate(tags):
        r.set(f"{t}k", f"old{i}", ex=500 if i % 2 else None)
        r.set(f"{t}w", f"w{i}")
        r.set(f"{t}d", f"d{i}")
        r.set(f"{t}q", f"q{i}")
    moved = grown_to_three(p, config, gen1, r, rds, tags)
    direct = [redis.Redis(host=HOST, port=x.port) for x in rds]
    assert len(moved) >= 10, len(moved)

    def owners(key: str) -> list[int]:
        return [i for i, d in enumerate(direct) if d.exists(key)]

    def counted(name: str) -> float:
        return sum(v for k, v in metrics(p.admin_port).items() if k.startswith(name + "{"))

    reads0 = counted("walnut_worker_moved_reads_total")
    pulled0 = counted("walnut_worker_pulled_keys_total")
    for t in moved:
        i = tags.index(t)
        old = owners(f"{t}k")
        assert len(old) == 1 and old[0] != 2, (t, old)
        # Read twice (the second read may ask the new owner first): the
        # value each time, and the key left on its old owner.
        assert r.get(f"{t}k") == f"old{i}".encode(), t
        assert r.get(f"{t}k") == f"old{i}".encode(), t
        assert owners(f"{t}k") == old, (t, owners(f"{t}k"))
        assert r.get(f"{t}none") is None, t
        # A write pulls the key; the old copy is gone once it is answered.
        assert r.set(f"{t}w", "new") is True
        assert owners(f"{t}w") == [2], (t, owners(f"{t}w"))
        assert r.get(f"{t}w") == b"new", t
        assert r.delete(f"{t}d") == 1, t
        assert owners(f"{t}d") == [], (t, owners(f"{t}d"))
        assert r.get(f"{t}d") is None, t
        pipe = r.pipeline(transaction=False)
        pipe.get(f"{t}q").set(f"{t}q", "z").get(f"{t}q")
        assert pipe.execute() == [f"q{i}".encode(), True, b"z"], t
    # Counted: per moved tag 7 GETs read where the key is (k twice, none,
    # w, d, q twice: a key's owner changed, wherever the key is now), 3
    # keys pulled (w, d, q by their writes), and some reads sent on (none
    # at least: a nil on the old owner).
    assert counted("walnut_worker_moved_reads_total") - reads0 == 7 * len(moved)
    assert counted("walnut_worker_pulled_keys_total") - pulled0 == 3 * len(moved)
    assert counted("walnut_worker_moved_rereads_total") > 0
    # A key the migrator (or an earlier copy) put on the new owner is
    # read there: copy one over by hand as the migrator would, old copy
    # deleted, and read it through walnut.
    for t in moved[:5]:
        src = owners(f"{t}k")[0]
        dump = direct[src].dump(f"{t}k")
        ttl = max(direct[src].pttl(f"{t}k"), 0)
        direct[2].restore(f"{t}k", ttl, dump)
        direct[src].delete(f"{t}k")
        i = tags.index(t)
        assert r.get(f"{t}k") == f"old{i}".encode(), t


def test_a_moved_keys_get_is_copied_to_the_shadow_pool(procs):
    """A GET of a moved key read where the key is still does what routing
    does besides sending: the shadow pool gets its copy."""
    shadow = procs.redis()
    rds, config, p, gen1, r = crawling_pool(procs, workers=1, shadow=shadow)
    tags = ["{" + tkey(i) + "}" for i in range(100)]
    for i, t in enumerate(tags):
        r.set(f"{t}k", f"v{i}")
    moved = grown_to_three(p, config, gen1, r, rds, tags)
    direct = [redis.Redis(host=HOST, port=x.port) for x in rds]
    assert len(moved) >= 5, len(moved)
    sh = redis.Redis(host=HOST, port=shadow.port)

    def shadow_gets() -> int:
        return int(sh.info("commandstats").get("cmdstat_get", {}).get("calls", 0))

    before = shadow_gets()
    for t in moved:
        assert r.get(f"{t}k") == f"v{tags.index(t)}".encode(), t
        assert not direct[2].exists(f"{t}k"), "read where it is: not pulled"
    wait_until(lambda: shadow_gets() >= before + len(moved), 10, what="the GETs copied to the shadow")
