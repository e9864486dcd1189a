"""Redis Cluster as a backend (``redis_cluster: true``): a real cluster of
redis-server nodes, walnut given one seed node, redis-py through walnut.

Checks that keys land on the node serving their hash slot, that multi-key
commands are split per slot and merged in order, that hash tags co-locate,
and that a slot migrated by hand under load (ASK during the migration,
MOVED after it) costs the client no error. Large values are streamed to
their slot's node and sent again after MOVED or ASK from a copy kept in
chunks, with the worker's peak memory checked.
"""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from faultkit import children, status_kb
from procs import HOST, cluster_node_ids, proxy_bin, redis_cli, slot_owner, wait_until
from test_redis_large_values import MB, Conn, digest_of

# Minutes of work in all: left out of `make quick`.
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _walnut_only(proxy_kind: str) -> None:
    if proxy_kind != "walnut":
        pytest.skip("twemproxy has no Redis Cluster support")


def cluster_pool(seed, **settings) -> dict:
    pool = {
        "redis": True,
        "redis_cluster": True,
        "timeout": 5000,
        "servers": [f"{seed.address}:1"],
    }
    pool.update(settings)
    return pool


@pytest.fixture(scope="module")
def cluster(module_procs):
    return module_procs.redis_cluster(masters=3)


@pytest.fixture(scope="module")
def proxied(module_procs, cluster, proxy_kind):
    if proxy_kind != "walnut":
        pytest.skip("twemproxy has no Redis Cluster support")
    proxy = module_procs.proxy(proxy_kind, {"alpha": cluster_pool(cluster[1])}, extra_args=["--workers", "2"])
    return proxy


def client(proxy) -> redis.Redis:
    return redis.Redis(host=HOST, port=proxy.port("alpha"), socket_timeout=10, protocol=2)


def direct(port: int) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, socket_timeout=10)


def owners(port: int) -> dict[int, int]:
    """slot -> port of its master, from CLUSTER SLOTS of one node."""
    out = {}
    for start, end, master, *_ in direct(port).execute_command("CLUSTER SLOTS"):
        for s in range(start, end + 1):
            out[s] = master[1]
    return out


def test_every_key_lands_on_the_node_of_its_slot(cluster, proxied):
    c = client(proxied)
    keys = [f"key:{i}" for i in range(1000)]
    for k in keys:
        assert c.set(k, f"v-{k}") is True
    own = owners(cluster[0].port)
    nodes = {n.port: direct(n.port) for n in cluster}
    per_node = {p: 0 for p in nodes}
    for k in keys:
        port = own[key_slot(k.encode())]
        # The owner serves it itself (a wrong node would answer MOVED).
        assert nodes[port].get(k) == f"v-{k}".encode(), k
        per_node[port] += 1
        assert c.get(k) == f"v-{k}".encode()
    # Three masters, every one got a share.
    assert all(n > 200 for n in per_node.values()), per_node


def test_keyspace_and_transactions_across_the_masters(cluster, proxied):
    """DBSIZE summed over the masters, SCAN walking every master (each key
    once), INFO's keyspace summed, a transaction pinned to the first key's
    node, a key of another node refused (the transaction aborted), WATCH."""
    c = client(proxied)
    nodes = [direct(n.port) for n in cluster]
    total = sum(n.dbsize() for n in nodes)
    assert c.dbsize() == total
    keys = {f"scan:{i}" for i in range(300)}
    for k in keys:
        c.set(k, 1)
    assert c.dbsize() == total + 300
    seen = [k.decode() for k in c.scan_iter(match="scan:*", count=50)]
    assert sorted(seen) == sorted(keys)  # every key, once
    assert c.info("keyspace")["db0"]["keys"] == total + 300
    # A transaction on the node of {t}'s slot.
    p = c.pipeline(transaction=True)
    p.set("{t}a", "1").incr("{t}b").get("{t}a")
    assert p.execute() == [True, 1, b"1"]
    own = owners(cluster[0].port)
    here = own[key_slot(b"t")]
    other = next(f"o{i}" for i in range(1000) if own[key_slot(f"o{i}".encode())] != here)
    p = c.pipeline(transaction=True)
    p.set("{t}a", "2").set(other, "x")
    with pytest.raises(redis.ResponseError, match="must map to the transaction's one server"):
        p.execute()  # redis-py raises the refused command's error; EXEC got EXECABORT
    assert c.get("{t}a") == b"1" and c.get(other) is None
    # WATCH conflict seen through the proxy.
    w = client(proxied)
    with w.pipeline(transaction=True) as p:
        p.watch("{t}a")
        c.set("{t}a", "changed")
        p.multi()
        p.set("{t}a", "mine")
        with pytest.raises(redis.WatchError):
            p.execute()
    assert c.get("{t}a") == b"changed"


