"""Reload (HUP, admin `reload`) and hot upgrade (USR2 then QUIT) under
load from clients as production runs them: persistent connections, busy
without pause, no retry (pymemcache; redis-py with
``retry=Retry(NoBackoff(), 0)``). Each client connection is handed to the
new generation or binary at a request boundary: no request fails, no
connection is closed under a client, the old processes leave at once, and
the stats document's counters never go back."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest
import redis
from pymemcache.client.base import Client as MemcacheClient
from redis.backoff import NoBackoff
from redis.retry import Retry

from procmodel import alive, children, wait_gone, wait_log, wait_workers, workers_of
from procs import HOST, free_port, memcache_pool, read_stats, redis_pool, to_yaml, wait_until

# Minutes of work in all: left out of `make quick`.
pytestmark = pytest.mark.slow

MODES = ["reuseport", "epoll_exclusive", "accept_mutex"]


def admin(port: int, line: str) -> str:
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(line.encode() + b"\r\n")
        buf = b""
        while not buf.endswith(b"\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return buf.decode()


class BusyClients:
    """Persistent clients that send without pause and never retry; every
    failure and every change of a client's socket is recorded."""

    def __init__(self, mc_port: int, rd_port: int, n: int = 4, max_seconds: float = 90.0):
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.ok = 0
        self.errors: list[str] = []
        self.sock_changes: list[str] = []
        self.max_seconds = max_seconds
        self.threads = [threading.Thread(target=self._mc, args=(mc_port, i), daemon=True) for i in range(n)]
        self.threads += [threading.Thread(target=self._rd, args=(rd_port, i), daemon=True) for i in range(n)]

    def start(self) -> "BusyClients":
        for t in self.threads:
            t.start()
        wait_until(lambda: self.ok >= 200 or self.errors, 20, what="load to start")
        assert not self.errors, self.errors[:3]
        return self

    def _count(self, err: str | None = None) -> None:
        with self.lock:
            if err is None:
                self.ok += 1
            else:
                self.errors.append(err)

    def _mc(self, port: int, i: int) -> None:
        c = MemcacheClient((HOST, port), connect_timeout=5, timeout=5, no_delay=True)
        deadline = time.monotonic() + self.max_seconds
        sock = None
        n = 0
        while not self.stop_ev.is_set() and time.monotonic() < deadline:
            n += 1
            key = f"busy:mc:{i}"
            val = f"v{n}".encode()
            try:
                c.set(key, val, noreply=False)
                got = c.get(key)
                if got != val:
                    self._count(f"mc {i}: get {key} gave {got!r}, want {val!r}")
                    return
                keys = [f"busy:mc:{i}:{k}" for k in range(5)]
                c.set_many({k: val for k in keys}, noreply=False)
                many = c.get_many(keys)
                if many != {k: val for k in keys}:
                    self._count(f"mc {i}: get_many gave {many!r}")
                    return
            except Exception as e:  # noqa: BLE001 - every failure counts
                self._count(f"mc {i}: {e!r}")
                return
            if sock is None:
                sock = c.sock
            elif c.sock is not sock:
                self.sock_changes.append(f"mc {i}")
                sock = c.sock
            self._count()
        c.close()

    def _rd(self, port: int, i: int) -> None:
        r = redis.Redis(host=HOST, port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0),
                        single_connection_client=True)
        deadline = time.monotonic() + self.max_seconds
        sock = None
        n = 0
        while not self.stop_ev.is_set() and time.monotonic() < deadline:
            n += 1
            key = f"busy:rd:{i}"
            val = f"v{n}".encode()
            try:
                if not r.set(key, val):
                    self._count(f"rd {i}: SET failed")
                    return
                if (got := r.get(key)) != val:
                    self._count(f"rd {i}: GET {key} gave {got!r}, want {val!r}")
                    return
                # A pipeline: many requests in one write.
                p = r.pipeline(transaction=False)
                for k in range(8):
                    p.set(f"busy:rd:{i}:{k}", val)
                p.mget([f"busy:rd:{i}:{k}" for k in range(8)])
                out = p.execute()
                if out[-1] != [val] * 8:
                    self._count(f"rd {i}: pipelined MGET gave {out[-1]!r}")
                    return
            except Exception as e:  # noqa: BLE001 - every failure counts
                self._count(f"rd {i}: {e!r}")
                return
            s = r.connection._sock
            if sock is None:
                sock = s
            elif s is not sock:
                self.sock_changes.append(f"rd {i}")
                sock = s
            self._count()
        r.close()

    def wait_progress(self, n: int = 200, what: str = "load to go on") -> None:
        before = self.ok
        wait_until(lambda: self.ok >= before + n or self.errors, 20, what=what)
        assert not self.errors, self.errors[:3]

    def stop(self) -> None:
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout=15)


