"""Replacing nutcracker on a live host: several instances side by side, a
port shared with the incumbent (`reuseport: true`) and taken over under busy
clients without an error beyond the connections the incumbent closes, the
stop-then-start gap without it (Debian's nutcracker 0.5.0 has no
`reuseport`), and a unix-socket pool another process answers on refused.

The incumbent that shares its port is a nutcracker built from twemproxy's
master (`scripts/build-twemproxy.sh`, found at TWEMPROXY_MASTER_BIN or
target/twemproxy/nutcracker; skipped when there is none, required once
.ci/run built it), and always another walnut.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from procs import (
    HOST, NUTCRACKER_BIN, REPO_ROOT, ManagedProcess, free_port, free_port_run, to_yaml,
    wait_until, walnut_bin,
)
from test_admin_port import admin

MASTER_BIN = os.environ.get(
    "TWEMPROXY_MASTER_BIN", str(REPO_ROOT / "target" / "twemproxy" / "nutcracker"))


def start(name: str, binary: str, workdir: Path, pools: dict, stats_port: int,
          extra=()) -> ManagedProcess:
    """Start a proxy on ``pools`` with its own config file and log, the way
    an init script starts one more nutcracker: `-c`, `-s`, `-o`, nothing
    else (``extra`` adds flags)."""
    d = workdir / name
    d.mkdir(parents=True, exist_ok=True)
    conf = d / "proxy.yml"
    conf.write_text(to_yaml(pools))
    argv = [binary, "-c", str(conf), "-s", str(stats_port), "-a", HOST, "-o", str(d / "log"),
            *extra]
    return ManagedProcess(name, argv, d, d / "log").start()


def admin_address(p: ManagedProcess, timeout: float = 10) -> tuple[str, int]:
    """The admin address a walnut logged at start."""
    found = {}

    def logged() -> bool:
        m = re.search(r"admin listening on (\S+):(\d+)", p.log_path.read_text()
                      if p.log_path.exists() else "")
        if m:
            found["a"] = (m.group(1), int(m.group(2)))
        return bool(m) or not p.alive()

    wait_until(logged, timeout, what=f"{p.name} logs its admin address")
    assert "a" in found, p.output_tail()
    return found["a"]


def wait_exit(p: ManagedProcess, timeout: float = 10) -> int:
    assert p.proc is not None
    return p.proc.wait(timeout=timeout)


@pytest.fixture
def started():
    """Processes a test starts, stopped by pid at teardown."""
    ps: list[ManagedProcess] = []
    yield ps
    for p in reversed(ps):
        p.stop()


def rpool(servers, port: int, **more) -> dict:
    pool = {"listen": f"{HOST}:{port}", "redis": True, "timeout": 2000,
            "servers": [f"{s.address}:1" for s in servers]}
    pool.update(more)
    return pool


# ------------------------------------------------ several instances ------


def test_second_instance_starts_with_nutcracker_flags(procs, tmp_path, started):
    """Three instances started as twemproxy's own tests start them (stats
    ports one apart, no admin flag) all run, each with an admin port of its
    own, found in its log; an admin address given explicitly and taken is
    still refused."""
    r = procs.redis()
    stats = free_port_run(3)
    ps = []
    for i, s in enumerate(stats):
        p = start(f"w{i}", walnut_bin(), tmp_path, {"p": rpool([r], free_port())}, s)
        started.append(p)
        p.wait_ready([s])
        ps.append(p)
    addrs = [admin_address(p) for p in ps]
    assert len({a for a in addrs}) == 3, addrs
    for p, (host, port) in zip(ps, addrs):
        assert host == "127.0.0.1"
        assert port not in stats
        st = admin(port, "status")
        assert f"master_pid: {p.pid}" in st, st
    # An address the operator chose is not silently replaced.
    taken = addrs[0][1]
    p = start("explicit", walnut_bin(), tmp_path, {"p": rpool([r], free_port())}, free_port(),
              extra=["--admin", f"{HOST}:{taken}"])
    started.append(p)
    assert wait_exit(p) != 0
    assert re.search(rf"admin port {HOST}:{taken}: .*in use", p.output_tail()), p.output_tail()


def test_help_says_where_the_admin_port_is():
    import subprocess

    out = subprocess.run([walnut_bin(), "--help"], capture_output=True, text=True).stdout
    flat = " ".join(out.split())
    assert "127.0.0.1:22223 beside the default stats port" in flat, out
    assert "admin listening on" in flat, out


# ------------------------------------------------------- reuseport -------


def listener(reuseport: bool) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((HOST, 0))
    s.listen(64)
    return s


def test_taken_port_refused_unless_reuseport(procs, tmp_path, started):
    r = procs.redis()
    for mode in ["reuseport", "epoll_exclusive"]:
        other = listener(reuseport=True)
        port = other.getsockname()[1]
        try:
            # Without the key: refused, whoever holds the port.
            p = start(f"plain-{mode}", walnut_bin(), tmp_path, {"p": rpool([r], port)},
                      free_port(), extra=["--listener", mode])
            started.append(p)
            assert wait_exit(p) != 0
            assert "in use" in p.output_tail(), p.output_tail()
            # With it: walnut joins the other process's SO_REUSEPORT group.
            p = start(f"shared-{mode}", walnut_bin(), tmp_path,
                      {"p": rpool([r], port, reuseport=True)}, free_port(),
                      extra=["--listener", mode, "--workers", "2"])
            started.append(p)
            admin_address(p)
            assert p.alive(), p.output_tail()
            # Some connections land on walnut, which answers them.
            answered = 0
            for _ in range(32):
                try:
                    with socket.create_connection((HOST, port), timeout=0.5) as c:
                        c.sendall(b"PING\r\n")
                        c.settimeout(0.3)
                        if c.recv(64) == b"+PONG\r\n":
                            answered += 1
                except OSError:
                    pass  # queued at the other listener, which never accepts
            assert answered > 0
            p.stop()
        finally:
            other.close()
    # A holder without SO_REUSEPORT cannot be joined: refused with the key too.
    other = listener(reuseport=False)
    try:
        p = start("shared-noreuse", walnut_bin(), tmp_path,
                  {"p": rpool([r], other.getsockname()[1], reuseport=True)}, free_port())
        started.append(p)
        assert wait_exit(p) != 0
        assert "in use" in p.output_tail(), p.output_tail()
    finally:
        other.close()


class Clients:
    """Busy clients: each opens a connection, runs SET/GET pairs on it,
    closes it and opens the next; every failure is kept with its time."""

    def __init__(self, port: int, n: int = 8, per_conn: int = 20):
        self.port, self.n, self.per_conn = port, n, per_conn
        self.stop = threading.Event()
        self.ok = 0
        self.ok_times: list[float] = []
        self.errors: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(n)]

    def run(self, i: int) -> None:
        k = 0
        while not self.stop.is_set():
            try:
                with socket.create_connection((HOST, self.port), timeout=2) as c:
                    f = c.makefile("rb")
                    for _ in range(self.per_conn):
                        k += 1
                        key, val = f"cut:{i}:{k}", str(k)
                        c.sendall(f"*3\r\n$3\r\nSET\r\n${len(key)}\r\n{key}\r\n${len(val)}\r\n{val}\r\n"
                                  f"*2\r\n$3\r\nGET\r\n${len(key)}\r\n{key}\r\n".encode())
                        a, b = f.readline(), f.readline()
                        if a != b"+OK\r\n" or not b.startswith(b"$"):
                            raise OSError(f"bad reply {a!r} {b!r}")
                        if f.readline() != val.encode() + b"\r\n":
                            raise OSError("wrong value")
                        with self.lock:
                            self.ok += 1
                            self.ok_times.append(time.monotonic())
            except OSError as e:
                with self.lock:
                    self.errors.append((time.monotonic(), repr(e)))

    def __enter__(self) -> "Clients":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)

    def count(self) -> int:
        with self.lock:
            return self.ok


def incumbents() -> list:
    # Once .ci/run has built it (TWEMPROXY_MASTER_REQUIRED set), the
    # nutcracker-master case must run: a missing binary fails the test.
    out = ["walnut"]
    if os.access(MASTER_BIN, os.X_OK) or os.environ.get("TWEMPROXY_MASTER_REQUIRED"):
        out.append("nutcracker-master")
    else:
        out.append(pytest.param("nutcracker-master", marks=pytest.mark.skip(
            reason=f"no nutcracker built from twemproxy's master at {MASTER_BIN} "
                   "(scripts/build-twemproxy.sh builds one)")))
    return out


@pytest.mark.parametrize("incumbent", incumbents())
def test_cutover_under_busy_clients(procs, tmp_path, started, incumbent):
    """Incumbent serving; walnut joins on the same port and stats port with
    the same file and flags; incumbent stopped. Clients see errors only in
    the instant the incumbent closes its connections, and go on through
    walnut."""
    r = procs.redis()
    port, stats = free_port(), free_port()
    pools = {"cut": rpool([r], port, reuseport=True)}
    binary = walnut_bin() if incumbent == "walnut" else MASTER_BIN
    assert os.access(binary, os.X_OK), f"{binary} missing (scripts/build-twemproxy.sh builds it)"
    old = start("incumbent", binary, tmp_path, pools, stats)
    started.append(old)
    old.wait_ready([port, stats])
    with Clients(port) as clients:
        wait_until(lambda: clients.count() > 200, 10, what="clients served by the incumbent")
        new = start("walnut", walnut_bin(), tmp_path, pools, stats)
        started.append(new)
        host, aport = admin_address(new)
        assert new.alive(), new.output_tail()

        def walnut_requests() -> int:
            out = admin(aport, "servers")
            return sum(int(m) for m in re.findall(r"requests=(\d+)", out))

        wait_until(lambda: walnut_requests() > 50, 10, what="walnut serving beside the incumbent")
        before = clients.count()
        assert not clients.errors, clients.errors[:5]
        t_stop = time.monotonic()
        old.signal(signal.SIGINT if incumbent != "walnut" else signal.SIGTERM)
        wait_exit(old)
        t_gone = time.monotonic()
        after_stop = clients.count()
        wait_until(lambda: clients.count() > after_stop + 300, 10,
                   what="clients served by walnut alone")
    assert clients.count() > before
    late = [e for e in clients.errors if e[0] > t_gone + 0.5 or e[0] < t_stop]
    assert not late, late[:5]
    print(f"\n{incumbent}: {before} pairs before the stop, {clients.count()} in all, "
          f"{len(clients.errors)} connections closed by the incumbent's stop "
          f"(stop took {(t_gone - t_stop) * 1000:.0f} ms)")


def test_stop_start_gap_debian_nutcracker(procs, tmp_path, started):
    """Debian's nutcracker 0.5.0 cannot share a port: the cutover is stop,
    then start. The gap (first refused connection to first answer through
    walnut) is measured and printed; the README quotes it."""
    if not os.access(NUTCRACKER_BIN, os.X_OK):
        pytest.skip(f"no nutcracker at {NUTCRACKER_BIN}")
    r = procs.redis()
    port, stats = free_port(), free_port()
    pools = {"cut": rpool([r], port)}
    old = start("nutcracker", NUTCRACKER_BIN, tmp_path, pools, stats)
    started.append(old)
    old.wait_ready([port, stats])
    with Clients(port) as clients:
        wait_until(lambda: clients.count() > 200, 10, what="clients served by nutcracker")
        t_stop = time.monotonic()
        old.signal(signal.SIGTERM)
        wait_exit(old)
        new = start("walnut", walnut_bin(), tmp_path, pools, stats)
        started.append(new)
        new.wait_ready([port])
        n = clients.count()
        wait_until(lambda: clients.count() > n + 10, 10, what="clients served by walnut")
        t_back = time.monotonic()
    refused = [e for e in clients.errors if "refused" in e[1].lower()]
    assert refused, clients.errors[:5]
    # As the clients saw it: from the first failure to the first answer
    # after the last one.
    first_err, last_err = min(t for t, _ in clients.errors), max(t for t, _ in clients.errors)
    back = min(t for t in clients.ok_times if t > last_err)
    assert t_stop <= first_err and back <= t_back
    gap = (back - first_err) * 1000
    print(f"\nstop-then-start: clients failed for {gap:.0f} ms "
          f"({len(clients.errors)} failed connections; SIGTERM to walnut answering "
          f"{(back - t_stop) * 1000:.0f} ms)")
    assert gap < 5000


# ------------------------------------------------------ unix sockets -----


def test_unix_socket_pool_not_taken_over(procs, tmp_path, started):
    r = procs.redis()
    path = tmp_path / "pool.sock"
    pools = {"u": {"listen": str(path), "redis": True, "servers": [f"{r.address}:1"]}}
    first = start("first", walnut_bin(), tmp_path, pools, free_port())
    started.append(first)
    wait_until(lambda: path.exists(), 10, what="the first instance's socket")

    def ping() -> bytes:
        with socket.socket(socket.AF_UNIX) as c:
            c.settimeout(2)
            c.connect(str(path))
            c.sendall(b"PING\r\n")
            return c.recv(64)

    assert ping() == b"+PONG\r\n"
    second = start("second", walnut_bin(), tmp_path, pools, free_port())
    started.append(second)
    assert wait_exit(second) != 0
    assert "another process listens on this socket" in second.output_tail(), second.output_tail()
    assert ping() == b"+PONG\r\n"
    # A socket file nobody answers on (its process killed) is taken over.
    first.kill()
    assert path.exists()
    third = start("third", walnut_bin(), tmp_path, pools, free_port())
    started.append(third)
    wait_until(lambda: can_connect_unix(path), 10, what="the third instance on the stale path")
    assert ping() == b"+PONG\r\n"


def can_connect_unix(path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as c:
            c.connect(str(path))
        return True
    except OSError:
        return False
