"""The background migrator (`migration: true`): after a reload that adds,
removes or re-weights a server, every key whose owner changed is moved —
Redis any type with its TTL, memcached with flags and TTL — and at the end
every key lives on the server Debian's nutcracker computes for the new
configuration (the oracle), and nowhere else. Pause, resume and abort from
the admin port; an old owner that dies mid-migration ends it, nothing
hangs. A named server moved to another address migrates too."""

from __future__ import annotations

import hashlib
import signal
import socket
import threading
import time

import pytest
import redis
from pymemcache.client.base import Client as MemcacheClient
from redis.backoff import NoBackoff
from redis.retry import Retry

from procmodel import wait_workers
from procs import HOST, Proxy, RawConn, free_port, memcache_pool, redis_pool, to_yaml, wait_until

# Minutes of work in all: left out of `make quick`.
pytestmark = pytest.mark.slow

N = 1500


def key(i: int) -> str:
    return "m" + hashlib.sha1(str(i).encode()).hexdigest()[:10]


def admin(port: int, line: str) -> str:
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(line.encode() + b"\r\nquit\r\n")
        buf = b""
        while chunk := s.recv(65536):
            buf += chunk
    return buf.decode()


def state(port: int, pool: str) -> dict[str, str]:
    """The pool's line of admin `migration` (not its per-server lines)."""
    for line in admin(port, "migration").splitlines():
        kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if kv.get("pool") == pool and "source" not in kv:
            return kv
    return {}


def sources(port: int, pool: str) -> dict[str, dict[str, int]]:
    """The pool's per-server lines of admin `migration`, by address."""
    out = {}
    for line in admin(port, "migration").splitlines():
        kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if kv.get("pool") == pool and "source" in kv:
            out[kv["source"]] = {k: int(kv[k]) for k in ("scanned", "moved")}
    return out


def metrics(port: int) -> dict[str, float]:
    """/metrics samples by their name and labels, as written."""
    out = {}
    for line in admin(port, "metrics").splitlines():
        if line.startswith("walnut_"):
            name, _, v = line.rpartition(" ")
            out[name] = float(v)
    return out


def elapsed(since: float) -> int:
    """Whole seconds since `since`, plus one for the servers' rounding."""
    return int(time.monotonic() - since) + 2


def redis_migrating(procs, rds, rate: int, workers: int, n: int = 2):
    """walnut with one Redis pool "rd" (`migration: true`) on the first
    `n` of `rds`, started: (the proxy, the pool's configuration text for
    its first k servers, which a reload to k makes the change)."""
    port = free_port()

    def conf(k: int) -> str:
        return to_yaml({"rd": redis_pool(rds[:k], listen=f"{HOST}:{port}", migration=True,
                                         migration_rate=rate)})

    p = Proxy("walnut", procs.workdir, {}, extra_args=["--workers", str(workers)])
    p.conf_path.write_text(conf(n))
    p.ports = {"rd": port}
    procs.started.append(p)
    p.start()
    return p, conf


def written_then_grown(p: Proxy, conf, r: redis.Redis, keys: list[str], n: int = 2) -> None:
    """``keys[i]`` = ``v{i}`` written through ``p`` (one pipeline), then
    the reload to ``conf(n + 1)``: one server more, whose keys start to
    move."""
    pipe = r.pipeline(transaction=False)
    for i, k in enumerate(keys):
        pipe.set(k, f"v{i}")
    pipe.execute()
    p.conf_path.write_text(conf(n + 1))
    p.signal(signal.SIGHUP)


def servers_for(change: str, n: int) -> tuple[list[int], list[int]]:
    """Indices of the servers (and weights) before and after."""
    return {
        "add": ([0, 1], [0, 1, 2]),
        "remove": ([0, 1, 2], [0, 1]),
        "weight": ([0, 1, 2], [0, 1, 2]),
    }[change]