class CounterWatch:
    """Reads the stats document every 50 ms and records every counter that
    went back between two reads."""

    COUNTERS = ("requests", "request_bytes", "responses", "response_bytes", "client_eof",
                "client_err", "server_eof", "server_err", "fragments")

    def __init__(self, stats_port: int):
        self.port = stats_port
        self.backwards: list[str] = []
        self.phase = "start"
        self.reads = 0
        self.last: dict[str, int] = {}
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def flatten(self, doc: dict) -> dict[str, int]:
        out = {"total_connections": doc.get("total_connections", 0)}
        for pool, pv in doc.items():
            if not isinstance(pv, dict):
                continue
            for k, v in pv.items():
                if isinstance(v, dict):
                    for f in self.COUNTERS:
                        if f in v:
                            out[f"{pool}/{k}/{f}"] = v[f]
                elif k in self.COUNTERS:
                    out[f"{pool}/{k}"] = v
        return out

    def _run(self) -> None:
        deadline = time.monotonic() + 120
        while not self.stop_ev.is_set() and time.monotonic() < deadline:
            try:
                now = self.flatten(read_stats(self.port, timeout=5))
            except Exception:  # noqa: BLE001 - a refused read is not a counter going back
                time.sleep(0.05)
                continue
            for k, v in now.items():
                if k in self.last and v < self.last[k]:
                    self.backwards.append(f"{self.phase}: {k}: {self.last[k]} -> {v}")
            self.last.update(now)
            self.reads += 1
            time.sleep(0.05)

    def start(self) -> "CounterWatch":
        self.thread.start()
        wait_until(lambda: self.reads >= 2, 10, what="stats reads")
        return self

    def wait_more(self, n: int = 3) -> None:
        """Until ``n`` more reads have been compared (a phase that ended
        before the watch looked would prove nothing)."""
        target = self.reads + n
        wait_until(lambda: self.reads >= target, 30, what=f"{n} more stats reads ({self.phase})")

    def stop(self) -> None:
        self.stop_ev.set()
        self.thread.join(timeout=10)


@pytest.mark.parametrize("mode", MODES)
def test_reload_and_upgrade_fail_no_request(procs, mode):
    mcs = procs.memcacheds(2)
    rds = [procs.redis() for _ in range(2)]
    admin_port = free_port()
    mc_port, rd_port = free_port(), free_port()

    def config(timeout: int) -> str:
        return to_yaml({
            "mc": memcache_pool(mcs, listen=f"{HOST}:{mc_port}", timeout=timeout),
            "rd": redis_pool(rds, listen=f"{HOST}:{rd_port}", timeout=timeout),
            "_walnut": {"workers": 2, "listener": mode},
        })

    from procs import Proxy

    p = Proxy("walnut", procs.workdir, {}, extra_args=["--admin", f"{HOST}:{admin_port}"])
    p.conf_path.write_text(config(2000))
    p.ports = {"mc": mc_port, "rd": rd_port}
    procs.started.append(p)
    p.start()
    gen1 = wait_workers(p.pid, 2)
    load = BusyClients(mc_port, rd_port).start()
    watch = CounterWatch(p.stats_port).start()
    new_master = None
    try:
        # 1. HUP with a changed pool key.
        watch.phase = "HUP"
        p.conf_path.write_text(config(2500))
        p.signal(signal.SIGHUP)
        gen2 = wait_workers(p.pid, 2, exclude=gen1.values())
        for w in gen1.values():
            wait_gone(w, timeout=5)
        wait_log(p.log_path, "placement switch: generation 1")
        load.wait_progress(what="load after HUP")

        # 2. The admin port's reload.
        watch.wait_more()
        watch.phase = "admin reload"
        p.conf_path.write_text(config(3000))
        reply = admin(admin_port, "reload")
        assert not reply.startswith("ERR"), reply
        gen3 = wait_workers(p.pid, 2, exclude=[*gen1.values(), *gen2.values()])
        for w in gen2.values():
            wait_gone(w, timeout=5)
        load.wait_progress(what="load after admin reload")

        # 3. Hot upgrade: USR2, then QUIT to the old master.
        watch.wait_more()
        watch.phase = "USR2"
        p.signal(signal.SIGUSR2)
        new_master = wait_until(
            lambda: next((c for c in children(p.pid) if c not in gen3.values()), None), 10,
            interval=0.01, what="new master")
        wait_workers(new_master, 2)
        wait_log(p.log_path, f"new master (pid {new_master}) is ready")
        load.wait_progress(what="load with both binaries up")
        quit_at = time.monotonic()
        watch.wait_more()
        watch.phase = "QUIT"
        p.signal(signal.SIGQUIT)
        p.proc.wait(timeout=10)
        gone_after = time.monotonic() - quit_at
        for w in gen3.values():
            wait_gone(w, timeout=5)
        assert gone_after < 2.0, f"old master took {gone_after:.2f}s to leave after QUIT"
        load.wait_progress(what="load after the old binary left")
        watch.wait_more()
        assert alive(new_master)
    finally:
        load.stop()
        watch.stop()
        if new_master is not None and alive(new_master):
            nw = list(workers_of(new_master).values())
            os.kill(new_master, signal.SIGTERM)
            wait_gone(new_master)
            for w in nw:
                wait_gone(w)
    assert not load.errors, load.errors[:5]
    assert not load.sock_changes, f"clients had to reconnect: {load.sock_changes}"
    assert load.ok > 1000
    assert watch.reads >= 14  # 2 at the start, then 3 more in each of the four phases
    assert not watch.backwards, watch.backwards[:10]
    print(f"\n{mode}: {load.ok} request rounds, 0 errors, old master gone {gone_after:.3f}s after QUIT, "
          f"{watch.reads} stats reads, none backwards")


