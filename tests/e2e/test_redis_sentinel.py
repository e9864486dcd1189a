"""Sentinel-managed shards: walnut asks the sentinels where each shard's
master is (the address in the config is only where it starts), follows
+switch-master when a master is killed under load (errors on that shard
only between the kill and the promotion, none after, none on the other
shard), and `-t` explains a pool it cannot follow."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from procmodel import wait_gone, wait_workers, workers_of
from procs import HOST, to_yaml, walnut_bin, wait_until


def client(port: int) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, retry=Retry(NoBackoff(), 0), socket_timeout=5)


def direct(port: int) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, socket_timeout=5)


def shard_pool(servers: list[str], sentinels, **settings) -> dict:
    pool = {
        "redis": True,
        "hash": "fnv1a_64",
        "distribution": "ketama",
        "timeout": 2000,
        "servers": servers,
        "sentinels": [s.address for s in sentinels],
    }
    pool.update(settings)
    return pool


def replica_of(procs, master) -> object:
    r = procs.redis(extra=["--replicaof", HOST, str(master.port)])
    wait_until(lambda: direct(r.port).info("replication").get("master_link_status") == "up", 15,
               what="replica in sync")
    return r


def keys_by_master(port: int, masters: dict[str, object], n: int = 60) -> dict[str, list[str]]:
    """Write n keys through walnut; which master holds each."""
    r = client(port)
    out = {name: [] for name in masters}
    for i in range(n):
        k = f"key{i}"
        r.set(k, "v")
        for name, m in masters.items():
            if direct(m.port).exists(k):
                out[name].append(k)
    return out


def test_the_master_comes_from_the_sentinels(procs):
    """shard1 is written with its replica's address: walnut asks the
    sentinels and writes go to the master (a replica would refuse them)."""
    a = procs.redis()
    a2 = replica_of(procs, a)
    sentinels = [procs.sentinel({"shard1": (a.port, 2)}) for _ in range(3)]
    p = procs.proxy("walnut", {"rd": shard_pool([f"{a2.address}:1 shard1"], sentinels)})
    r = client(p.port("rd"))

    def write_ok() -> bool:
        try:
            return r.set("first", "1") is True
        except redis.ResponseError:
            return False  # READONLY: still on the replica's address

    wait_until(write_ok, 10, what="writes reach the master")
    for i in range(100):
        assert r.set(f"k{i}", i) is True
    assert direct(a.port).get("k99") == b"99"
    log = p.log_path.read_text()
    assert "is now served by the master at 127.0.0.1:%d" % a.port in log


def test_failover_under_load(procs):
    """Kill shard1's master under busy clients: errors on shard1 only until
    one second after the sentinels promote its replica; shard2 never fails;
    what is written after the failover is on the new master."""
    a, b = procs.redis(), procs.redis()
    a2 = replica_of(procs, a)
    sentinels = [procs.sentinel({"shard1": (a.port, 2), "shard2": (b.port, 2)}) for _ in range(3)]
    p = procs.proxy("walnut", {"rd": shard_pool(
        [f"{a.address}:1 shard1", f"{b.address}:1 shard2"], sentinels)})
    port = p.port("rd")
    wait_until(lambda: all(s.master_of("shard1") == a.port for s in sentinels), 10,
               what="sentinels agree")
    # Sentinels see the replica before they can promote it.
    wait_until(lambda: all(direct(s.port).execute_command("SENTINEL", "REPLICAS", "shard1")
                           for s in sentinels), 15, what="sentinels know the replica")
    placed = keys_by_master(port, {"shard1": a, "shard2": b})
    assert placed["shard1"] and placed["shard2"], placed

    events: list[tuple[float, str, bool]] = []  # (time, shard, ok)
    stop = threading.Event()

    def load(shard: str, part: int) -> None:
        r = client(port)
        keys = placed[shard][part::2] or placed[shard]  # each thread its own keys
        i = 0
        while not stop.is_set():
            k = keys[i % len(keys)]
            i += 1
            try:
                ok = r.set(k, i) is True and r.get(k) == str(i).encode()
            except (redis.ConnectionError, redis.ResponseError, redis.TimeoutError):
                ok = False
            events.append((time.monotonic(), shard, ok))

    threads = [threading.Thread(target=load, args=a) for a in (("shard1", 0), ("shard1", 1), ("shard2", 0))]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        killed_at = time.monotonic()
        a.kill()
        promoted_at = None
        deadline = time.monotonic() + 40
        while promoted_at is None and time.monotonic() < deadline:
            if sentinels[0].master_of("shard1") == a2.port:
                promoted_at = time.monotonic()
            else:
                time.sleep(0.05)
        assert promoted_at is not None, "the sentinels did not promote the replica"
        time.sleep(2.0)
    finally:
        stop.set()
        for t in threads:
            t.join(10)

    before = [e for e in events if e[0] < killed_at]
    assert before and all(ok for _, _, ok in before)
    assert all(ok for _, shard, ok in events if shard == "shard2"), "shard2 was affected"
    late = [e for e in events if e[1] == "shard1" and e[0] > promoted_at + 1.0]
    assert len(late) > 50, len(late)
    bad = [e for e in late if not e[2]]
    assert not bad, f"{len(bad)} shard1 errors more than 1 s after the promotion"
    failed = [e for e in events if not e[2]]
    assert all(killed_at <= t <= promoted_at + 1.0 for t, _, _ in failed)
    # Writes after the failover are on the promoted replica.
    r = client(port)
    k = placed["shard1"][0]
    r.set(k, "after")
    assert direct(a2.port).get(k) == b"after"
    # A reload after the failover under the same busy clients: the new
    # workers ask the sentinels before they take a client, so no request
    # goes to the old master's address.
    events.clear()
    stop.clear()
    threads = [threading.Thread(target=load, args=a) for a in (("shard1", 0), ("shard1", 1), ("shard2", 0))]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(events) > 200, 10, what="load before the reload")
        gen1 = workers_of(p.pid)
        p.pools["rd"]["timeout"] = 2500
        p.conf_path.write_text(to_yaml(p.pools))
        p.signal(signal.SIGHUP)
        wait_workers(p.pid, len(gen1), exclude=gen1.values())
        for w in gen1.values():
            wait_gone(w, timeout=10)
        n = len(events)
        wait_until(lambda: len(events) > n + 200, 10, what="load after the reload")
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    reload_errors = [e for e in events if not e[2]]
    assert not reload_errors, f"{len(reload_errors)} errors across the reload"
    print(f"failover: {len(failed)} errors, promotion {promoted_at - killed_at:.2f} s after the kill, "
          f"last error {max((t for t, _, _ in failed), default=killed_at) - promoted_at:+.3f} s from it")


def test_check_explains_a_pool_it_cannot_follow(tmp_path):
    conf = tmp_path / "bad.yml"
    conf.write_text(
        "rd:\n  listen: 127.0.0.1:22999\n  redis: true\n  sentinels:\n    - 127.0.0.1:26379\n"
        "    - nowhere\n  servers:\n    - 127.0.0.1:6379:1\n"
        "mc:\n  listen: 127.0.0.1:22998\n  sentinels:\n    - 127.0.0.1:26379\n"
        "  servers:\n    - 127.0.0.1:11211:1 a\n"
    )
    out = subprocess.run([walnut_bin(), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=10)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert "sentinel 'nowhere' is not host:port" in text
    assert "needs a name: the master name its sentinels monitor" in text
    assert "'sentinels' is only valid for a redis pool" in text


def replica_up(sentinel) -> bool:
    """The sentinel lists shard1's replica as up (connected, not down)."""
    for entry in direct(sentinel.port).execute_command("SENTINEL", "REPLICAS", "shard1"):
        fields = dict(zip(entry[::2], entry[1::2])) if isinstance(entry, list) else entry
        flags = (fields.get(b"flags") or fields.get("flags") or b"")
        flags = flags.decode() if isinstance(flags, bytes) else flags
        if not {"s_down", "o_down", "disconnected"} & set(flags.split(",")):
            return True
    return False