def test_multi_key_commands_split_per_slot_in_order(proxied):
    c = client(proxied)
    keys = [f"mk:{i}" for i in range(60)]
    assert len({key_slot(k.encode()) for k in keys}) > 50
    assert c.mset({k: f"val{i}" for i, k in enumerate(keys)}) is True
    asked = []
    for i, k in enumerate(keys):
        asked.append(k)
        if i % 7 == 0:
            asked.append(f"missing:{i}")
    expect = [None if k.startswith("missing") else f"val{keys.index(k)}".encode() for k in asked]
    assert c.mget(asked) == expect
    assert c.exists(*asked) == len(keys)
    assert c.delete(*keys[:30], "missing:x") == 30
    assert c.mget(keys[:31]) == [None] * 30 + [b"val30"]
    assert c.execute_command("UNLINK", *keys[30:]) == 30


def test_hash_tags_co_locate(cluster, proxied):
    c = client(proxied)
    a, b = "{user:42}:followers", "{user:42}:following"
    assert key_slot(a.encode()) == key_slot(b.encode())
    c.sadd(a, "x", "y", "z")
    c.sadd(b, "y", "z", "w")
    assert c.sinter(a, b) == {b"y", b"z"}
    assert c.rename(a, "{user:42}:renamed") is True
    assert c.smembers("{user:42}:renamed") == {b"x", b"y", b"z"}
    port = owners(cluster[0].port)[key_slot(b"user:42")]
    assert direct(port).scard("{user:42}:renamed") == 3
    # Keys of different slots in a one-server command: the node's CROSSSLOT
    # reaches the client, and the connection stays usable.
    c.set("plain-a", "1")
    assert key_slot(b"plain-a") != key_slot(b"plain-b")
    with pytest.raises(redis.ResponseError, match="hash to the same slot"):
        c.rename("plain-a", "plain-b")
    assert c.get("plain-a") == b"1"


def cmdstat(port: int, cmd: str) -> dict[str, int]:
    """calls / rejected_calls of one command on one node (INFO commandstats)."""
    stats = direct(port).info("commandstats").get(f"cmdstat_{cmd}", {})
    return {"calls": int(stats.get("calls", 0)), "rejected": int(stats.get("rejected_calls", 0))}


def test_the_slot_map_sends_each_key_straight_to_its_owner(cluster, proxied):
    """With the map loaded no request is refused with MOVED: every GET is
    executed once, on its owner, and none is rejected anywhere."""
    c = client(proxied)
    keys = [f"direct:{i}" for i in range(300)]
    for k in keys:
        c.set(k, k)
    # Every worker has its map once a full pass of reads saw no redirect.
    for n in cluster:
        direct(n.port).config_resetstat()
    for k in keys:
        assert c.get(k) == k.encode()
    calls = sum(cmdstat(n.port, "get")["calls"] for n in cluster)
    rejected = sum(cmdstat(n.port, "get")["rejected"] for n in cluster)
    assert (calls, rejected) == (300, 0)


def test_large_values(cluster, proxied):
    """Values above the streaming threshold are streamed to their slot's
    node (kept in a spool to follow a MOVED if need be)."""
    c = client(proxied)
    big = {f"big:{i}": bytes([65 + i]) * (3 * 1024 * 1024 + i) for i in range(4)}
    for k, v in big.items():
        assert c.set(k, v) is True
    own = owners(cluster[0].port)
    for k, v in big.items():
        assert direct(own[key_slot(k.encode())]).get(k) == v
        assert c.get(k) == v


