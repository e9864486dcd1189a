"""A worker that dies is replaced at once (other workers' clients unharmed),
a fatal exit is not retried, a crash loop is backed off, and workers do not
outlive a killed master."""

from __future__ import annotations

import shutil
import re
import signal
import subprocess
import time

import pytest

from procmodel import (
    MemcacheLoad, alive, kill_quietly, log_has, served_by, start_walnut, wait_gone, wait_log,
    wait_workers, workers_of,
)
from procs import RawConn, can_connect, free_port, memcache_pool, wait_until

def wait_replacement(master: int, index: int, old_pid: int, timeout: float = 5.0) -> float:
    """Poll /proc (1 ms steps) for a new worker ``index``; seconds it took."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        pid = workers_of(master).get(index)
        if pid is not None and pid != old_pid:
            return time.monotonic() - t0
        time.sleep(0.001)
    raise AssertionError(f"worker {index} of {master} not replaced within {timeout}s")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_worker_killed_under_load_is_replaced(procs, sig, record_property):
    mc = procs.memcached()
    p = start_walnut(procs, {"alpha": memcache_pool([mc])}, {"workers": 2})
    workers = wait_workers(p.pid, 2)
    victim_idx = 0
    victim = workers[victim_idx]
    survivor = workers[1]
    # Persistent connections to the survivor only: they must see no error.
    held = []
    while len(held) < 4:
        c = RawConn(p.port("alpha"))
        if served_by(c) == survivor:
            held.append(c)
        else:
            c.close()
    load = MemcacheLoad(p.port("alpha"), conns=4, max_seconds=15).start()
    try:
        kill_quietly(victim, sig)
        took = wait_replacement(p.pid, victim_idx, victim)
        record_property("respawn_ms", round(took * 1000, 1))
        print(f"\nrespawn after {signal.Signals(sig).name}: {took * 1000:.1f} ms")
        for i, c in enumerate(held):
            assert c.request(b"set h%d 0 0 1\r\nx\r\n" % i) == b"STORED\r\n"
            assert c.request(b"get h%d\r\n" % i, b"END\r\n") == b"VALUE h%d 0 1\r\nx\r\nEND\r\n" % i
        # The replacement serves new connections.
        new_pid = workers_of(p.pid)[victim_idx]
        wait_until(lambda: served_by(RawConn(p.port("alpha"))) == new_pid, 10, interval=0.001,
                   what="a connection served by the new worker")
        res = load.stop()
        # Load connections on the survivor keep working; those on the victim
        # may break (their worker died), nothing else.
        survivor_conns = [i for i, pid in load.conn_pids.items() if pid == survivor]
        bad = [e for e in res.errors if int(e.split()[1].rstrip(":")) in survivor_conns]
        assert not bad, bad
        # At once: no backoff for a first death (how long the fork took on
        # this machine is a figure, recorded above, not a pass mark).
        wait_log(p.log_path, f"(pid {victim}) killed by signal {int(sig)}")
        wait_log(p.log_path, "restarts at once")
    finally:
        load.stop()
        for c in held:
            c.close()


def gdb_exit(pid: int, code: int) -> None:
    """Make ``pid`` call _exit(code) (a worker failing on its own)."""
    subprocess.run(
        ["gdb", "-p", str(pid), "-batch", "-nx", "-ex", f"call (void)_exit({code})"],
        capture_output=True, timeout=60,
    )


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb needed to make a worker exit")
def test_fatal_exit_code_not_respawned(procs):
    mc = procs.memcached()
    p = start_walnut(procs, {"alpha": memcache_pool([mc])}, {"workers": 2})
    workers = wait_workers(p.pid, 2)
    gdb_exit(workers[0], 2)
    wait_log(p.log_path, f"(pid {workers[0]}) exited with code 2")
    wait_log(p.log_path, "failed fatally, not restarting it")
    # Still only worker 1 a while later (the master loop runs every 100 ms).
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        assert sorted(workers_of(p.pid)) == [1]
        time.sleep(0.05)
    # The remaining worker serves.
    with RawConn(p.port("alpha")) as c:
        assert served_by(c) == workers[1]


def test_crash_loop_backs_off(procs, record_property):
    mc = procs.memcached()
    p = start_walnut(procs, {"alpha": memcache_pool([mc])}, {"workers": 1})
    pid = wait_workers(p.pid, 1)[0]
    delays = []
    for _ in range(5):
        kill_quietly(pid, signal.SIGKILL)
        t = wait_replacement(p.pid, 0, pid, timeout=10)
        delays.append(round(t * 1000))
        pid = workers_of(p.pid)[0]
    record_property("respawn_delays_ms", delays)
    print(f"\nrespawn delays in a crash loop (ms): {delays}")
    # The first death is answered at once; the following quick deaths wait
    # longer and longer (the master's own schedule, from its log; the
    # measured delays above are figures).
    log = p.log_path.read_text()
    assert "worker 0 restarts at once" in log, log[-2000:]
    waits = [int(m) for m in re.findall(r"worker 0 restarts in (\d+) ms", log)]
    assert len(waits) == 4 and waits == sorted(waits) and waits[0] < waits[-1], waits
    assert delays[2] >= waits[1] * 0.9, (delays, waits)
    # After the backoff it settles and serves.
    with RawConn(p.port("alpha")) as c:
        assert c.request(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"


def test_master_sigkill_takes_workers_down(procs):
    mc = procs.memcached()
    p = start_walnut(procs, {"alpha": memcache_pool([mc])}, {"workers": 2})
    workers = wait_workers(p.pid, 2)
    port = p.port("alpha")
    p.proc.send_signal(signal.SIGKILL)
    p.proc.wait(timeout=5)
    for w in workers.values():
        wait_gone(w, timeout=5)
    wait_until(lambda: not can_connect(port) and not can_connect(p.stats_port), 5, what="ports closed")
    # A new walnut binds the same ports.
    again = start_walnut(procs, {"alpha": memcache_pool([mc], listen=f"127.0.0.1:{port}")}, {"workers": 2})
    assert again.port("alpha") == port
    with RawConn(port) as c:
        assert c.request(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
    assert not any(alive(w) for w in workers.values())
    assert not log_has(again.log_path, "Address already in use")
    _ = free_port