@pytest.mark.parametrize("change", ["add", "remove", "weight"])
def test_every_moved_key_ends_on_its_new_owner(procs, change):
    mcs = procs.memcacheds(3)
    rds = [procs.redis() for _ in range(3)]
    before, after = servers_for(change, 3)
    mc_port, rd_port = free_port(), free_port()

    def pools(idx: list[int], heavy: bool, ports=(mc_port, rd_port)) -> dict:
        def srv(backends):
            out = []
            for i in idx:
                w = 3 if heavy and i == 0 else 1
                out.append(f"{backends[i].address}:{w}")
            return out
        mc = memcache_pool([], listen=f"{HOST}:{ports[0]}", migration=True, migration_rate=20000)
        mc["servers"] = srv(mcs)
        rd = redis_pool([], listen=f"{HOST}:{ports[1]}", migration=True, migration_rate=20000)
        rd["servers"] = srv(rds)
        return {"mc": mc, "rd": rd}

    p = Proxy("walnut", procs.workdir, {}, extra_args=["--workers", "2"])
    p.conf_path.write_text(to_yaml(pools(before, False)))
    p.ports = {"mc": mc_port, "rd": rd_port}
    procs.started.append(p)
    p.start()
    gen1 = wait_workers(p.pid, 2)
    mc = MemcacheClient((HOST, mc_port))
    r = redis.Redis(host=HOST, port=rd_port, protocol=2)
    # TTLs are checked against the time passed since they were set (a slow
    # machine takes many seconds over the writes and the migration).
    written = time.monotonic()
    for i in range(N):
        k = key(i)
        mc.set(k, f"v{i}".encode(), expire=300 if i % 2 else 0, noreply=False, flags=i % 5)
        pipe = r.pipeline(transaction=False)
        pipe.set(k, f"v{i}", ex=400 if i % 2 else None)
        pipe.hset(f"h{k}", mapping={"a": str(i), "b": "x"})
        pipe.rpush(f"l{k}", "1", "2", "3")
        pipe.zadd(f"z{k}", {"m": i})
        pipe.execute()
    p.conf_path.write_text(to_yaml(pools(after, change == "weight")))
    p.signal(signal.SIGHUP)
    wait_workers(p.pid, 2, exclude=gen1.values())
    for pool in ("mc", "rd"):
        wait_until(lambda pool=pool: state(p.admin_port, pool).get("state") == "done", 60,
                   what=f"migration of {pool} to end")
    st = {pool: state(p.admin_port, pool) for pool in ("mc", "rd")}
    assert int(st["mc"]["moved"]) > 0 and int(st["rd"]["moved"]) > 0, st
    assert st["mc"]["failed"] == "0" and st["rd"]["failed"] == "0", st
    # Progress per server walked: exactly the old servers, and their
    # counts add up to the pool's.
    text = admin(p.admin_port, "metrics")
    assert "# TYPE walnut_migration_keys_per_second gauge" in text
    assert "# TYPE walnut_migration_eta_seconds gauge" in text
    assert "# TYPE walnut_migration_server_keys_total counter" in text
    m = metrics(p.admin_port)
    for pool, backends in (("mc", mcs), ("rd", rds)):
        src = sources(p.admin_port, pool)
        assert set(src) == {backends[i].address for i in before}, (pool, src)
        for f in ("scanned", "moved"):
            assert sum(s[f] for s in src.values()) == int(st[pool][f]), (pool, f, src, st[pool])
            for a, s in src.items():
                assert m[f'walnut_migration_server_keys_total{{pool="{pool}",server="{a}",outcome="{f}"}}'] \
                    == s[f], (pool, a, f)
        if change == "remove":
            # Removing a server moves its keys only.
            assert src[backends[2].address]["moved"] == int(st[pool]["moved"]), (pool, src)
        else:
            # Adding a server, or weighing one more, takes keys from others.
            assert sum(s["moved"] > 0 for s in src.values()) >= 2, (pool, src)
        assert m[f'walnut_migration_keys_total{{pool="{pool}",outcome="moved"}}'] == int(st[pool]["moved"])
        # Ended: an average pace over its seconds (all of its moves when it
        # took under one), nothing left to estimate.
        assert m[f'walnut_migration_keys_per_second{{pool="{pool}"}}'] == int(st[pool]["keys_per_second"]) > 0
        assert m[f'walnut_migration_eta_seconds{{pool="{pool}"}}'] == 0 == int(st[pool]["eta_seconds"])

    # The oracle: nutcracker on the new configuration finds every key.
    oracle_ports = (free_port(), free_port())
    oracle = pools(after, change == "weight", oracle_ports)
    for v in oracle.values():
        del v["migration"], v["migration_rate"]
    nc = procs.proxy("nutcracker", oracle)
    with RawConn(oracle_ports[0]) as c:
        for i in range(N):
            k = key(i).encode()
            got = c.request(b"get %s\r\n" % k, b"END\r\n")
            want = b"VALUE %s %d %d\r\nv%d\r\nEND\r\n" % (k, i % 5, len(b"v%d" % i), i)
            assert got == want, (i, got)
    # nutcracker knows neither HELLO nor CLIENT SETINFO.
    nr = redis.Redis(host=HOST, port=oracle_ports[1], protocol=2, lib_name=None, lib_version=None)
    for i in range(N):
        k = key(i)
        assert nr.get(k) == f"v{i}".encode(), i
        assert nr.hgetall(f"h{k}") == {b"a": str(i).encode(), b"b": b"x"}, i
        assert nr.lrange(f"l{k}", 0, -1) == [b"1", b"2", b"3"], i
        assert nr.zscore(f"z{k}", "m") == i, i
        if i % 2 and i < 60:
            assert 400 - elapsed(written) <= nr.ttl(k) <= 400, (i, nr.ttl(k))
    _ = nc
    # And nowhere else: each key on exactly one server.
    assert sum(MemcacheClient((HOST, m.port)).get_many([key(i) for i in range(N)]).__len__()
               for m in mcs) == N
    assert sum(redis.Redis(host=HOST, port=x.port).dbsize() for x in rds) == 4 * N
    # memcached TTLs came along.
    for i in range(1, 60, 2):
        k = key(i).encode()
        for m in mcs:
            with RawConn(m.port) as c:
                head = c.request(b"mg %s t\r\n" % k, b"\r\n")
            if head.startswith(b"HD"):
                assert 300 - elapsed(written) <= int(head.split(b" t")[1].split()[0]) <= 300, (i, head)