def test_keys_routed_from_a_stale_map_follow_moved(cluster, proxied):
    """Pipelined traffic right after start, before or while the map loads:
    every reply is right (MOVED followed)."""
    c = client(proxied)
    p = c.pipeline(transaction=False)
    for i in range(500):
        p.set(f"pipe:{i}", i)
    for i in range(500):
        p.get(f"pipe:{i}")
    res = p.execute()
    assert res[:500] == [True] * 500
    assert res[500:] == [str(i).encode() for i in range(500)]


def migrate_slot(slot: int, src: int, dst: int, between=lambda: None) -> None:
    """Move ``slot`` from the master on port ``src`` to the one on ``dst`` as
    ``redis-cli --cluster reshard`` does, calling ``between()`` at each step."""
    ids = cluster_node_ids(src)
    src_id, dst_id = ids[src][0], ids[dst][0]
    redis_cli(dst, "cluster", "setslot", str(slot), "importing", src_id)
    redis_cli(src, "cluster", "setslot", str(slot), "migrating", dst_id)
    between()
    while True:
        keys = redis_cli(src, "cluster", "getkeysinslot", str(slot), "5").split()
        if not keys:
            break
        redis_cli(src, "migrate", HOST, str(dst), "", "0", "5000", "keys", *keys)
        between()
    for port in ids:
        if "master" in ids[port][1]:
            redis_cli(port, "cluster", "setslot", str(slot), "node", dst_id)


class SetGetLoad:
    """Two client threads through ``proxy``, each setting and reading back
    its half of ``keys`` until the block ends; ``extra`` are more thread
    targets taking this load. Every exception or wrong value is an error,
    kept with its time: ``errors`` holds ``(time.monotonic(), message)``."""

    def __init__(self, proxy, keys: list[str], extra=()):
        self.proxy, self.keys = proxy, keys
        self.stop = threading.Event()
        self.errors: list[tuple[float, str]] = []
        self.ops = 0
        self.threads = [threading.Thread(target=self._set_get, args=(w,), daemon=True) for w in range(2)]
        self.threads += [threading.Thread(target=f, args=(self,), daemon=True) for f in extra]

    def error(self, message: str) -> None:
        self.errors.append((time.monotonic(), message))

    def _set_get(self, worker: int) -> None:
        lc = client(self.proxy)
        value = 0
        while not self.stop.is_set():
            value += 1
            for k in self.keys[worker::2]:
                try:
                    assert lc.set(k, f"{worker}-{value}") is True
                    got = lc.get(k)
                    if got != f"{worker}-{value}".encode():
                        self.error(f"{k}: got {got!r}, wrote {worker}-{value}")
                    self.ops += 2
                except Exception as e:  # noqa: BLE001 - every error counts
                    self.error(f"{k}: {e!r}")

    def run_for(self, n: int, what: str, until_error: bool = True) -> None:
        """Wait (bounded) for ``n`` more operations, or the first error."""
        start = self.ops
        wait_until(lambda: self.ops >= start + n or (until_error and self.errors), 30,
                   interval=0.005, what=what)

    def __enter__(self) -> "SetGetLoad":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def test_slot_migrated_under_load_costs_no_error(procs, proxy_kind):
    nodes = procs.redis_cluster(masters=3)
    proxy = procs.proxy(proxy_kind, {"alpha": cluster_pool(nodes[0])}, extra_args=["--workers", "2", "-v", "7"])
    tag = "{mig}"
    slot = key_slot(b"mig")
    src = slot_owner(nodes[0].port, slot)
    dst = next(n.port for n in nodes if n.port != src)
    keys = [f"{tag}:{i}" for i in range(40)]
    c = client(proxy)
    for k in keys:
        c.set(k, "0")

    multi_keys = [f"{tag}:m{i}" for i in range(10)]
    multi_ops = [0]

    def multi_load(load: SetGetLoad) -> None:
        # Multi-key requests on the slot: a node answers TRYAGAIN while the
        # keys are split between the two nodes; walnut waits it out.
        lc = client(proxy)
        value = 0
        other = "{other}:x"
        lc.set(other, "o")
        while not load.stop.is_set():
            value += 1
            try:
                assert lc.mset({k: f"m-{value}" for k in multi_keys}) is True
                got = lc.mget([*multi_keys, other])
                if got != [f"m-{value}".encode()] * 10 + [b"o"]:
                    load.error(f"mget: got {got!r}, wrote m-{value}")
                multi_ops[0] += 2
            except Exception as e:  # noqa: BLE001 - every error counts
                load.error(f"multi: {e!r}")

    with SetGetLoad(proxy, keys, extra=[multi_load]) as load:
        # Some requests between the steps of the migration.
        def let_traffic_run() -> None:
            load.run_for(50, "traffic")

        let_traffic_run()
        migrate_slot(slot, src, dst, between=let_traffic_run)
        let_traffic_run()
        let_traffic_run()
    assert not load.errors, load.errors[:10]
    assert load.ops > 300 and multi_ops[0] > 20, (load.ops, multi_ops)
    assert slot_owner(nodes[0].port, slot) == dst
    d = direct(dst)
    for k in keys:
        assert d.get(k) is not None, k
    # After the move every key is served by the new owner, read through walnut.
    for k in keys:
        assert c.get(k) == d.get(k)
    # Both kinds of redirection were met and followed.
    log = proxy.log_path.read_text(errors="replace")
    assert f"ASK slot {slot} to 127.0.0.1:{dst}" in log
    assert f"MOVED slot {slot} to 127.0.0.1:{dst}" in log


