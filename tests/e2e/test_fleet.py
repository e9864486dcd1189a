"""A fleet configured from etcd (`--etcd URL --fleet NAME`): the
configuration published by `walnut fleet apply` (checked first), applied
live by every member, kept on disk for when etcd is down; members
registered under a lease, listed by `walnut fleet status` and the admin
port's `fleet`, the revision on `/metrics`."""

from __future__ import annotations

import os
import signal
import time

import redis

from fleetkit import Etcd, Member, apply, fleet_cmd, port_offset, status, wait_for
from procs import HOST, free_port, read_stats, redis_pool

FLEET = "e2e"


def start(procs, proc):
    procs.started.append(proc)
    return proc.start()


def client(port: int) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, socket_timeout=5)


def test_configuration_from_etcd_applied_live_by_every_member(procs):
    etcd = start(procs, Etcd(procs.workdir))
    r1, r2 = procs.redis(), procs.redis()
    base = free_port()
    pools = {"alpha": redis_pool([r1], listen=f"{HOST}:{base}")}
    r = apply(etcd, FLEET, procs.workdir, pools)
    assert r.returncode == 0, r.stderr
    a = start(procs, Member(procs.workdir, etcd.url, FLEET, "a", [base]))
    b = start(procs, Member(procs.workdir, etcd.url, FLEET, "b", [base], offset=port_offset(base)))
    assert a.ports != b.ports
    ca, cb = client(a.ports[0]), client(b.ports[0])
    ca.set("k", "1")
    assert cb.get("k") == b"1"
    first = wait_for(lambda: a.revision() and b.revision() == a.revision() and a.revision(), 5, "both applied")

    # An invalid file is refused before it reaches etcd.
    bad = procs.workdir / "bad.yml"
    bad.write_text("alpha:\n  listen: 127.0.0.1:1\n  servers: nope\n")
    r = fleet_cmd(etcd, FLEET, "apply", str(bad))
    assert r.returncode == 1 and "refused" in r.stderr, r
    assert status(etcd, FLEET)["revision"] <= first

    # A change reaches both within a second.
    pools["alpha"] = redis_pool([r1, r2], listen=f"{HOST}:{base}", hash_tag="{}")
    t0 = time.monotonic()
    r = apply(etcd, FLEET, procs.workdir, pools, wait=5)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    assert took < 1.5, took
    rev = status(etcd, FLEET)["revision"]
    assert a.revision() == b.revision() and a.revision() > first
    assert rev >= a.revision()
    assert ca.ping() and cb.ping()

    st = status(etcd, FLEET)
    members = {m["id"]: m for m in st["members"]}
    assert set(members) == {"a", "b"}
    assert members["b"]["listen"] == [f"{HOST}:{b.ports[0]}"]
    assert members["a"]["admin"] == f"{HOST}:{a.admin_port}"
    assert int(members["a"]["revision"]) == a.revision()
    assert members["a"]["pools"] == {"alpha": "steady"}
    out = wait_for(lambda: (o := a.admin("fleet")) and f"member b host={members['b']['host']} revision={b.revision()}" in o and o, 3, "admin fleet")
    assert "member a " in out and f"applied revision {a.revision()}" in out, out
    assert "walnut_fleet_members{fleet=\"e2e\"} 2" in a.metrics()


def test_counters_and_clients_survive_a_fleet_change(procs):
    etcd = start(procs, Etcd(procs.workdir))
    r1 = procs.redis()
    base = free_port()
    pools = {"alpha": redis_pool([r1], listen=f"{HOST}:{base}")}
    assert apply(etcd, FLEET, procs.workdir, pools).returncode == 0
    a = start(procs, Member(procs.workdir, etcd.url, FLEET, "a", [base]))
    c = client(a.ports[0])
    for i in range(50):
        c.incr("n")
    conn = c.connection_pool.get_connection()
    conn.send_command("PING")
    assert conn.read_response() in (b"PONG", "PONG", True)
    pools["alpha"]["timeout"] = 1500
    assert apply(etcd, FLEET, procs.workdir, pools, wait=5).returncode == 0
    # Same TCP connection, served by the new generation.
    conn.send_command("INCR", "n")
    assert conn.read_response() == 51
    c.connection_pool.release(conn)
    # Requests counted before the change are still counted after it.
    wait_for(lambda: pool_requests(a.stats_port, "alpha") >= 52, 5, "counters kept")