def test_session_and_partial_requests_cross_a_reload(procs):
    """What a handed client carries: its Redis session (AUTH, HELLO 3,
    CLIENT SETNAME) and the unparsed start of a request it was sending; a
    request too large to carry is read to its end by the old worker first."""
    from procs import RawConn

    mc = procs.memcached()
    rd = procs.redis(extra=["--requirepass", "s3cret"])
    mc_port, rd_port = free_port(), free_port()

    def config(timeout: int) -> str:
        return to_yaml({
            "mc": memcache_pool([mc], listen=f"{HOST}:{mc_port}", timeout=timeout),
            "rd": redis_pool([rd], listen=f"{HOST}:{rd_port}", timeout=timeout, redis_auth="s3cret"),
            "_walnut": {"workers": 2},
        })

    from procs import Proxy

    p = Proxy("walnut", procs.workdir, {})
    p.conf_path.write_text(config(2000))
    p.ports = {"mc": mc_port, "rd": rd_port}
    procs.started.append(p)
    p.start()
    gen1 = wait_workers(p.pid, 2)
    big = os.urandom(400_000).hex().encode()[:400_000]
    with RawConn(rd_port) as r, RawConn(mc_port) as m, RawConn(mc_port) as m2:
        hello = r.request(b"HELLO 3 AUTH default s3cret SETNAME keep-me\r\n", b"\r\n", timeout=5)
        assert hello.startswith(b"%"), hello
        r.read_until(b"modules\r\n*0\r\n")
        assert r.request(b"HSET h f v\r\n") == b":1\r\n"
        # Halfway through a request on each protocol, and a value too large
        # to carry on the third connection.
        r.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nab")
        m.send(b"set k 0 0 5\r\nab")
        m2.send(b"set big 0 0 %d\r\n" % len(big) + big[:150_000])
        ended = {k: v["client_eof"] + v["client_err"] for k, v in read_stats(p.stats_port).items()
                 if k in ("mc", "rd")}
        p.conf_path.write_text(config(2500))
        p.signal(signal.SIGHUP)
        gen2 = wait_workers(p.pid, 2, exclude=gen1.values())
        wait_log(p.log_path, "handing clients over")
        r.send(b"cde\r\n")
        assert r.read_line(timeout=5) == b"+OK\r\n"
        m.send(b"cde\r\n")
        assert m.read_line(timeout=5) == b"STORED\r\n"
        m2.send(big[150_000:] + b"\r\n")
        assert m2.read_line(timeout=10) == b"STORED\r\n"
        for pid in gen1.values():
            wait_gone(pid, timeout=5)
        # Served by the new generation now, the session intact.
        assert r.request(b"CLIENT GETNAME\r\n", b"\r\nkeep-me\r\n") == b"$7\r\nkeep-me\r\n"
        assert r.request(b"HGETALL h\r\n", b"v\r\n") == b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n"
        assert r.request(b"GET k\r\n", b"cde\r\n") == b"$5\r\nabcde\r\n"
        assert m.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 5\r\nabcde\r\nEND\r\n"
        got = m2.request(b"get big\r\n", b"END\r\n", timeout=10)
        assert got == b"VALUE big 0 %d\r\n" % len(big) + big + b"\r\nEND\r\n"
        from procmodel import served_by
        assert served_by(m) in gen2.values()
        # Handed over, not closed: no client connection ended in either pool.
        stats = read_stats(p.stats_port)
        assert {k: stats[k]["client_eof"] + stats[k]["client_err"] for k in ended} == ended
        assert stats["mc"]["client_connections"] == 2
        assert stats["rd"]["client_connections"] == 1


