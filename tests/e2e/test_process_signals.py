"""Signals to the master, as nginx reads them: HUP reload, QUIT graceful
stop, TERM fast stop, WINCH stop workers, USR1 reopen logs, TTIN/TTOU log
level; every one logged by name."""

from __future__ import annotations

import os
import signal
import threading
import time

import redis

from procmodel import (
    MemcacheLoad, alive, log_has, served_by, start_walnut, wait_gone, wait_log, wait_workers,
    workers_of,
)
from procs import HOST, RawConn, can_connect, free_port, memcache_pool, redis_pool, to_yaml, wait_until


def test_hup_adds_pool_and_server_under_load(procs):
    mc1, mc2, mc3 = procs.memcacheds(3)
    p = start_walnut(procs, {"alpha": memcache_pool([mc1])}, {"workers": 2})
    old = wait_workers(p.pid, 2)
    load = MemcacheLoad(p.port("alpha"), conns=4, max_seconds=20).start()
    try:
        beta_port = free_port()
        # Clients move to the new generation at once (handed over): with
        # `migration` the keys they wrote under the old placement follow.
        p.conf_path.write_text(to_yaml({
            "alpha": memcache_pool([mc1, mc2], listen=f"{HOST}:{p.port('alpha')}", migration=True),
            "beta": memcache_pool([mc3], listen=f"{HOST}:{beta_port}"),
            "_walnut": {"workers": 2},
        }))
        p.signal(signal.SIGHUP)
        wait_log(p.log_path, "master received SIGHUP")
        new = wait_workers(p.pid, 2, exclude=old.values())
        wait_until(lambda: can_connect(beta_port), 10, what="new pool listening")
        with RawConn(beta_port) as c:
            assert c.request(b"set b 0 0 1\r\nx\r\n") == b"STORED\r\n"
            assert served_by(c) in new.values()
        # Once the old generation has handed its clients over and left, new
        # connections on the old pool reach the new generation, which knows
        # two servers.
        for pid in old.values():
            wait_gone(pid, timeout=10)
        with RawConn(p.port("alpha")) as c:
            assert c.request(b"stats\r\n", b"END\r\n").count(b"STAT servers 2\r\n") == 1
        ok_before = load.result.ok
        wait_until(lambda: load.result.ok > ok_before + 50, 10, what="load to go on after reload")
    finally:
        res = load.stop()
    assert not res.errors, res.errors[:5]
    assert res.ok > 0
    # The old generation leaves once its clients are gone.
    for pid in old.values():
        wait_gone(pid, timeout=10)