def roles(port: int) -> tuple[list[int], list[int]]:
    """(master ports, replica ports) as the node on ``port`` sees them."""
    ids = cluster_node_ids(port)
    masters = [p for p, (_, flags) in ids.items() if "master" in flags]
    replicas = [p for p, (_, flags) in ids.items() if "slave" in flags]
    return masters, replicas


def test_reads_from_replicas(procs, proxy_kind):
    nodes = procs.redis_cluster(masters=3, replicas=1)
    proxy = procs.proxy(proxy_kind, {"alpha": cluster_pool(nodes[0], cluster_read_replicas=True)})
    c = client(proxy)
    keys = [f"rr:{i}" for i in range(200)]
    for k in keys:
        assert c.set(k, k) is True
    # Replication is asynchronous: wait until the replicas have every key.
    wait_until(lambda: c.mget(keys) == [k.encode() for k in keys], 30, what="replicated values")
    masters, replicas = roles(nodes[0].port)
    assert len(masters) == 3 and len(replicas) == 3
    for n in nodes:
        direct(n.port).config_resetstat()
    for k in keys:
        assert c.get(k) == k.encode()
    assert sum(cmdstat(p, "get")["calls"] for p in replicas) == 200
    assert sum(cmdstat(p, "get")["calls"] for p in masters) == 0
    # Writes still go to the masters.
    assert c.set("rr:write", "w") is True
    assert sum(cmdstat(p, "set")["calls"] for p in masters) == 1
    assert sum(cmdstat(p, "set")["rejected"] for p in replicas) == 0


def test_failover_under_load(procs, proxy_kind):
    nodes = procs.redis_cluster(masters=3, replicas=1)
    proxy = procs.proxy(proxy_kind, {"alpha": cluster_pool(nodes[0])}, extra_args=["--workers", "2"])
    keys = [f"fo:{i}" for i in range(30)]
    slot = key_slot(keys[0].encode())
    old = slot_owner(nodes[0].port, slot)
    _, replicas = roles(nodes[0].port)
    replica = next(p for p in replicas if direct(p).info("replication").get("master_port") == old)
    with SetGetLoad(proxy, keys) as load:
        load.run_for(200, "traffic")
        began = time.monotonic()
        assert redis_cli(replica, "cluster", "failover").strip() == "OK"
        wait_until(lambda: slot_owner(replica, slot) == replica and slot_owner(old, slot) == replica,
                   60, what="failover done")
        ended = time.monotonic()
        load.run_for(400, "traffic after the failover", until_error=False)
    errors = load.errors
    # A coordinated failover: no client sees an error at all.
    assert not errors, (began, ended, errors[:10])
    assert "slave" in cluster_node_ids(old)[old][1]
    # The promoted replica serves the slot itself, with the last value written.
    assert direct(replica).get(keys[0]) == client(proxy).get(keys[0])