def test_reads_ask_where_the_migrator_says_the_key_is(procs):
    """The migrator tells the workers which keys it moved: a GET of a key
    it moved asks the new owner first, one of a key it has not moved yet
    the old owner first, so neither asks a second server. (Without that
    map a read guesses by where reads found keys lately: with a quarter
    of the moving keys moved, one read of a moving key in four asked the
    wrong server first, 118 of 474 in a run.)"""
    rds = [procs.redis() for _ in range(3)]
    p, conf = redis_migrating(procs, rds, rate=100, workers=1)
    r = redis.Redis(host=HOST, port=p.ports["rd"], protocol=2, retry=Retry(NoBackoff(), 0))
    written_then_grown(p, conf, r, [key(i) for i in range(N)])
    wait_until(lambda: int(state(p.admin_port, "rd").get("moved", 0)) > 120, 30, what="keys moving")
    assert admin(p.admin_port, "migration pause rd").startswith("OK")
    new = redis.Redis(host=HOST, port=rds[2].port)
    # Paused: what the new server holds stops changing (a batch in the
    # middle of moving when the pause came ends first).
    held = [-1]

    def settled() -> bool:
        n, held[0] = held[0], new.dbsize()
        return n == held[0]

    wait_until(settled, 10, interval=0.3, what="the paused migrator's last batch")
    moved = held[0]

    def counted(name: str) -> float:
        return sum(v for k, v in metrics(p.admin_port).items() if k.startswith(name + "{"))

    reads0 = counted("walnut_worker_moved_reads_total")
    rereads0 = counted("walnut_worker_moved_rereads_total")
    # Every key, in an order that mixes moved and not yet moved ones.
    for i in range(N):
        assert r.get(key(i)) == f"v{i}".encode(), i
    reads = counted("walnut_worker_moved_reads_total") - reads0
    rereads = counted("walnut_worker_moved_rereads_total") - rereads0
    print(f"{moved} keys moved when paused; {reads:.0f} reads of moving keys, {rereads:.0f} asked a second server")
    assert new.dbsize() == moved
    assert reads > 2 * moved > 0, (reads, moved)
    assert rereads <= 2, (rereads, reads)


