"""A pool's servers change under load (`migration: true`): a server added,
or one removed, by editing the config and sending HUP. Every key a client
asks for is served from where it is — pulled from its old owner to its new
one on first use, with its TTL and flags — so busy clients that check every
value they read see no miss, no stale value and no error; a pulled key is
left on its new owner only."""

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

# Minutes of work in all: left out of `make quick`.
pytestmark = pytest.mark.slow

N = 600


def tkey(i: int) -> str:
    """Key names spread over the ring (short keys differing only in their
    last character hash close together with fnv1a)."""
    return "t" + hashlib.sha1(str(i).encode()).hexdigest()[:12]


class Checkers:
    """Clients that each own a share of the keys, so they know every value:
    they read and check, overwrite, delete and re-set, without pause."""

    def __init__(self, mc_port: int, rd_port: int, n: int = 3):
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.ops = 0
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._mc, args=(mc_port, i, n), daemon=True) for i in range(n)]
        self.threads += [threading.Thread(target=self._rd, args=(rd_port, i, n), daemon=True) for i in range(n)]

    def _fail(self, msg: str) -> None:
        with self.lock:
            self.errors.append(msg)

    def _mc(self, port: int, me: int, n: int) -> None:
        c = MemcacheClient((HOST, port), connect_timeout=5, timeout=5)
        want = {f"k{i}": f"v{i}".encode() for i in range(me, N, n)}
        keys = list(want)
        round_ = 0
        deadline = time.monotonic() + 60
        while not self.stop_ev.is_set() and time.monotonic() < deadline:
            round_ += 1
            for j, k in enumerate(keys):
                if self.stop_ev.is_set():
                    break
                try:
                    got = c.get(k)
                    if got != want[k]:
                        self._fail(f"mc {k}: got {got!r}, want {want[k]!r}")
                        return
                    if (j + round_) % 3 == 0:
                        want[k] = f"v{k}.{round_}".encode()
                        c.set(k, want[k], noreply=False)
                    elif (j + round_) % 17 == 0:
                        c.delete(k, noreply=False)
                        if (got := c.get(k)) is not None:
                            self._fail(f"mc {k}: {got!r} after delete")
                            return
                        c.set(k, want[k], noreply=False)
                except Exception as e:  # noqa: BLE001 - every failure counts
                    self._fail(f"mc {k}: {e!r}")
                    return
                with self.lock:
                    self.ops += 1

    def _rd(self, port: int, me: int, n: int) -> None:
        r = redis.Redis(host=HOST, port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0),
                        single_connection_client=True)
        want = {f"k{i}": f"v{i}".encode() for i in range(me, N, n)}
        keys = list(want)
        round_ = 0
        deadline = time.monotonic() + 60
        while not self.stop_ev.is_set() and time.monotonic() < deadline:
            round_ += 1
            for j, k in enumerate(keys):
                if self.stop_ev.is_set():
                    break
                try:
                    got = r.get(k)
                    if got != want[k]:
                        self._fail(f"rd {k}: got {got!r}, want {want[k]!r}")
                        return
                    lst = r.lrange(f"l{k}", 0, -1)
                    if lst != [b"a", b"b"]:
                        self._fail(f"rd l{k}: got {lst!r}")
                        return
                    if (j + round_) % 3 == 0:
                        want[k] = f"v{k}.{round_}".encode()
                        r.set(k, want[k])
                    elif (j + round_) % 17 == 0:
                        r.delete(k)
                        if (got := r.get(k)) is not None:
                            self._fail(f"rd {k}: {got!r} after DEL")
                            return
                        r.set(k, want[k])
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