def _cluster_down(port: int, key: str) -> bool:
    try:
        direct(port).get(key)
    except redis.exceptions.ClusterDownError:
        return True
    return False


def test_clusterdown_is_waited_out_not_passed_on(procs):
    """A node that answers -CLUSTERDOWN did not run the command (its view of
    the cluster is changing, as for a few ms around a failover): walnut
    asks for a new map and sends it again, 20 ms apart, for up to 1 s. A
    client sees no error when the slot is served again within that time;
    a slot that stays unserved is answered CLUSTERDOWN after about 1 s."""
    nodes = procs.redis_cluster(masters=3)
    proxy = procs.proxy("walnut", {"alpha": cluster_pool(nodes[0])}, extra_args=["--workers", "1"])
    c = client(proxy)
    key = "down:1"
    assert c.set(key, "v") is True
    slot = key_slot(key.encode())
    owner = slot_owner(nodes[0].port, slot)
    admin = direct(owner)
    admin.execute_command("CLUSTER", "DELSLOTS", slot)
    try:
        wait_until(lambda: _cluster_down(owner, key), 10, what="the owner answers CLUSTERDOWN")
        back = threading.Timer(0.3, lambda: admin.execute_command("CLUSTER", "ADDSLOTS", slot))
        started = time.monotonic()
        back.start()
        assert c.get(key) == b"v"
        assert time.monotonic() - started >= 0.2
        back.join()
        wait_until(lambda: not _cluster_down(owner, key), 10, what="the slot served again")
        admin.execute_command("CLUSTER", "DELSLOTS", slot)
        wait_until(lambda: _cluster_down(owner, key), 10, what="the owner answers CLUSTERDOWN")
        started = time.monotonic()
        with pytest.raises(redis.exceptions.ClusterDownError):
            c.get(key)
        assert time.monotonic() - started >= 0.9
    finally:
        try:
            admin.execute_command("CLUSTER", "ADDSLOTS", slot)
        except redis.exceptions.ResponseError:
            pass  # already served


def test_config_test_checks_the_cluster_keys(tmp_path, proxy_kind):
    good = "alpha:\n  listen: 127.0.0.1:22121\n  redis: true\n  redis_cluster: true\n  servers:\n   - 127.0.0.1:7000:1\n"
    bad = "alpha:\n  listen: 127.0.0.1:22121\n  redis_cluster: true\n  servers:\n   - 127.0.0.1:7000:1\n"
    for text, ok in ((good, True), (bad, False)):
        path = tmp_path / "c.yml"
        path.write_text(text)
        proc = subprocess.run([proxy_bin(proxy_kind), "-t", "-c", str(path)], capture_output=True, text=True, timeout=20)
        out = proc.stdout + proc.stderr
        assert (proc.returncode == 0) == ok, out
        if not ok:
            assert "line 3" in out or ":3" in out, out
            assert "'redis_cluster' is only valid for a redis pool" in out, out


def test_master_killed_under_load_errors_only_within_the_failover_window(procs, proxy_kind):
    nodes = procs.redis_cluster(masters=3, replicas=1)
    proxy = procs.proxy(proxy_kind, {"alpha": cluster_pool(nodes[0])}, extra_args=["--workers", "2"])
    keys = [f"kill:{i}" for i in range(30)]
    slot = key_slot(keys[0].encode())
    old = slot_owner(nodes[0].port, slot)
    victim = next(n for n in nodes if n.port == old)
    survivor = next(n.port for n in nodes if n.port != old)
    _, replicas = roles(nodes[0].port)
    replica = next(p for p in replicas if direct(p).info("replication").get("master_port") == old)
    with SetGetLoad(proxy, keys) as load:
        load.run_for(200, "traffic")
        assert not load.errors, load.errors[:5]
        killed = time.monotonic()
        victim.kill()
        wait_until(lambda: slot_owner(survivor, slot) == replica, 60, interval=0.05, what="replica promoted")
        promoted = time.monotonic()
        load.run_for(600, "traffic after the failover", until_error=False)
    errors = load.errors
    # Errors while the slot had no live master, none once it had one again
    # (1 s for walnut's next map and the cluster's gossip to settle).
    late = [(round(t - promoted, 3), e) for t, e in errors if t > promoted + 1.0]
    assert not late, late[:10]
    assert all(t >= killed for t, _ in errors)
    print(f"failover window: {promoted - killed:.2f}s, {len(errors)} client errors, "
          f"last {max((t for t, _ in errors), default=killed) - killed:.2f}s after the kill")


