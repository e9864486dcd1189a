"""How 200 new connections spread over 2 workers in each listener mode, and
how many accept wakeups found nothing (``STAT accept_eagain``)."""

from __future__ import annotations

import collections

import pytest

from procmodel import mc_stats, start_walnut, wait_workers, worker_stats
from procs import RawConn, memcache_pool

CONNS = 200


@pytest.mark.parametrize("mode", ["reuseport", "epoll_exclusive", "accept_mutex"])
def test_distribution(procs, mode, record_property):
    mc = procs.memcached()
    process = {"workers": 2, "listener": mode}
    if mode == "accept_mutex":
        process["accept_mutex_delay"] = 20
    p = start_walnut(procs, {"alpha": memcache_pool([mc])}, process)
    workers = wait_workers(p.pid, 2)
    port = p.port("alpha")
    before = {pid: int(st["accept_eagain"]) for pid, st in worker_stats(port, workers.values()).items()}
    counts: collections.Counter[int] = collections.Counter()
    conns = []
    try:
        # One connection at a time, each asked which worker serves it, all
        # kept open until counted.
        for _ in range(CONNS):
            c = RawConn(port)
            conns.append(c)
            counts[int(mc_stats(c)["pid"])] += 1
        after = {pid: int(st["accept_eagain"]) for pid, st in worker_stats(port, workers.values()).items()}
    finally:
        for c in conns:
            c.close()
    assert set(counts) <= set(workers.values())
    shares = {pid: counts[pid] / CONNS for pid in workers.values()}
    eagain = {pid: after[pid] - before[pid] for pid in workers.values()}
    record_property("shares", shares)
    record_property("accept_eagain", eagain)
    print(f"\n{mode}: shares {sorted(shares.values())} accept_eagain {sorted(eagain.values())}")
    if mode == "accept_mutex":
        # The lock's load threshold (more than avg + avg/8 + 4 connections
        # skips the lock) keeps the workers within it of each other.
        avg = CONNS / 2
        for pid in workers.values():
            assert counts[pid] >= avg - (avg / 8 + 4) - 2, counts
    else:
        for pid in workers.values():
            assert shares[pid] >= 0.25, counts


@pytest.mark.parametrize("mode", ["reuseport", "epoll_exclusive", "accept_mutex"])
def test_burst_wakeups(procs, mode, record_property):
    """200 connections opened back to back from 4 threads before any is
    used: every one is served; shares and wasted wakeups are reported."""
    import threading

    mc = procs.memcached()
    process = {"workers": 2, "listener": mode}
    if mode == "accept_mutex":
        process["accept_mutex_delay"] = 20
    p = start_walnut(procs, {"alpha": memcache_pool([mc])}, process)
    workers = wait_workers(p.pid, 2)
    port = p.port("alpha")
    before = {pid: int(st["accept_eagain"]) for pid, st in worker_stats(port, workers.values()).items()}
    conns: list[RawConn] = []
    lock = threading.Lock()

    def opener():
        mine = [RawConn(port) for _ in range(CONNS // 4)]
        with lock:
            conns.extend(mine)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        counts = collections.Counter(int(mc_stats(c)["pid"]) for c in conns)
        after = {pid: int(st["accept_eagain"]) for pid, st in worker_stats(port, workers.values()).items()}
    finally:
        for c in conns:
            c.close()
    assert sum(counts.values()) == CONNS
    eagain = {pid: after[pid] - before[pid] for pid in workers.values()}
    shares = sorted(counts[pid] / CONNS for pid in workers.values())
    record_property("shares", shares)
    record_property("accept_eagain", eagain)
    print(f"\nburst {mode}: shares {shares} accept_eagain {sorted(eagain.values())}")
