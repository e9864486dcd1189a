"""Hot upgrade (nginx's USR2 then QUIT): the new binary inherits the
listening sockets; under a running load no connection is refused and no
request fails; the pid file follows nginx's .oldbin convention."""

from __future__ import annotations

import pytest

import os
import shutil
import signal
import subprocess

from procmodel import (
    MemcacheLoad, children, cmdline, served_by, wait_gone, wait_log, wait_workers, workers_of,
)
from procs import HOST, Proxy, RawConn, memcache_pool, wait_until, walnut_bin

# Minutes of work in all: left out of `make quick`.
pytestmark = pytest.mark.slow


def test_usr2_then_quit_under_load(procs, tmp_path, record_property):
    mc = procs.memcached()
    binary = tmp_path / "bin" / "walnut"
    binary.parent.mkdir()
    shutil.copy2(walnut_bin(), binary)
    pidfile = tmp_path / "walnut.pid"
    p = Proxy("walnut", procs.workdir, {"alpha": memcache_pool([mc])},
              extra_args=["-p", str(pidfile), "--workers", "2"])
    p.argv[0] = str(binary)
    procs.started.append(p)
    p.start()
    old_workers = wait_workers(p.pid, 2)
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() == str(p.pid), 5, what="pid file")
    # The "new" binary replaces the file at the same path.
    staged = tmp_path / "bin" / "walnut.new"
    shutil.copy2(walnut_bin(), staged)
    os.replace(staged, binary)
    port = p.port("alpha")
    persistent = MemcacheLoad(port, conns=3, max_seconds=30).start()
    churn = MemcacheLoad(port, conns=2, reconnect=True, max_seconds=30).start()
    new_master = None
    try:
        p.signal(signal.SIGUSR2)

        def new_binary():
            kids = [c for c in children(p.pid) if c not in old_workers.values()]
            return next((k for k in kids if cmdline(k) == " ".join(p.argv)), None)

        new_master = wait_until(new_binary, 10, interval=0.01, what="new master")
        new_workers = wait_workers(new_master, 2)
        assert os.readlink(f"/proc/{new_master}/exe") == str(binary)
        wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() == str(new_master), 5,
                   what="new pid file")
        oldbin = pidfile.with_name(pidfile.name + ".oldbin")
        assert oldbin.read_text().strip() == str(p.pid)
        wait_log(p.log_path, "inherited")
        # Both generations serve for a while, then the old master leaves.
        wait_until(lambda: set(new_workers.values()) & churn.result.pids, 10, interval=0.01,
                   what="new workers serving new connections")
        p.signal(signal.SIGQUIT)
        churn_ok = churn.result.ok
        wait_until(lambda: churn.result.ok > churn_ok + 20, 10, what="load after QUIT")
        # Busy persistent clients keep their old worker until they are done
        # (or graceful_timeout); they finish now and the old master leaves.
        r1 = persistent.stop()
        p.proc.wait(timeout=20)
        assert p.proc.returncode == 0
        for w in old_workers.values():
            wait_gone(w)
        wait_until(lambda: churn.result.ok > churn_ok + 20, 10, what="load after the old master left")
        assert not oldbin.exists()
        assert pidfile.read_text().strip() == str(new_master)
        with RawConn(port) as c:
            assert served_by(c) in workers_of(new_master).values()
    finally:
        r1, r2 = persistent.stop(), churn.stop()
        if new_master is not None:
            nw = list(workers_of(new_master).values())
            os.kill(new_master, signal.SIGTERM)
            wait_gone(new_master)
            for w in nw:
                wait_gone(w)
    print(f"\nupgrade: persistent ok={r1.ok} errors={len(r1.errors)}; "
          f"new-connection ok={r2.ok} errors={len(r2.errors)} refused={r2.refused}")
    record_property("upgrade", {"ok": r1.ok + r2.ok, "refused": r2.refused})
    assert not r1.errors, r1.errors[:5]
    assert not r2.errors, r2.errors[:5]
    assert r2.refused == 0
    assert not pidfile.exists()


def test_redis_benchmark_through_upgrade(procs, tmp_path):
    """redis-benchmark (bounded with -n) across USR2 + QUIT: no error."""
    if shutil.which("redis-benchmark") is None:
        return
    from procs import redis_pool

    rb = procs.redis()
    p = procs.proxy("walnut", {"r": redis_pool([rb])}, extra_args=["--workers", "2"])
    old_workers = wait_workers(p.pid, 2)
    bench = subprocess.Popen(
        ["redis-benchmark", "-h", HOST, "-p", str(p.port("r")), "-n", "40000", "-c", "4",
         "-t", "set,get", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    new_master = None
    try:
        p.signal(signal.SIGUSR2)
        new_master = wait_until(
            lambda: next((c for c in children(p.pid) if c not in old_workers.values()), None),
            10, interval=0.01, what="new master")
        wait_workers(new_master, 2)
        p.signal(signal.SIGQUIT)
        out, _ = bench.communicate(timeout=60)
        p.proc.wait(timeout=20)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        if new_master is not None:
            os.kill(new_master, signal.SIGTERM)
            wait_gone(new_master)
    assert bench.returncode == 0, out
    assert "error" not in out.lower(), out