def test_cluster_with_a_password(procs, proxy_kind):
    """redis_auth: walnut authenticates every node connection, discovered
    nodes included (and asks the clients for the password, as twemproxy)."""
    nodes = procs.redis_cluster(masters=3, password="s3cret")
    proxy = procs.proxy(proxy_kind, {"alpha": cluster_pool(nodes[0], redis_auth="s3cret")})
    c = redis.Redis(host=HOST, port=proxy.port("alpha"), socket_timeout=10, protocol=2, password="s3cret")
    keys = [f"auth:{i}" for i in range(100)]
    assert c.mset({k: k for k in keys}) is True
    assert c.mget(keys) == [k.encode() for k in keys]
    held = [redis.Redis(host=HOST, port=n.port, password="s3cret").dbsize() for n in nodes]
    assert sum(held) == 100 and all(h > 0 for h in held), held
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host=HOST, port=proxy.port("alpha"), socket_timeout=10, protocol=2).get("auth:1")


# ------------------------------------------------ large values, streamed ----


def one_worker(procs, nodes, *extra):
    """walnut with one worker (its VmHWM is the proxy's) on a cluster pool."""
    proxy = procs.proxy("walnut", {"alpha": cluster_pool(nodes[0])},
                        extra_args=["--workers", "1", "-v", "7", *extra])
    worker = wait_until(lambda: children(proxy.pid), 10, what="worker")[0]
    return proxy, worker


def map_loaded(proxy, nodes, key: str) -> bool:
    """Whether a GET of ``key`` through walnut goes straight to its owner
    (no node refused it with a redirection)."""
    for n in nodes:
        direct(n.port).config_resetstat()
    client(proxy).get(key)
    return sum(cmdstat(n.port, "get")["rejected"] for n in nodes) == 0


def stored_digest(port: int, key: bytes) -> tuple[int, str]:
    d = Conn(port)
    try:
        d.send_command(b"GET", key)
        return d.bulk_digest()
    finally:
        d.close()


def big_set(proxy, key: bytes, size: int) -> bytes:
    c = Conn(proxy.port("alpha"))
    try:
        c.send_big(b"SET", key, size)
        return c.line()
    finally:
        c.close()


def test_100mb_value_streamed_to_a_cluster_node(procs, proxy_kind):
    """A 100 MB SET to a cluster pool is streamed to its slot's node: the
    worker never holds it contiguously (client input, kept copy and server
    output would be 300 MB); its copy, kept to follow a MOVED, is in 64 KiB
    chunks."""
    nodes = procs.redis_cluster(masters=3)
    proxy, worker = one_worker(procs, nodes)
    key = b"huge:value"
    owner = slot_owner(nodes[0].port, key_slot(key))
    wait_until(lambda: map_loaded(proxy, nodes, key.decode()), 20, what="slot map")
    size = 100 * MB
    t0 = time.monotonic()
    assert big_set(proxy, key, size) == b"+OK"
    set_s = time.monotonic() - t0
    want = (size, digest_of(size))
    assert stored_digest(owner, key) == want
    c = Conn(proxy.port("alpha"))
    try:
        c.send_command(b"GET", key)
        assert c.bulk_digest() == want
        c.send_command(b"PING")
        assert c.line() == b"+PONG"
    finally:
        c.close()
    hwm = status_kb(worker, "VmHWM")
    print(f"\n100 MB SET to a cluster pool: {set_s:.2f}s; worker VmHWM {hwm} kB")
    # The kept copy (100 MB) plus bounded buffers: not the 300 MB of three
    # contiguous copies.
    assert hwm < 160 * 1024, f"worker peak RSS {hwm} kB for a 100 MB value"
    assert direct(owner).execute_command("DEL", key) == 1
    # The chunks were freed with the reply (and the heap trimmed since).
    wait_until(lambda: status_kb(worker, "VmRSS") < 48 * 1024, 20, what="the kept copy to be freed")


