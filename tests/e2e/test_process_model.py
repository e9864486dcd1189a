"""nginx's process model in walnut: one master, N workers, process titles,
CPU affinity, daemon mode and pid file."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from procmodel import (
    alive, children, cmdline, cpus_allowed, mc_stats, ppid_of, start_walnut, wait_gone, wait_workers, workers_of,
)
from procs import HOST, RawConn, free_port, memcache_pool, to_yaml, wait_until, walnut_bin


def start(procs, backends, *args, **pool):
    return procs.proxy("walnut", {"alpha": memcache_pool(backends, **pool)}, extra_args=list(args))


def test_one_master_two_workers(procs):
    mc = procs.memcached()
    p = start(procs, [mc], "--workers", "2")
    workers = wait_workers(p.pid, 2)
    assert sorted(workers) == [0, 1]
    # The master keeps its command line; workers are titled.
    assert cmdline(p.pid) == " ".join(p.argv)
    for i, pid in workers.items():
        assert cmdline(pid) == f"walnut: worker {i}"
        assert Path(f"/proc/{pid}/comm").read_text().strip() == f"walnut worker {i}"
    # A `pgrep -f 'walnut -c'`-style lookup finds the master only.
    found = subprocess.run(["pgrep", "-f", f"walnut -c {p.conf_path}"], capture_output=True, text=True)
    assert [int(x) for x in found.stdout.split()] == [p.pid]
    assert children(p.pid) == sorted(workers.values())


def test_workers_auto_is_cpu_count(procs):
    mc = procs.memcached()
    p = start(procs, [mc], "--workers", "auto")
    n = len(os.sched_getaffinity(0))
    workers = wait_workers(p.pid, n)
    assert len(workers) == n


def test_cpu_affinity_auto(procs):
    mc = procs.memcached()
    cpus = sorted(os.sched_getaffinity(0))
    p = start(procs, [mc], "--workers", str(len(cpus)), "--cpu-affinity", "auto")
    workers = wait_workers(p.pid, len(cpus))
    for i, pid in workers.items():
        assert cpus_allowed(pid) == str(cpus[i]), f"worker {i}"
    # The master itself is not pinned.
    assert cpus_allowed(p.pid) == cpus_allowed(os.getpid())


def test_daemonize_and_pid_file(tmp_path, procs):
    mc = procs.memcached()
    port, stats = free_port(), free_port()
    conf = tmp_path / "d.yml"
    conf.write_text(to_yaml({"alpha": memcache_pool([mc], listen=f"{HOST}:{port}")}))
    pidfile, log = tmp_path / "walnut.pid", tmp_path / "walnut.log"
    rc = subprocess.run(
        [walnut_bin(), "-d", "-c", str(conf), "-s", str(stats), "-a", HOST, "-o", str(log),
         "-p", str(pidfile), "--workers", "2"],
        timeout=10,
    ).returncode
    # The launching process returns at once; the daemon lives on.
    assert rc == 0
    pid = wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 10, what="pid file")
    pid = int(pid)
    try:
        assert alive(pid)
        assert f"-c {conf}" in cmdline(pid)
        # Detached: another session (not its leader: double fork), not our child.
        assert os.getsid(pid) != os.getsid(0)
        assert ppid_of(pid) != os.getpid()
        wait_workers(pid, 2)
        with RawConn(port) as c:
            assert c.request(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
            assert int(mc_stats(c)["pid"]) in workers_of(pid).values()
    finally:
        workers = list(workers_of(pid).values())
        os.kill(pid, signal.SIGTERM)
        wait_gone(pid)
        for w in workers:
            wait_gone(w)
    # The pid file is removed on exit.
    assert not pidfile.exists()


def test_tcp_quickack_switch_accepted(procs):
    mc = procs.memcached()
    p = start_walnut(procs, {"alpha": memcache_pool([mc])}, {"tcp_quickack": False, "workers": 2})
    wait_workers(p.pid, 2)
    with RawConn(p.port("alpha")) as c:
        assert c.request(b"set q 0 0 2\r\nhi\r\n") == b"STORED\r\n"
        assert c.request(b"get q\r\n", b"END\r\n") == b"VALUE q 0 2\r\nhi\r\nEND\r\n"


@pytest.mark.parametrize("bad", ["tcp_quickack: maybe"])
def test_tcp_quickack_bad_value_rejected(tmp_path, procs, bad):
    mc = procs.memcached()
    conf = tmp_path / "bad.yml"
    conf.write_text(to_yaml({"alpha": memcache_pool([mc], listen=f"{HOST}:{free_port()}")})
                    + f"_walnut:\n  {bad}\n")
    r = subprocess.run([walnut_bin(), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=10)
    assert r.returncode != 0
