"""A fatal signal (SEGV, BUS, ILL, FPE, ABRT) sent to a worker or to the
master is logged with its name, then does what the signal means: the
process dies of that signal (dumping core where the limit allows). A dead
worker is replaced; a dead master takes its workers with it."""

from __future__ import annotations

import os
import signal

import pytest

from procmodel import alive, start_walnut, wait_gone, wait_log, wait_workers, workers_of
from procs import RawConn, memcache_pool, wait_until

FATAL = [signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT]


@pytest.mark.parametrize("sig", FATAL, ids=lambda s: signal.Signals(s).name)
def test_fatal_signal_to_a_worker_is_logged_and_kills_it(procs, sig):
    mc = procs.memcached()
    p = start_walnut(procs, {"alpha": memcache_pool([mc])}, {"workers": 2})
    workers = wait_workers(p.pid, 2)
    victim = workers[0]
    name = signal.Signals(sig).name
    os.kill(victim, sig)
    wait_log(p.log_path, f"{victim} worker 0: received {name}, dumping core")
    # The master saw it die of that very signal, and replaced it.
    wait_log(p.log_path, f"worker 0 (pid {victim}) killed by signal {int(sig)}")
    wait_until(lambda: workers_of(p.pid).get(0) not in (None, victim), 5, what="worker 0 replaced")
    assert p.alive()
    with RawConn(p.port()) as c:
        assert c.request(b"version\r\n").startswith(b"VERSION ")


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGABRT], ids=lambda s: signal.Signals(s).name)
def test_fatal_signal_to_the_master_is_logged_and_takes_the_workers(procs, sig):
    mc = procs.memcached()
    p = start_walnut(procs, {"alpha": memcache_pool([mc])}, {"workers": 2})
    workers = wait_workers(p.pid, 2)
    name = signal.Signals(sig).name
    p.signal(sig)
    # Dies of the signal itself, on the first one (not a clean exit).
    assert p.proc.wait(timeout=10) == -sig
    wait_log(p.log_path, f"{p.pid} master: received {name}, dumping core")
    for w in workers.values():
        wait_gone(w)
        assert not alive(w)