@pytest.mark.parametrize("change", ["add", "remove"])
def test_servers_change_under_load_without_a_miss(procs, change):
    mcs = procs.memcacheds(3)
    rds = [procs.redis() for _ in range(3)]
    mc_port, rd_port = free_port(), free_port()
    before, after = (2, 3) if change == "add" else (3, 2)

    def config(n: int) -> str:
        return to_yaml({
            "mc": memcache_pool(mcs[:n], listen=f"{HOST}:{mc_port}", migration=True),
            "rd": redis_pool(rds[:n], listen=f"{HOST}:{rd_port}", migration=True),
            "_walnut": {"workers": 2},
        })

    p = Proxy("walnut", procs.workdir, {})
    p.conf_path.write_text(config(before))
    p.ports = {"mc": mc_port, "rd": rd_port}
    procs.started.append(p)
    p.start()
    gen1 = wait_workers(p.pid, 2)
    mc = MemcacheClient((HOST, mc_port))
    r = redis.Redis(host=HOST, port=rd_port, protocol=2)
    for i in range(N):
        mc.set(f"k{i}", f"v{i}".encode(), expire=0 if i % 2 else 300, noreply=False, flags=i % 7)
        pipe = r.pipeline(transaction=False)
        pipe.set(f"k{i}", f"v{i}")
        if i % 2 == 0:
            pipe.expire(f"k{i}", 500)
        pipe.rpush(f"lk{i}", "a", "b")
        pipe.execute()
    # Keys no client touches: their TTLs must come along when pulled.
    for i in range(40):
        mc.set(tkey(i), b"x", expire=300, noreply=False, flags=3)
        r.set(tkey(i), "x", ex=500)
    load = Checkers(mc_port, rd_port).start()
    try:
        p.conf_path.write_text(config(after))
        p.signal(signal.SIGHUP)
        wait_workers(p.pid, 2, exclude=gen1.values())
        for pid in gen1.values():
            wait_gone(pid, timeout=10)
        wait_log(p.log_path, "keys whose owner changed are pulled")
        load.progress()
    finally:
        load.stop()
    assert not load.errors, load.errors[:5]
    # Every key read once more through walnut (pulling the ones no client
    # asked for), then each lives on exactly one server, the new owner.
    with RawConn(mc_port) as c:
        for i in range(N):
            got = c.request(b"get k%d\r\n" % i, b"END\r\n")
            assert got.startswith(b"VALUE k%d " % i), got
    for i in range(N):
        assert r.exists(f"k{i}") == 1 and r.llen(f"lk{i}") == 2
    # TTLs and flags came along: keys set with 300 s (memcached) and 500 s
    # (Redis) that no client touched, pulled by a read now.
    direct = [redis.Redis(host=HOST, port=x.port) for x in rds]
    moved = 0
    with RawConn(mc_port) as c:
        # The meta protocol pulls too (its key given base64-encoded here).
        for i in range(10):
            k64 = base64.b64encode(tkey(i).encode())
            assert c.request(b"mg %s b v f\r\n" % k64, b"x\r\n") == b"VA 1 f3\r\nx\r\n"
        for i in range(40):
            k = tkey(i).encode()
            assert c.request(b"get %s\r\n" % k, b"END\r\n") == b"VALUE %s 3 1\r\nx\r\nEND\r\n" % k
            assert r.get(tkey(i)) == b"x"
    for i in range(40):
        owners = [m for m in mcs if MemcacheClient((HOST, m.port)).get(tkey(i)) is not None]
        assert len(owners) == 1, (i, owners)
        with RawConn(owners[0].port) as c:
            head = c.request(b"mg %s t f\r\n" % tkey(i).encode(), b"\r\n")
        assert head.startswith(b"HD ") and b" f3" in head, head
        ttl = int(head.split(b" t")[1].split()[0])
        assert 290 <= ttl <= 300, (i, head)
        ttls = [d.ttl(tkey(i)) for d in direct if d.exists(tkey(i))]
        assert len(ttls) == 1 and 490 <= ttls[0] <= 500, (i, ttls)
        moved += owners[0] is mcs[2]
    print(f"\n{change}: {moved} of 40 untouched keys now on the third server")
    assert change == "remove" or moved > 0, "no key pulled to the new server"
    counts = [sum(1 for i in range(N) if MemcacheClient((HOST, m.port)).get(f"k{i}") is not None)
              for m in mcs]
    assert sum(counts) == N, counts
    assert sum(d.dbsize() for d in direct) == 2 * N + 40
    if change == "add":
        assert counts[2] > 0 and direct[2].dbsize() > 0
    else:
        assert counts[2] == 0 and direct[2].dbsize() == 0



def test_every_key_of_a_multi_key_command_is_pulled(procs):
    """SMOVE, RENAME(NX), LMOVE, SUNIONSTORE, EVAL with two keys and a
    WATCH / MULTI / EXEC, on hash-tagged keys whose owner changed: every key
    the command names is on its new owner before it runs there. Were only
    the first one pulled, the others would be written on the new owner
    while their old copies wait on the old one, then be lost (a later pull
    finds the key present and drops the old copy) or be read as missing."""
    rds = [procs.redis() for _ in range(3)]
    port = free_port()

    def config(n: int) -> str:
        # The background migrator crawls (one key a second): the keys
        # below are pulled by the commands themselves.
        return to_yaml({"rd": redis_pool(rds[:n], listen=f"{HOST}:{port}", hash_tag="{}",
                                         migration=True, migration_rate=1),
                        "_walnut": {"workers": 2}})

    p = Proxy("walnut", procs.workdir, {})
    p.conf_path.write_text(config(2))
    p.ports = {"rd": port}
    procs.started.append(p)
    p.start()
    gen1 = wait_workers(p.pid, 2)
    r = redis.Redis(host=HOST, port=port, protocol=2, socket_timeout=10, retry=Retry(NoBackoff(), 0))
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