def get_calls(port: int) -> int:
    return direct(port).info("commandstats").get("cmdstat_get", {}).get("calls", 0)


def test_reads_from_replicas(procs):
    """read_from: prefer-replica: single-key reads go to a replica the
    sentinels list as up, writes to the master; a replica killed under busy
    readers costs no request (the master serves them). read_from: any:
    master and replica both serve reads, each client's on one of them."""
    a = procs.redis()
    a2 = replica_of(procs, a)
    sentinels = [procs.sentinel({"shard1": (a.port, 2)}) for _ in range(3)]
    wait_until(lambda: all(replica_up(s) for s in sentinels), 15, what="sentinels see the replica up")
    # One worker: client ids (which pick a client's server under `any`)
    # are one counter.
    p = procs.proxy("walnut", {
        "rd": shard_pool([f"{a.address}:1 shard1"], sentinels, read_from="prefer-replica"),
        "any": shard_pool([f"{a.address}:1 shard1"], sentinels, read_from="any"),
    }, extra_args=["--workers", "1"])
    port = p.port("rd")
    r = client(port)
    for i in range(20):
        assert r.set(f"k{i}", i) is True
    wait_until(lambda: direct(a2.port).get("k19") == b"19", 10, what="replicated")
    assert direct(a.port).get("k19") == b"19"  # written on the master
    wait_log = p.log_path
    wait_until(lambda: "serves reads" in wait_log.read_text(), 10, what="walnut knows the replica")
    before = (get_calls(a.port), get_calls(a2.port))
    readers = [client(port) for _ in range(4)]
    for n in range(50):
        for c in readers:
            assert c.get(f"k{n % 20}") == str(n % 20).encode()
    after = (get_calls(a.port), get_calls(a2.port))
    assert after[1] - before[1] >= 200 and after[0] == before[0], (before, after)

    # read_from: any. Clients connected one after another (PING is
    # answered by walnut) have consecutive ids: some read from the
    # master, some from the replica, and every read is served.
    wait_until(lambda: "pool 'any': replica" in wait_log.read_text(), 10,
               what="the 'any' pool knows the replica")
    anys = [client(p.port("any")) for _ in range(6)]
    for c in anys:
        assert c.ping() is True
    before = (get_calls(a.port), get_calls(a2.port))
    for n in range(30):
        for c in anys:
            assert c.get(f"k{n % 20}") == str(n % 20).encode()
    after = (get_calls(a.port), get_calls(a2.port))
    served = (after[0] - before[0], after[1] - before[1])
    assert served[0] > 0 and served[1] > 0 and sum(served) == 180, served

    # The replica dies under busy readers: not one read fails.
    errors, done = [], threading.Event()

    def read_loop(c) -> None:
        n = 0
        while not done.is_set():
            try:
                assert c.get(f"k{n % 20}") == str(n % 20).encode()
            except Exception as e:  # noqa: BLE001 (every failure is counted)
                errors.append(repr(e))
            n += 1

    threads = [threading.Thread(target=read_loop, args=(c,)) for c in readers]
    for t in threads:
        t.start()
    try:
        time.sleep(0.3)
        a2.kill()
        m = get_calls(a.port)
        wait_until(lambda: get_calls(a.port) > m + 500, 10, what="the master serving the reads")
    finally:
        done.set()
        for t in threads:
            t.join(10)
    assert not errors, errors[:5]