def test_large_set_to_a_moved_slot_lands_on_the_new_owner(procs, proxy_kind):
    """A slot moved by hand (SETSLOT NODE on every master) while walnut's
    map still names the old owner: the old owner answers MOVED once the
    whole value is read, and walnut sends the value again from its spool
    to the new owner."""
    nodes = procs.redis_cluster(masters=3)
    proxy, worker = one_worker(procs, nodes)
    key = b"{moved-big}:k"
    slot = key_slot(key)
    size = 64 * MB
    want = (size, digest_of(size))
    moved_seen = 0
    # A map refresh (every 10 s) may land between the move and the SET:
    # then no MOVED is needed; move the slot again and retry.
    for attempt in range(3):
        src = slot_owner(nodes[0].port, slot)
        dst = next(n.port for n in nodes if n.port != src)
        wait_until(lambda: map_loaded(proxy, nodes, key.decode()), 20, what="slot map")
        migrate_slot(slot, src, dst)
        for n in nodes:
            direct(n.port).config_resetstat()
        assert big_set(proxy, key, size) == b"+OK"
        assert slot_owner(nodes[0].port, slot) == dst
        # Executed once, on the new owner.
        assert cmdstat(dst, "set") == {"calls": 1, "rejected": 0}, attempt
        assert stored_digest(dst, key) == want
        rejected = cmdstat(src, "set")["rejected"]
        assert rejected in (0, 1), rejected
        moved_seen += rejected
        assert direct(dst).delete(key) == 1
        if moved_seen:
            break
    assert moved_seen == 1
    # Sent again from the spool as the connection drains, not queued whole.
    hwm = status_kb(worker, "VmHWM")
    print(f"\n64 MB SET followed MOVED: worker VmHWM {hwm} kB")
    assert hwm < (64 + 36) * 1024, f"worker peak RSS {hwm} kB for a 64 MB value sent twice"
    log = proxy.log_path.read_text(errors="replace")
    assert f"MOVED slot {slot} to 127.0.0.1:{dst}" in log
    # Through walnut, after the redirection: the client is in step.
    c = client(proxy)
    assert c.set(key, b"small") is True
    assert direct(dst).get(key) == b"small"


def test_large_set_during_a_migration_follows_ask(procs, proxy_kind):
    """Slot MIGRATING on its owner, IMPORTING on another node, the key not
    on the owner: the owner answers ASK; walnut sends ASKING and the value
    (from its spool) to the importing node."""
    nodes = procs.redis_cluster(masters=3)
    proxy, worker = one_worker(procs, nodes)
    key = b"{ask-big}:k"
    slot = key_slot(key)
    src = slot_owner(nodes[0].port, slot)
    dst = next(n.port for n in nodes if n.port != src)
    ids = cluster_node_ids(src)
    wait_until(lambda: map_loaded(proxy, nodes, key.decode()), 20, what="slot map")
    redis_cli(dst, "cluster", "setslot", str(slot), "importing", ids[src][0])
    redis_cli(src, "cluster", "setslot", str(slot), "migrating", ids[dst][0])
    for n in nodes:
        direct(n.port).config_resetstat()
    size = 48 * MB
    assert big_set(proxy, key, size) == b"+OK"
    hwm = status_kb(worker, "VmHWM")
    print(f"\n48 MB SET followed ASK: worker VmHWM {hwm} kB")
    assert hwm < (48 + 36) * 1024, f"worker peak RSS {hwm} kB for a 48 MB value sent twice"
    assert cmdstat(src, "set") == {"calls": 0, "rejected": 1}
    assert cmdstat(dst, "set") == {"calls": 1, "rejected": 0}
    assert cmdstat(dst, "asking")["calls"] >= 1
    log = proxy.log_path.read_text(errors="replace")
    assert f"ASK slot {slot} to 127.0.0.1:{dst}" in log
    # End the migration; the value is on the new owner, whole.
    for port in ids:
        if "master" in ids[port][1]:
            redis_cli(port, "cluster", "setslot", str(slot), "node", ids[dst][0])
    assert stored_digest(dst, key) == (size, digest_of(size))