def test_memcached_reads_ask_the_new_owner_of_a_key_the_migrator_moved(procs):
    """A memcached `get` of a key the migrator says it moved is asked of
    the new owner alone, not pulled (a pull asks the old owner first: two
    round trips where one does). Keys not moved yet are still pulled. A
    miss on the new owner pulls the key all the same (the map is shared by
    keys, and may be wrong): a value left on the old owner is found,
    moved, and answered; a key on neither is a miss."""
    mcs = procs.memcacheds(3)
    port = free_port()

    def conf(n: int) -> str:
        return to_yaml({"mc": memcache_pool(mcs[:n], listen=f"{HOST}:{port}", migration=True,
                                            migration_rate=100)})

    p = Proxy("walnut", procs.workdir, {}, extra_args=["--workers", "1"])
    p.conf_path.write_text(conf(2))
    p.ports = {"mc": port}
    procs.started.append(p)
    p.start()
    mc = MemcacheClient((HOST, port))
    direct = [MemcacheClient((HOST, m.port)) for m in mcs]
    for i in range(N):
        mc.set(key(i), f"v{i}".encode(), noreply=False)
    first = {i: next(s for s in (0, 1) if direct[s].get(key(i)) is not None) for i in range(N)}
    p.conf_path.write_text(conf(3))
    p.signal(signal.SIGHUP)
    wait_until(lambda: int(state(p.admin_port, "mc").get("moved", 0)) > 120, 30, what="keys moving")
    assert admin(p.admin_port, "migration pause mc").startswith("OK")

    def items(s: int) -> int:
        return int(direct[s].stats()[b"curr_items"])

    held = [-1]

    def settled() -> bool:
        n, held[0] = held[0], items(2)
        return n == held[0]

    wait_until(settled, 10, interval=0.3, what="the paused migrator's last batch")
    by_migrator = {i for i in range(N) if direct[2].get(key(i)) is not None}
    assert len(by_migrator) == held[0] > 0

    def counted(name: str) -> float:
        return sum(v for k, v in metrics(p.admin_port).items() if k.startswith(name + "{"))

    reads0 = counted("walnut_worker_moved_reads_total")
    pulled0 = counted("walnut_worker_pulled_keys_total")
    rereads0 = counted("walnut_worker_moved_rereads_total")
    for i in range(N):
        # A `gets` too (its cas unique is the new owner's).
        got = mc.gets(key(i))[0] if i % 3 == 0 else mc.get(key(i))
        assert got == f"v{i}".encode(), i
    reads = counted("walnut_worker_moved_reads_total") - reads0
    pulled = counted("walnut_worker_pulled_keys_total") - pulled0
    rereads = counted("walnut_worker_moved_rereads_total") - rereads0
    # Every moving key is on the new server now: moved by the migrator,
    # or pulled by its read; and on no other server.
    moving = {i for i in range(N) if direct[2].get(key(i)) is not None}
    assert by_migrator < moving
    for i in moving:
        assert direct[first[i]].get(key(i)) is None, i
    print(f"{len(moving)} moving keys, {len(by_migrator)} moved by the migrator; "
          f"{reads:.0f} read on the new owner, {pulled:.0f} pulled, {rereads:.0f} pulled after a miss")
    # The migrator's keys were read on their new owner, not pulled: only
    # the others were (one whose bit another key set after a miss there).
    assert reads >= len(by_migrator), (reads, len(by_migrator))
    assert pulled == len(moving) - len(by_migrator), (pulled, len(moving), len(by_migrator))
    assert rereads <= pulled, (rereads, pulled)
    # A `gets` of a moved key, then a `cas` with what it returned: stored.
    for i in sorted(by_migrator)[10:15]:
        value, cas = mc.gets(key(i))
        assert value == f"v{i}".encode() and cas, i
        assert mc.cas(key(i), b"swapped", cas, noreply=False) is True, i
        assert direct[2].get(key(i)) == b"swapped", i

    # The map wrong: a key it says moved still (or again) on its old owner
    # only. Found there, moved, answered.
    wrong = sorted(by_migrator)[:5]
    for i in wrong:
        direct[2].delete(key(i), noreply=False)
        direct[first[i]].set(key(i), f"back{i}".encode(), noreply=False)
    pulled0 = counted("walnut_worker_pulled_keys_total")
    for i in wrong:
        assert mc.get(key(i)) == f"back{i}".encode(), i
        assert direct[2].get(key(i)) == f"back{i}".encode(), i
        # The old copy's delete goes out with the read behind the copy,
        # not before it: its answer may come after the client's.
        wait_until(lambda i=i: direct[first[i]].get(key(i)) is None, 5,
                   what=f"key {i} deleted on its old owner")
    assert counted("walnut_worker_pulled_keys_total") - pulled0 == len(wrong)
    # A key on neither server: a miss, and the client goes on.
    gone = sorted(by_migrator)[5]
    direct[2].delete(key(gone), noreply=False)
    assert mc.get(key(gone)) is None
    # The client goes on: a key the test left alone reads as written.
    untouched = next(i for i in range(N) if i not in by_migrator)
    assert mc.get(key(untouched)) == f"v{untouched}".encode()
    mc.set(key(gone), b"again", noreply=False)
    assert mc.get(key(gone)) == b"again"


