"""Helpers for the fault suite (tests/e2e/test_faults_*.py) and bench/soak.py.

Memory of walnut's workers (VmRSS from /proc), a tiny RESP reader, key
placement found by asking the backends directly, and timed request helpers.
Everything talks to 127.0.0.1 only.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

HOST = "127.0.0.1"


# ------------------------------------------------------------ processes ----


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc, no external tools)."""
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text()
            out.extend(int(p) for p in text.split())
        return out
    except OSError:
        pass
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 4 (ppid) follows the parenthesised command name.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def status_kb(pid: int, field: str) -> int:
    """A kB field of /proc/PID/status (VmRSS, VmHWM, ...); 0 when the
    process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_kb(pid: int) -> int:
    """VmRSS of ``pid`` in kB (0 when the process is gone)."""
    return status_kb(pid, "VmRSS")


def workers(proxy) -> list[int]:
    """Worker pids of a walnut proxy (the master's children); for a
    single-process proxy (nutcracker) the proxy itself."""
    kids = children(proxy.pid)
    return kids or [proxy.pid]


def workers_rss_kb(proxy) -> int:
    """Sum of the workers' VmRSS in kB."""
    return sum(rss_kb(p) for p in workers(proxy))


def max_worker_rss_kb(proxy) -> int:
    """Largest VmRSS of one worker in kB."""
    return max((rss_kb(p) for p in workers(proxy)), default=0)


# ---------------------------------------------------------------- RESP ----


class RespError(Exception):
    """A RESP error reply (``-ERR ...``)."""


class Resp:
    """A blocking RESP client over a raw socket, enough for tests."""

    def __init__(self, port: int, timeout: float = 5.0):
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(timeout)
        self.buf = bytearray()
        self.pos = 0

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def __enter__(self) -> "Resp":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def encode(*args) -> bytes:
        """One request as a RESP array of bulk strings."""
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(parts)

    def _more(self) -> None:
        if self.pos > 1 << 20:
            del self.buf[: self.pos]
            self.pos = 0
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("connection closed by the proxy")
        self.buf += data

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n", self.pos)
            if i >= 0:
                line = bytes(self.buf[self.pos : i])
                self.pos = i + 2
                return line
            self._more()

    def _exact(self, n: int) -> bytes:
        while len(self.buf) - self.pos < n + 2:
            self._more()
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n + 2
        return out

    def read(self):
        """One reply: str for +, int for :, bytes/None for $, list for *;
        an error reply is returned as a RespError instance (not raised)."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ValueError(f"bad RESP line {line[:80]!r}")

    def call(self, *args):
        """Send one command and read its reply."""
        self.sock.sendall(self.encode(*args))
        return self.read()


# ----------------------------------------------------------- memcached ----


def mc_get(conn, key: str, timeout: float | None = None) -> bytes:
    """A `get` through a procs.RawConn: the value line + data + END, a bare
    END, or an error line."""
    conn.send(f"get {key}\r\n".encode())
    first = conn.read_line(timeout)
    if first.startswith(b"VALUE"):
        return first + conn.read_until(b"END\r\n", timeout)
    return first


# ----------------------------------------------------------- placement ----


def redis_holder(backends, key: str) -> int | None:
    """Index of the Redis backend holding ``key`` (asked directly)."""
    for i, b in enumerate(backends):
        with Resp(b.port) as c:
            if c.call("EXISTS", key) == 1:
                return i
    return None


def mc_holder(backends, key: str) -> int | None:
    """Index of the memcached backend holding ``key`` (asked directly)."""
    from procs import RawConn

    for i, b in enumerate(backends):
        with RawConn(b.port) as c:
            if c.request(f"get {key}\r\n".encode(), b"END\r\n").startswith(b"VALUE"):
                return i
    return None


def timed(fn, *args, **kw):
    """(result, seconds) of one call."""
    t0 = time.monotonic()
    out = fn(*args, **kw)
    return out, time.monotonic() - t0


def report(name: str, **numbers) -> None:
    """Print measured numbers (visible with ``pytest -s`` or in a failure)
    and append them to the file named by env FAULTS_REPORT, if set."""
    line = f"[faults] {name}: " + ", ".join(f"{k}={v}" for k, v in numbers.items())
    print(line)
    path = os.environ.get("FAULTS_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