def test_removed_pool_clients_are_closed_and_others_kept(procs):
    """A reload that removes a pool: its clients are closed by the new
    generation (their listener is gone too); the other pool's are kept."""
    from procs import RawConn

    mc1, mc2 = procs.memcacheds(2)
    a_port, b_port = free_port(), free_port()
    from procs import Proxy

    p = Proxy("walnut", procs.workdir, {})
    p.conf_path.write_text(to_yaml({
        "a": memcache_pool([mc1], listen=f"{HOST}:{a_port}"),
        "b": memcache_pool([mc2], listen=f"{HOST}:{b_port}"),
        "_walnut": {"workers": 2},
    }))
    p.ports = {"a": a_port, "b": b_port}
    procs.started.append(p)
    p.start()
    gen1 = wait_workers(p.pid, 2)
    with RawConn(a_port) as a, RawConn(b_port) as b:
        assert a.request(b"set x 0 0 1\r\n1\r\n") == b"STORED\r\n"
        assert b.request(b"set x 0 0 1\r\n2\r\n") == b"STORED\r\n"
        p.conf_path.write_text(to_yaml({
            "a": memcache_pool([mc1], listen=f"{HOST}:{a_port}"),
            "_walnut": {"workers": 2},
        }))
        p.signal(signal.SIGHUP)
        wait_workers(p.pid, 2, exclude=gen1.values())
        for pid in gen1.values():
            wait_gone(pid, timeout=5)
        assert a.request(b"get x\r\n", b"END\r\n") == b"VALUE x 0 1\r\n1\r\nEND\r\n"
        assert b.is_closed(timeout=5)
    wait_log(p.log_path, "pool 'b', which is no longer configured")


def test_many_idle_clients_all_cross(procs):
    """Hundreds of persistent clients (more than one accept batch of the
    receiving workers) all cross a reload; each answers on its own socket
    afterwards."""
    mc = procs.memcached()
    port = free_port()
    from procs import Proxy

    p = Proxy("walnut", procs.workdir, {})
    p.conf_path.write_text(to_yaml({"mc": memcache_pool([mc], listen=f"{HOST}:{port}"),
                                    "_walnut": {"workers": 2}}))
    p.ports = {"mc": port}
    procs.started.append(p)
    p.start()
    gen1 = wait_workers(p.pid, 2)
    socks = []
    try:
        for i in range(800):
            s = socket.create_connection((HOST, port), timeout=10)
            s.sendall(b"set c%d 0 0 1\r\nx\r\n" % i)
            socks.append(s)
        for s in socks:
            assert s.recv(64) == b"STORED\r\n"
        p.conf_path.write_text(to_yaml({"mc": memcache_pool([mc], listen=f"{HOST}:{port}", timeout=999),
                                        "_walnut": {"workers": 2}}))
        started = time.monotonic()
        p.signal(signal.SIGHUP)
        gen2 = wait_workers(p.pid, 2, exclude=gen1.values())
        for w in gen1.values():
            wait_gone(w, timeout=10)
        took = time.monotonic() - started
        for i, s in enumerate(socks):
            s.sendall(b"get c%d\r\n" % i)
        for i, s in enumerate(socks):
            got = b""
            while not got.endswith(b"END\r\n"):
                chunk = s.recv(256)
                assert chunk, f"client {i} was closed"
                got += chunk
            assert got == b"VALUE c%d 0 1\r\nx\r\nEND\r\n" % i
        stats = read_stats(p.stats_port)
        assert stats["mc"]["client_connections"] == 800
        print(f"\n800 idle clients handed over; old generation gone {took:.3f}s after HUP; "
              f"new workers {sorted(gen2.values())}")
    finally:
        for s in socks:
            s.close()