def test_the_pace_knows_when_the_pool_has_clients(procs):
    """The master passes the pool's client requests, as its workers count
    them, to the migrator, whose pace then backs off at a smaller rise of
    the servers' no-op time (what that buys is measured in
    bench/migration.py). Without clients it counts the pool as quiet, with
    a busy client as having clients, and quiet again once the client
    stops; after a reload that keeps the migration going (new workers,
    whose counters start afresh) a busy client is seen again."""
    rds = [procs.redis() for _ in range(3)]
    # 20 keys a second: the migration outlasts the test.
    p, conf = redis_migrating(procs, rds, rate=20, workers=2)
    r = redis.Redis(host=HOST, port=p.ports["rd"], protocol=2, retry=Retry(NoBackoff(), 0))
    written_then_grown(p, conf, r, [key(i) for i in range(N)])

    def clients() -> str:
        st = state(p.admin_port, "rd")
        return st.get("clients", "") if st.get("state") == "running" and int(st.get("pace", 0)) > 0 else ""

    def busy_for_a_while(reloaded: bool):
        stop = threading.Event()
        sent = [0]

        def load():
            c = redis.Redis(host=HOST, port=p.ports["rd"], protocol=2, retry=Retry(NoBackoff(), 0))
            while not stop.is_set():
                assert c.get(key(sent[0] % N)) == f"v{sent[0] % N}".encode()
                sent[0] += 1

        t = threading.Thread(target=load, daemon=True)
        t.start()
        try:
            wait_until(lambda: clients() == "1", 10, what=f"clients seen (reloaded: {reloaded})")
            m = metrics(p.admin_port)
            assert m['walnut_migration_clients{pool="rd"}'] == 1
            assert 0 < m['walnut_migration_pace_keys_per_second{pool="rd"}'] <= 20
        finally:
            stop.set()
            t.join(10)
        assert sent[0] > 50
        wait_until(lambda: clients() == "0", 10, what="quiet again after the client stopped")

    wait_until(lambda: clients() == "0", 30, what="the migration running, no clients")
    assert metrics(p.admin_port)['walnut_migration_clients{pool="rd"}'] == 0
    busy_for_a_while(False)
    # Another change than the placement (the pace's ceiling, 20 → 21): a
    # new generation of workers, the migration goes on.
    pids = wait_workers(p.pid, 2)
    p.conf_path.write_text(to_yaml({"rd": redis_pool(rds, listen=f"{HOST}:{p.ports['rd']}",
                                                     migration=True, migration_rate=21)}))
    p.signal(signal.SIGHUP)
    wait_workers(p.pid, 2, exclude=pids.values())
    assert state(p.admin_port, "rd")["state"] == "running"
    busy_for_a_while(True)


def test_pause_resume_abort_and_a_dead_old_owner(procs):
    mcs = procs.memcacheds(3)
    port = free_port()

    def conf(n: int, rate: int) -> str:
        return to_yaml({"mc": memcache_pool(mcs[:n], listen=f"{HOST}:{port}", migration=True,
                                            migration_rate=rate)})

    p = Proxy("walnut", procs.workdir, {}, extra_args=["--workers", "2"])
    p.conf_path.write_text(conf(2, 100))
    p.ports = {"mc": port}
    procs.started.append(p)
    p.start()
    mc = MemcacheClient((HOST, port))
    for i in range(1200):
        mc.set(key(i), b"x", noreply=False)
    p.conf_path.write_text(conf(3, 100))
    p.signal(signal.SIGHUP)
    wait_until(lambda: int(state(p.admin_port, "mc").get("moved", 0)) > 20, 30, what="keys moving")
    assert admin(p.admin_port, "migration pause mc").startswith("OK")
    assert state(p.admin_port, "mc")["state"] == "paused"
    time.sleep(0.3)  # let a key in the middle of moving finish
    moved = state(p.admin_port, "mc")["moved"]
    time.sleep(1.0)  # a paused migrator moves nothing for a while
    assert state(p.admin_port, "mc")["moved"] == moved
    assert admin(p.admin_port, "migration resume mc").startswith("OK")
    wait_until(lambda: state(p.admin_port, "mc")["moved"] != moved, 10, what="moving again")
    assert admin(p.admin_port, "migration explode mc").startswith("ERR")
    assert admin(p.admin_port, "migration pause nosuchpool").startswith("ERR")
    assert admin(p.admin_port, "migration abort mc").startswith("OK")
    wait_until(lambda: state(p.admin_port, "mc")["state"] == "aborted", 10, what="aborted")
    # Keys not moved are still served (pulled when asked for).
    for i in range(0, 1200, 7):
        assert mc.get(key(i)) == b"x", i
    # More keys, a third of them on the third server, so that the next
    # migration (slow on purpose) is surely still running when it dies.
    for i in range(1200, 2400):
        mc.set(key(i), b"x", noreply=False)
    # A new change; an old owner dies in the middle: the migration ends
    # (its keys are lost, as in twemproxy), counted as failed, no hang.
    p.conf_path.write_text(conf(2, 20))
    p.signal(signal.SIGHUP)
    wait_until(lambda: state(p.admin_port, "mc").get("state") == "running"
               and int(state(p.admin_port, "mc").get("moved", 0)) > 0, 30,
               what="a new migration moving keys")
    mcs[2].kill()
    wait_until(lambda: state(p.admin_port, "mc").get("state") == "done", 60, what="the migration to end")
    assert int(state(p.admin_port, "mc")["failed"]) > 0
    assert mc.set(key(0), b"y", noreply=False)