def pool_requests(stats_port: int, pool: str) -> int:
    doc = read_stats(stats_port)[pool]
    return sum(v.get("requests", 0) for v in doc.values() if isinstance(v, dict))


def test_last_good_configuration_serves_while_etcd_is_down(procs):
    etcd = start(procs, Etcd(procs.workdir))
    r1 = procs.redis()
    base = free_port()
    pools = {"alpha": redis_pool([r1], listen=f"{HOST}:{base}")}
    assert apply(etcd, FLEET, procs.workdir, pools).returncode == 0
    a = start(procs, Member(procs.workdir, etcd.url, FLEET, "a", [base]))
    applied = wait_for(a.revision, 5, "applied")
    etcd.stop()
    client(a.ports[0]).set("x", "1")
    # Restarted while etcd is down: it serves the last good configuration.
    a.stop()
    procs.started.remove(a)
    a2 = start(procs, Member(procs.workdir, etcd.url, FLEET, "a", [base]))
    assert client(a2.ports[0]).get("x") == b"1"
    assert a2.revision() == applied
    assert "etcd" in a2.output_tail()
    # etcd back: the next change reaches it. `apply --wait` waits for the
    # members listed, so a2 must have registered again first (its agent
    # retries every 0.5 s; with no member listed the wait ends at once).
    etcd.start()
    wait_for(lambda: [m["id"] for m in status(etcd, FLEET)["members"]] == ["a"], 10, "a2 registered", step=0.05)
    pools["alpha"]["timeout"] = 1500
    r = apply(etcd, FLEET, procs.workdir, pools, wait=10)
    assert r.returncode == 0, r.stdout + r.stderr
    assert a2.revision() > applied


def test_a_killed_member_leaves_when_its_lease_ends(procs):
    etcd = start(procs, Etcd(procs.workdir))
    r1 = procs.redis()
    base = free_port()
    assert apply(etcd, FLEET, procs.workdir, {"alpha": redis_pool([r1], listen=f"{HOST}:{base}")}).returncode == 0
    a = start(procs, Member(procs.workdir, etcd.url, FLEET, "a", [base], ttl=2))
    b = start(procs, Member(procs.workdir, etcd.url, FLEET, "b", [base], offset=port_offset(base), ttl=2))
    wait_for(lambda: len(status(etcd, FLEET)["members"]) == 2, 5, "two members")
    t0 = time.monotonic()
    os.kill(b.pid, signal.SIGKILL)
    wait_for(lambda: [m["id"] for m in status(etcd, FLEET)["members"]] == ["a"], 6, "b gone", step=0.1)
    gone = time.monotonic() - t0
    assert gone <= 2 + 1.5, gone
    wait_for(lambda: "walnut_fleet_members{fleet=\"e2e\"} 1" in a.metrics(), 3, "a sees one member")


def test_a_stopped_member_leaves_at_once(procs):
    etcd = start(procs, Etcd(procs.workdir))
    r1 = procs.redis()
    base = free_port()
    assert apply(etcd, FLEET, procs.workdir, {"alpha": redis_pool([r1], listen=f"{HOST}:{base}")}).returncode == 0
    start(procs, Member(procs.workdir, etcd.url, FLEET, "a", [base], ttl=10))
    b = start(procs, Member(procs.workdir, etcd.url, FLEET, "b", [base], offset=port_offset(base), ttl=10))
    wait_for(lambda: len(status(etcd, FLEET)["members"]) == 2, 5, "two members")
    t0 = time.monotonic()
    b.stop()
    # Its agent revoked its lease: gone long before the 10 s TTL.
    wait_for(lambda: [m["id"] for m in status(etcd, FLEET)["members"]] == ["a"], 3, "b gone", step=0.05)
    assert time.monotonic() - t0 < 3