def test_hup_broken_config_keeps_running(procs):
    mc = procs.memcached()
    p = start_walnut(procs, {"alpha": memcache_pool([mc])}, {"workers": 2})
    old = wait_workers(p.pid, 2)
    good = p.conf_path.read_text()
    p.conf_path.write_text("alpha:\n  listen: 127.0.0.1:notaport\n  servers: [\n")
    p.signal(signal.SIGHUP)
    wait_log(p.log_path,
             f"reload: configuration file '{p.conf_path}' is invalid, keeping the running configuration")
    assert workers_of(p.pid) == old
    with RawConn(p.port("alpha")) as c:
        assert c.request(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
    # HUP with an unchanged configuration changes nothing.
    p.conf_path.write_text(good)
    p.signal(signal.SIGHUP)
    wait_log(p.log_path, "reload: configuration unchanged")
    assert workers_of(p.pid) == old


def slow_eval(port: int, seconds: float, out: dict) -> None:
    r = redis.Redis(host=HOST, port=port, socket_timeout=10)
    script = ("local t0 = redis.call('TIME') local s = tonumber(t0[1]) + tonumber(t0[2]) / 1e6 "
              "while true do local t = redis.call('TIME') "
              "if tonumber(t[1]) + tonumber(t[2]) / 1e6 - s > tonumber(ARGV[1]) then break end end "
              "return 'done'")
    try:
        out["reply"] = r.eval(script, 1, "slow", seconds)
    except Exception as e:  # noqa: BLE001 - reported by the test
        out["error"] = e


def start_eval(p, seconds: float) -> tuple[threading.Thread, dict]:
    """A slow EVAL in flight through walnut (seen as such by the backend)."""
    out: dict = {}
    t = threading.Thread(target=slow_eval, args=(p.port("r"), seconds, out), daemon=True)
    t.start()
    return t, out


def busy(backend) -> bool:
    try:
        redis.Redis(host=HOST, port=backend.port, socket_timeout=0.2).ping()
        return False
    except redis.exceptions.BusyLoadingError:
        return True
    except redis.exceptions.ResponseError as e:
        return "BUSY" in str(e)
    except redis.exceptions.TimeoutError:
        return True


def test_quit_finishes_in_flight_then_exits(procs):
    rb = procs.redis(extra=["--busy-reply-threshold", "100"])
    p = start_walnut(procs, {"r": redis_pool([rb])}, {"workers": 2})
    workers = wait_workers(p.pid, 2)
    t, out = start_eval(p, 1.5)
    wait_until(lambda: busy(rb), 10, interval=0.02, what="EVAL running in the backend")
    p.signal(signal.SIGQUIT)
    wait_log(p.log_path, "master received SIGQUIT")
    # New connections are no longer taken while the EVAL finishes.
    wait_until(lambda: not can_connect(p.port("r")), 5, interval=0.01, what="listener closed")
    t.join(timeout=15)
    assert out.get("reply") == b"done", out
    p.proc.wait(timeout=10)
    assert p.proc.returncode == 0
    for w in workers.values():
        wait_gone(w)


def test_term_stops_fast(procs):
    rb = procs.redis(extra=["--busy-reply-threshold", "100"])
    p = start_walnut(procs, {"r": redis_pool([rb])}, {"workers": 2})
    workers = wait_workers(p.pid, 2)
    t, out = start_eval(p, 3)
    wait_until(lambda: busy(rb), 10, interval=0.02, what="EVAL running in the backend")
    t0 = time.monotonic()
    p.signal(signal.SIGTERM)
    p.proc.wait(timeout=10)
    took = time.monotonic() - t0
    for w in workers.values():
        wait_gone(w)
    t.join(timeout=15)
    # It did not wait for the 3 s EVAL.
    assert took < 2, took
    assert "error" in out, out
    wait_log(p.log_path, "master received SIGTERM")


def test_winch_stops_workers_master_stays(procs):
    mc = procs.memcached()
    p = start_walnut(procs, {"alpha": memcache_pool([mc])}, {"workers": 2})
    workers = wait_workers(p.pid, 2)
    p.signal(signal.SIGWINCH)
    for w in workers.values():
        wait_gone(w)
    assert workers_of(p.pid) == {}
    assert alive(p.pid)
    wait_log(p.log_path, "master received SIGWINCH")
    # The stats port is still served by the master.
    assert p.stats()["service"] == "nutcracker"
    # HUP brings workers back.
    p.signal(signal.SIGHUP)
    wait_workers(p.pid, 2)
    with RawConn(p.port("alpha")) as c:
        assert c.request(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"


def test_usr1_reopens_log(procs):
    mc = procs.memcached()
    p = start_walnut(procs, {"alpha": memcache_pool([mc])}, {"workers": 2})
    workers = wait_workers(p.pid, 2)
    rotated = p.log_path.with_name(p.log_path.name + ".1")
    os.rename(p.log_path, rotated)
    p.signal(signal.SIGUSR1)
    wait_log(rotated, "master received SIGUSR1")
    wait_until(lambda: p.log_path.exists(), 5, what="log reopened")
    # A master line and a worker line after the reopen land in the new file.
    p.signal(signal.SIGTTIN)
    wait_log(p.log_path, "master received SIGTTIN")
    os.kill(workers[0], signal.SIGTERM)
    wait_gone(workers[0])
    assert not log_has(rotated, "master received SIGTTIN")


def test_ttin_ttou_change_log_level(procs):
    mc = procs.memcached()
    pools = {f"p{i}": memcache_pool([mc]) for i in range(12)}
    p = start_walnut(procs, pools, {"workers": 1})
    wait_workers(p.pid, 1)
    nxt = iter(range(12))

    def debug_line_for_next_pool() -> bool:
        i = next(nxt)
        with RawConn(p.port(f"p{i}")) as c:
            assert c.request(b"get k\r\n", b"END\r\n") == b"END\r\n"
        return log_has(p.log_path, f"pool 'p{i}': connected to server '")

    def send(sig: signal.Signals) -> None:
        # Signals of one kind sent back to back merge into one: send the
        # next only once the master logged the previous.
        line = f"master received {sig.name}"
        seen = p.log_path.read_text().count(line)
        p.signal(sig)
        wait_until(lambda: p.log_path.read_text().count(line) > seen, 5, interval=0.01, what=line)

    assert not debug_line_for_next_pool()
    # notice (5) -> debug (7)
    send(signal.SIGTTIN)
    send(signal.SIGTTIN)
    wait_until(debug_line_for_next_pool, 5, interval=0.01, what="debug lines")
    assert log_has(p.log_path, "log level up to 6\n") and log_has(p.log_path, "log level up to 7\n")
    send(signal.SIGTTOU)
    send(signal.SIGTTOU)
    assert log_has(p.log_path, "log level down to 5\n")

    def send_logged(sig: signal.Signals, line: str) -> None:
        # Below notice the master no longer logs "received": wait for the
        # level line itself, which is logged whatever the level.
        seen = p.log_path.read_text().count(line)
        p.signal(sig)
        wait_until(lambda: p.log_path.read_text().count(line) > seen, 5, interval=0.01, what=line)

    for level in (4, 3, 2, 1, 0, 0):
        send_logged(signal.SIGTTOU, f"log level down to {level}\n")
    for level in (1, 2, 3, 4, 5):
        send_logged(signal.SIGTTIN, f"log level up to {level}\n")
    wait_until(lambda: not debug_line_for_next_pool(), 5, interval=0.01, what="no debug lines")


def test_v11_logs_connections_and_bad_requests_with_the_peer(procs):
    mc = procs.memcached()
    p = procs.proxy("walnut", {"mc": memcache_pool([mc])}, extra_args=["-v", "11", "--workers", "1"])
    with RawConn(p.port("mc")) as c:
        peer = "%s:%d" % c.sock.getsockname()
        assert c.request(b"bogus_command k\r\n").startswith(b"ERROR")
        assert c.request(b"get k\r\n", b"END\r\n") == b"END\r\n"
    wait_log(p.log_path, f"client {peer} connected to pool 'mc'")
    wait_log(p.log_path, f"client {peer} of pool 'mc': bad request: ERROR (it began \"bogus_command k\\r\\n")
    wait_log(p.log_path, f"client {peer} of pool 'mc' closed (eof)")


def test_default_level_logs_no_connection_events(procs):
    mc = procs.memcached()
    p = procs.proxy("walnut", {"mc": memcache_pool([mc])}, extra_args=["--workers", "1"])
    with RawConn(p.port("mc")) as c:
        assert c.request(b"bogus_command k\r\n").startswith(b"ERROR")
    # At -v 11 the line is written before the reply is: none here.
    assert not log_has(p.log_path, "bad request")
    assert not log_has(p.log_path, "connected to pool")