def test_a_named_server_moved_to_a_new_address(procs):
    """`servers: - host:port:1 name`: the ring hashes the name, so moving a
    named server to another address keeps every key's place on the ring
    but not its machine. Its keys stay readable meanwhile (pulled from the
    old address) and end on the new address, the old one left empty."""
    mcs = procs.memcacheds(3)
    rds = [procs.redis() for _ in range(3)]
    mc_port, rd_port = free_port(), free_port()
    n = 1000

    def pools(second: int) -> str:
        def srv(backends):
            return [f"{backends[0].address}:1 alpha", f"{backends[second].address}:1 beta"]
        mc = memcache_pool([], listen=f"{HOST}:{mc_port}", migration=True, migration_rate=200)
        mc["servers"] = srv(mcs)
        rd = redis_pool([], listen=f"{HOST}:{rd_port}", migration=True, migration_rate=200)
        rd["servers"] = srv(rds)
        return to_yaml({"mc": mc, "rd": rd})

    p = Proxy("walnut", procs.workdir, {}, extra_args=["--workers", "2"])
    p.conf_path.write_text(pools(1))
    p.ports = {"mc": mc_port, "rd": rd_port}
    procs.started.append(p)
    p.start()
    gen1 = wait_workers(p.pid, 2)
    mc = MemcacheClient((HOST, mc_port))
    r = redis.Redis(host=HOST, port=rd_port, protocol=2, socket_timeout=10,
                    retry=Retry(NoBackoff(), 0))
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        mc.set(key(i), f"v{i}".encode(), noreply=False, flags=i % 5)
        pipe.set(key(i), f"v{i}").rpush(f"l{key(i)}", "a", "b")
    pipe.execute()
    keys = [key(i) for i in range(n)]
    on_beta_mc = set(MemcacheClient((HOST, mcs[1].port)).get_many(keys))
    rd_beta = redis.Redis(host=HOST, port=rds[1].port)
    rd_keys = keys + [f"l{k}" for k in keys]
    on_beta_rd = {k for k in rd_keys if rd_beta.exists(k)}
    assert 0 < len(on_beta_mc) < n and 0 < len(on_beta_rd) < 2 * n
    p.conf_path.write_text(pools(2))
    p.signal(signal.SIGHUP)
    wait_workers(p.pid, 2, exclude=gen1.values())
    # Read at once, while the migrator (200 keys a second) is far from done.
    assert state(p.admin_port, "rd").get("state") != "done"
    for i in range(n):
        assert mc.get(key(i)) == f"v{i}".encode(), i
        assert r.get(key(i)) == f"v{i}".encode() and r.lrange(f"l{key(i)}", 0, -1) == [b"a", b"b"], i
    for pool in ("mc", "rd"):
        wait_until(lambda pool=pool: state(p.admin_port, pool).get("state") == "done", 60,
                   what=f"migration of {pool} to end")
        assert state(p.admin_port, pool)["failed"] == "0"
    # beta's keys are on its new address, exactly those; the old is empty.
    assert set(MemcacheClient((HOST, mcs[2].port)).get_many(keys)) == on_beta_mc
    assert MemcacheClient((HOST, mcs[1].port)).get_many(keys) == {}
    rd_new = redis.Redis(host=HOST, port=rds[2].port)
    assert {k for k in rd_keys if rd_new.exists(k)} == on_beta_rd
    assert rd_beta.dbsize() == 0 and rd_new.dbsize() == len(on_beta_rd)
    assert set(MemcacheClient((HOST, mcs[0].port)).get_many(keys)) == set(keys) - on_beta_mc