def big_query(port: int) -> int | None:
    """The id of a client of the node on ``port`` in the middle of sending
    a large argument (query buffer or arguments over 1 MB)."""
    for line in redis_cli(port, "client", "list").splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if int(f.get("qbuf", 0)) > MB or int(f.get("argv-mem", 0)) > MB:
            return int(f["id"])
    return None


def test_client_gone_mid_value_closes_the_node_connection(procs, proxy_kind):
    nodes = procs.redis_cluster(masters=3)
    proxy, _ = one_worker(procs, nodes)
    key = b"{cut-big}:k"
    owner = slot_owner(nodes[0].port, key_slot(key))
    a = Conn(proxy.port("alpha"))
    try:
        a.send_big(b"SET", key, 64 * MB, stop_at=20 * MB)
        held = wait_until(lambda: big_query(owner), 20, what="the streamed request's connection")
        a.close()
        wait_until(lambda: str(held) not in [ln.split()[0][3:] for ln in
                                              redis_cli(owner, "client", "list").splitlines()],
                   20, what="the half-written request's connection to close")
    finally:
        a.close()
    assert direct(owner).exists(key) == 0, "a partial command was applied"
    # walnut keeps serving, large values too.
    b = client(proxy)
    assert b.set(key, b"after") is True
    assert b.get(key) == b"after"
    assert big_set(proxy, key, 3 * MB) == b"+OK"
    assert direct(owner).strlen(key) == 3 * MB


def queued_to(port: int) -> int:
    """Bytes on their way to ``port`` on loopback TCP connections: unread
    at its end, unsent at the other."""
    total = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        tx, rx = (int(q, 16) for q in f[4].split(":"))
        if int(f[1].split(":")[1], 16) == port:
            total += rx
        if int(f[2].split(":")[1], 16) == port:
            total += tx
    return total


def test_client_gone_while_its_value_is_sent_again(procs, proxy_kind):
    """The client resets its connection while walnut sends its value again
    after ASK (the importing node stopped, so the copy is half sent): that
    connection is closed, the node never applies half a command."""
    nodes = procs.redis_cluster(masters=3)
    proxy, _ = one_worker(procs, nodes)
    key = b"{ask-cut}:k"
    slot = key_slot(key)
    src = slot_owner(nodes[0].port, slot)
    dst_node = next(n for n in nodes if n.port != src)
    dst = dst_node.port
    ids = cluster_node_ids(src)
    wait_until(lambda: map_loaded(proxy, nodes, key.decode()), 20, what="slot map")
    redis_cli(dst, "cluster", "setslot", str(slot), "importing", ids[src][0])
    redis_cli(src, "cluster", "setslot", str(slot), "migrating", ids[dst][0])
    for n in nodes:
        direct(n.port).config_resetstat()
    a = Conn(proxy.port("alpha"))
    dst_node.signal(signal.SIGSTOP)
    try:
        a.send_big(b"SET", key, 64 * MB)
        # The source read it all and said ASK; the copy fills the socket
        # of the stopped node.
        wait_until(lambda: queued_to(dst) > 256 * 1024, 20, interval=0.01, what="the value sent again")
        a.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        a.close()
        wait_until(lambda: "client gone while its request was sent again" in
                   proxy.log_path.read_text(errors="replace"), 20, what="the connection closed")
    finally:
        dst_node.signal(signal.SIGCONT)
        a.close()
    wait_until(lambda: queued_to(dst) == 0 and big_query(dst) is None, 20, what="the node to drop the half command")
    assert cmdstat(src, "set") == {"calls": 0, "rejected": 1}
    assert cmdstat(dst, "set")["calls"] == 0
    for port in (src, dst):
        assert redis_cli(port, "cluster", "countkeysinslot", str(slot)).strip() == "0"
