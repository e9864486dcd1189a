"""Helpers for the process-model tests: /proc inspection, worker lookup,
bounded background loads.

Everything polls (never a fixed sleep as synchronisation) and every load is
bounded in time and stopped explicitly.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from procs import HOST, RawConn, wait_until

WORKER_TITLE = re.compile(r"^walnut: worker (\d+)$")


# ------------------------------------------------------------- /proc ----


def cmdline(pid: int) -> str:
    """The command line of ``pid`` with NULs turned into spaces ('' if gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")


def ppid_of(pid: int) -> int | None:
    """Parent pid of ``pid``, None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def state_of(pid: int) -> str | None:
    """Scheduler state letter of ``pid`` (Z for a zombie), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()[0]


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    s = state_of(pid)
    return s is not None and s != "Z"


def children(ppid: int) -> list[int]:
    """Live (non-zombie) children of ``ppid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == ppid and fields[0] != "Z":
            out.append(pid)
    return sorted(out)


def workers_of(master: int) -> dict[int, int]:
    """Worker index -> pid for the children of ``master`` titled as workers."""
    out = {}
    for pid in children(master):
        m = WORKER_TITLE.match(cmdline(pid))
        if m:
            out[int(m.group(1))] = pid
    return out


def wait_workers(master: int, n: int, timeout: float = 10.0, exclude=()) -> dict[int, int]:
    """Poll until ``master`` has exactly ``n`` workers, none of them in ``exclude``."""
    excluded = set(exclude)

    def ready():
        w = workers_of(master)
        if len(w) == n and not excluded & set(w.values()):
            return w
        return None

    return wait_until(ready, timeout, interval=0.01, what=f"{n} workers of pid {master}")


def cpus_allowed(pid: int) -> str:
    """Cpus_allowed_list of ``pid``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no Cpus_allowed_list for {pid}")


def wait_gone(pid: int, timeout: float = 10.0) -> None:
    """Poll until ``pid`` no longer exists (or is a zombie)."""
    wait_until(lambda: not alive(pid), timeout, interval=0.01, what=f"pid {pid} to exit")


def kill_quietly(pid: int, sig: int) -> None:
    """Send ``sig`` to ``pid`` if it still exists."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------ memcached --


def mc_stats(conn: RawConn) -> dict[str, str]:
    """Send memcached ``stats`` on ``conn`` and parse the STAT lines."""
    raw = conn.request(b"stats\r\n", b"END\r\n")
    out = {}
    for line in raw.decode().splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == "STAT":
            out[parts[1]] = parts[2]
    return out


def served_by(conn: RawConn) -> int:
    """Pid of the worker serving ``conn`` (walnut answers ``stats`` itself)."""
    return int(mc_stats(conn)["pid"])


def worker_stats(port: int, worker_pids, timeout: float = 10.0) -> dict[int, dict[str, str]]:
    """memcached ``stats`` of every worker in ``worker_pids``, by opening
    connections until each worker answered one (connections kept open
    until all are found, so the spread reaches every worker)."""
    wanted = set(worker_pids)
    found: dict[int, dict[str, str]] = {}
    conns = []
    deadline = time.monotonic() + timeout
    try:
        while wanted - found.keys():
            if time.monotonic() > deadline:
                raise AssertionError(f"no connection reached workers {wanted - found.keys()}")
            c = RawConn(port)
            conns.append(c)
            st = mc_stats(c)
            found.setdefault(int(st["pid"]), st)
    finally:
        for c in conns:
            c.close()
    return {p: found[p] for p in wanted}


# ----------------------------------------------------------------- loads --


@dataclass
class LoadResult:
    """What a background load saw."""

    ok: int = 0
    errors: list[str] = field(default_factory=list)
    refused: int = 0
    pids: set[int] = field(default_factory=set)


class MemcacheLoad:
    """Background set/get traffic on ``conns`` persistent raw connections
    (or a new connection per request with ``reconnect``), bounded by
    ``max_seconds``; ``stop()`` ends it and returns the result."""

    def __init__(self, port: int, conns: int = 4, reconnect: bool = False, max_seconds: float = 20.0,
                 value_size: int = 64):
        self.port = port
        self.nconns = conns
        self.reconnect = reconnect
        self.max_seconds = max_seconds
        self.value = b"v" * value_size
        self.result = LoadResult()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(conns)]
        self.conn_pids: dict[int, int] = {}

    def start(self) -> "MemcacheLoad":
        for t in self._threads:
            t.start()
        # Ready once every thread completed a request.
        wait_until(lambda: self.result.ok >= 2 * self.nconns or self.result.errors, 10,
                   what="load to start")
        return self

    def _one(self, c: RawConn, key: bytes, n: int) -> None:
        val = self.value + str(n).encode()
        r = c.request(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(val), val), b"\r\n")
        if r != b"STORED\r\n":
            raise AssertionError(f"set: {r!r}")
        r = c.request(b"get %s\r\n" % key, b"END\r\n")
        want = b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, len(val), val)
        if r != want:
            raise AssertionError(f"get: {r!r}")

    def _run(self, i: int) -> None:
        deadline = time.monotonic() + self.max_seconds
        key = b"load:%x:%d" % (id(self), i)
        n = 0
        c = None
        while not self._stop.is_set() and time.monotonic() < deadline:
            n += 1
            try:
                if c is None:
                    try:
                        c = RawConn(self.port, timeout=5)
                    except ConnectionRefusedError:
                        with self._lock:
                            self.result.refused += 1
                        continue
                    if n == 1 or self.reconnect:
                        pid = served_by(c)
                        with self._lock:
                            self.result.pids.add(pid)
                            self.conn_pids[i] = pid
                self._one(c, key, n)
                with self._lock:
                    self.result.ok += 1
            except Exception as e:  # noqa: BLE001 - every failure is counted
                with self._lock:
                    self.result.errors.append(f"conn {i}: {e!r}")
                if c is not None:
                    c.close()
                c = None
                if not self.reconnect:
                    return
            if self.reconnect and c is not None:
                c.close()
                c = None
        if c is not None:
            c.close()

    def stop(self) -> LoadResult:
        """Stop the load, wait for its threads, return what it saw."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)
        return self.result


def connect_with_retry(port: int, timeout: float = 5.0) -> socket.socket:
    """A connected socket to ``port``, retrying while it is refused."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection((HOST, port), timeout=1)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def log_has(path: Path, text: str) -> bool:
    """True if the file at ``path`` contains ``text``."""
    try:
        return text in Path(path).read_text(errors="replace")
    except OSError:
        return False


def wait_log(path: Path, text: str, timeout: float = 10.0) -> None:
    """Poll the log at ``path`` until it contains ``text``."""
    wait_until(lambda: log_has(path, text), timeout, interval=0.02, what=f"{text!r} in {path}")


def start_walnut(procs, pools: dict, process: dict | None = None, args=()):
    """Start walnut on ``pools`` with an optional ``_walnut:`` section and
    extra command-line ``args``; registered with ``procs`` for teardown."""
    from procs import Proxy, to_yaml

    p = Proxy("walnut", procs.workdir, pools, extra_args=list(args))
    if process:
        p.conf_path.write_text(to_yaml(p.pools) + to_yaml({"_walnut": process}))
    procs.started.append(p)
    return p.start()
