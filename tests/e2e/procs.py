"""Process and socket helpers for walnut's end-to-end tests.

Everything here binds to 127.0.0.1 on ports chosen at run time, starts each
server in its own temporary directory and process group, and stops it by pid.
Readiness is detected by polling a TCP connect, never by a fixed sleep.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

HOST = "127.0.0.1"

REPO_ROOT = Path(__file__).resolve().parents[2]
NUTCRACKER_BIN = os.environ.get("NUTCRACKER_BIN", "/usr/sbin/nutcracker")
MEMCACHED_BIN = os.environ.get("MEMCACHED_BIN", "memcached")
REDIS_SERVER_BIN = os.environ.get("REDIS_SERVER_BIN", "redis-server")
REDIS_CLI_BIN = os.environ.get("REDIS_CLI_BIN", "redis-cli")

#: How long a server may take to accept connections after it was started.
READY_TIMEOUT = float(os.environ.get("E2E_READY_TIMEOUT", "15"))
#: How long a stopped server may take to exit after SIGTERM.
STOP_TIMEOUT = 5.0

_ALLOCATED_PORTS: set[int] = set()


def walnut_bin() -> str:
    """Path of the walnut binary under test (env WALNUT_BIN overrides)."""
    return os.environ.get("WALNUT_BIN", str(REPO_ROOT / "target" / "release" / "walnut"))


def proxy_bin(kind: str) -> str:
    """Binary for a proxy kind: ``walnut`` or ``nutcracker``."""
    if kind == "walnut":
        return walnut_bin()
    if kind == "nutcracker":
        return NUTCRACKER_BIN
    raise ValueError(f"unknown proxy kind {kind!r}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago.

    The kernel picks the port (bind to port 0); a process-wide set makes sure
    the same port is never handed out twice during one test run.
    """
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        if port not in _ALLOCATED_PORTS:
            _ALLOCATED_PORTS.add(port)
            return port
    raise RuntimeError("could not find a free TCP port")


def free_cluster_port() -> int:
    """A free port P whose cluster bus port P+10000 is free too."""
    for _ in range(1000):
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, port + 10000))
            except OSError:
                continue
        if port + 10000 not in _ALLOCATED_PORTS:
            _ALLOCATED_PORTS.add(port + 10000)
            return port
    raise RuntimeError("could not find a free TCP port pair for a cluster node")


def free_port_run(n: int) -> list[int]:
    """``n`` consecutive TCP ports, all free a moment ago, below the
    ephemeral range (32768-60999).

    Consecutive ports cannot come from the kernel's port-0 choice: a port
    next to one it handed out is soon handed out again (to another test's
    listener, or to a proxy's own port-0 admin socket). Below 32768 only
    fixed choices like this one land.
    """
    import random
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(1000):
        base = rng.randrange(24000, 32768 - n)
        run = list(range(base, base + n))
        if any(p in _ALLOCATED_PORTS for p in run):
            continue
        ok = True
        for p in run:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((HOST, p))
                except OSError:
                    ok = False
                    break
        if ok:
            _ALLOCATED_PORTS.update(run)
            return run
    raise RuntimeError(f"could not find {n} consecutive free TCP ports")


def log_tail(path: Path | None, limit: int = 4000) -> str:
    """The last ``limit`` characters of a log file, or a note that it is absent."""
    if path is None:
        return "(no log file)"
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        return f"(cannot read {path}: {e})"
    return data[-limit:].decode("utf-8", "replace")


def can_connect(port: int, host: str = HOST, timeout: float = 0.2) -> bool:
    """True when a TCP connect to host:port succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class ManagedProcess:
    """A child process started in its own process group and stopped by pid."""

    def __init__(self, name: str, argv: Sequence[str], workdir: Path, log_path: Path):
        self.name = name
        self.argv = list(argv)
        self.workdir = Path(workdir)
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        """The pid of the started process."""
        assert self.proc is not None, f"{self.name} was not started"
        return self.proc.pid

    def start(self) -> "ManagedProcess":
        """Start the process with stdout/stderr sent to its own file."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        out = open(self.workdir / f"{self.name}.stdout", "ab")
        try:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            out.close()
        return self

    def alive(self) -> bool:
        """True while the process has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def output_tail(self) -> str:
        """Tail of the log file and of the captured stdout/stderr."""
        out = self.workdir / f"{self.name}.stdout"
        return (
            f"--- {self.log_path} ---\n{log_tail(self.log_path)}\n"
            f"--- {out} ---\n{log_tail(out)}"
        )

    def wait_ready(self, ports: Iterable[int], timeout: float = READY_TIMEOUT) -> None:
        """Poll a connect on every port until all accept, or fail clearly."""
        pending = list(ports)
        deadline = time.monotonic() + timeout
        while pending:
            if not self.alive():
                code = self.proc.poll() if self.proc else None
                raise RuntimeError(
                    f"{self.name} ({' '.join(self.argv)}) exited with {code} before "
                    f"listening on {pending}\n{self.output_tail()}"
                )
            pending = [p for p in pending if not can_connect(p)]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.name} not listening on {pending} after {timeout}s "
                    f"({' '.join(self.argv)})\n{self.output_tail()}"
                )
            time.sleep(0.02)

    def signal(self, sig: int) -> None:
        """Send a signal to the process (by pid)."""
        if self.alive():
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL the process and reap it (simulates a crash)."""
        if self.proc is None:
            return
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=STOP_TIMEOUT)
        self._kill_group()

    def stop(self) -> None:
        """SIGTERM, wait a bounded time, then SIGKILL; idempotent."""
        if self.proc is None:
            return
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGTERM)
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT)
            except ProcessLookupError:
                pass
        else:
            self.proc.wait(timeout=STOP_TIMEOUT)
        self._kill_group()

    def _kill_group(self) -> None:
        # Children left in the process group this helper created (for example
        # workers of a proxy whose master was killed) are ended too.
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Memcached(ManagedProcess):
    """A real memcached on 127.0.0.1 (UDP off)."""

    def __init__(self, workdir: Path, port: int | None = None, extra: Sequence[str] = ()):
        self.port = port or free_port()
        workdir = Path(workdir) / f"memcached-{self.port}"
        argv = [MEMCACHED_BIN, "-u", "root", "-l", HOST, "-p", str(self.port), "-U", "0", *extra]
        super().__init__(f"memcached-{self.port}", argv, workdir, workdir / f"memcached-{self.port}.stdout")

    def start(self) -> "Memcached":
        super().start()
        self.wait_ready([self.port])
        return self

    @property
    def address(self) -> str:
        """host:port of this server."""
        return f"{HOST}:{self.port}"


class Redis(ManagedProcess):
    """A real redis-server on 127.0.0.1 without persistence."""

    def __init__(self, workdir: Path, port: int | None = None, extra: Sequence[str] = ()):
        self.port = port or free_port()
        workdir = Path(workdir) / f"redis-{self.port}"
        log = workdir / "redis.log"
        argv = [
            REDIS_SERVER_BIN, "--port", str(self.port), "--bind", HOST,
            "--save", "", "--appendonly", "no", "--dir", str(workdir),
            "--logfile", str(log), *extra,
        ]
        super().__init__(f"redis-{self.port}", argv, workdir, log)

    def start(self) -> "Redis":
        super().start()
        self.wait_ready([self.port])
        return self

    @property
    def address(self) -> str:
        """host:port of this server."""
        return f"{HOST}:{self.port}"


class Sentinel(ManagedProcess):
    """A Redis Sentinel (redis-server in sentinel mode) on 127.0.0.1
    monitoring ``masters``: name -> (port, quorum), with a 1 s down time."""

    def __init__(self, workdir: Path, masters: Mapping[str, tuple[int, int]], port: int | None = None):
        self.port = port or free_port()
        workdir = Path(workdir) / f"sentinel-{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        log = workdir / "sentinel.log"
        conf = workdir / "sentinel.conf"  # a sentinel rewrites its own file
        lines = [f"port {self.port}", f"bind {HOST}", f"dir {workdir}", f"logfile {log}"]
        for name, (mport, quorum) in masters.items():
            lines += [
                f"sentinel monitor {name} {HOST} {mport} {quorum}",
                f"sentinel down-after-milliseconds {name} 1000",
                f"sentinel failover-timeout {name} 10000",
            ]
        conf.write_text("\n".join(lines) + "\n")
        super().__init__(f"sentinel-{self.port}", [REDIS_SERVER_BIN, str(conf), "--sentinel"], workdir, log)

    def start(self) -> "Sentinel":
        super().start()
        self.wait_ready([self.port])
        return self

    @property
    def address(self) -> str:
        """host:port of this sentinel."""
        return f"{HOST}:{self.port}"

    def master_of(self, name: str) -> int | None:
        """The port this sentinel gives as ``name``'s master now."""
        out = redis_cli(self.port, "sentinel", "get-master-addr-by-name", name, timeout=5).split()
        return int(out[1]) if len(out) == 2 else None


def cluster_node_args(workdir: Path, port: int) -> list[str]:
    """redis-server arguments of a Redis Cluster node on ``port``."""
    conf = Path(workdir) / f"nodes-{port}.conf"
    return ["--cluster-enabled", "yes", "--cluster-config-file", str(conf), "--cluster-node-timeout", "5000"]


def redis_cli(port: int, *args: str, timeout: float = 30.0, password: str | None = None) -> str:
    """Run redis-cli against 127.0.0.1:``port``; its stdout (raises on failure)."""
    env = dict(os.environ, REDISCLI_AUTH=password) if password else None
    out = subprocess.run(
        [REDIS_CLI_BIN, "-h", HOST, "-p", str(port), *args],
        capture_output=True, text=True, timeout=timeout, check=True, env=env,
    )
    return out.stdout


def cluster_info(port: int, password: str | None = None) -> dict[str, str]:
    """CLUSTER INFO of a node as a dict."""
    info = {}
    for line in redis_cli(port, "cluster", "info", password=password).splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            info[k.strip()] = v.strip()
    return info


def form_cluster(ports: Sequence[int], replicas: int = 0, timeout: float = 60.0, password: str | None = None) -> None:
    """Join fresh cluster nodes into one cluster (``redis-cli --cluster create``)
    and wait until every node reports cluster_state:ok, all 16384 slots
    assigned and every other node known."""
    addrs = [f"{HOST}:{p}" for p in ports]
    subprocess.run(
        [REDIS_CLI_BIN, "--cluster", "create", *addrs, "--cluster-replicas", str(replicas), "--cluster-yes"],
        capture_output=True, text=True, timeout=timeout, check=True,
        env=dict(os.environ, REDISCLI_AUTH=password) if password else None,
    )

    masters = len(ports) // (1 + replicas)

    def ready() -> bool:
        import redis  # redis-py, from requirements-test.txt

        for p in ports:
            info = cluster_info(p, password)
            if (
                info.get("cluster_state") != "ok"
                or info.get("cluster_slots_assigned") != "16384"
                or info.get("cluster_known_nodes") != str(len(ports))
            ):
                return False
            node = redis.Redis(host=HOST, port=p, socket_timeout=5, password=password)
            try:
                # Every master's replicas listed in CLUSTER SLOTS, every
                # replica's link to its master up.
                ranges = node.execute_command("CLUSTER SLOTS")
                if replicas and sum(len(r) - 3 for r in ranges) < masters * replicas:
                    return False
                repl = node.info("replication")
                if repl.get("role") == "slave" and repl.get("master_link_status") != "up":
                    return False
            finally:
                node.close()
        return True

    wait_until(ready, timeout, interval=0.1, what="cluster_state:ok on every node")


def cluster_node_ids(port: int) -> dict[int, tuple[str, str]]:
    """CLUSTER NODES as seen by a node: port -> (node id, flags)."""
    nodes = {}
    for line in redis_cli(port, "cluster", "nodes").splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        node_port = int(parts[1].split("@")[0].rsplit(":", 1)[1])
        nodes[node_port] = (parts[0], parts[2])
    return nodes


def slot_owner(port: int, slot: int) -> int:
    """The port of the master serving ``slot``, as the node on ``port`` sees it."""
    for line in redis_cli(port, "cluster", "nodes").splitlines():
        parts = line.split()
        if len(parts) < 9 or "master" not in parts[2]:
            continue
        for rng in parts[8:]:
            if rng.startswith("["):
                continue
            lo, _, hi = rng.partition("-")
            if int(lo) <= slot <= int(hi or lo):
                return int(parts[1].split("@")[0].rsplit(":", 1)[1])
    raise LookupError(f"slot {slot} has no owner")


# ---------------------------------------------------------------- YAML ----

_PLAIN = re.compile(r"^[A-Za-z0-9_./:@+\- ]*[A-Za-z0-9_./@+\-]$")


def _yaml_scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    if _PLAIN.match(text) and not text.startswith(("-", ":")) and ": " not in text:
        return text
    return json.dumps(text)


def to_yaml(doc: Mapping[str, object], indent: int = 0) -> str:
    """Render a nested dict of scalars and lists of scalars as block YAML."""
    pad = " " * indent
    lines: list[str] = []
    for key, value in doc.items():
        if isinstance(value, Mapping):
            lines.append(f"{pad}{key}:")
            lines.append(to_yaml(value, indent + 2).rstrip("\n"))
        elif isinstance(value, (list, tuple)):
            lines.append(f"{pad}{key}:")
            lines.extend(f"{pad}  - {_yaml_scalar(v)}" for v in value)
        else:
            lines.append(f"{pad}{key}: {_yaml_scalar(value)}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------- proxy ----


class Proxy(ManagedProcess):
    """walnut or nutcracker running a config generated from a dict.

    ``pools`` maps a pool name to its settings, as in a twemproxy YAML file;
    a pool without ``listen`` gets a free port on 127.0.0.1. After ``start``
    every listen port and the stats port accept connections.
    """

    def __init__(
        self,
        kind: str,
        workdir: Path,
        pools: Mapping[str, Mapping[str, object]],
        extra_args: Sequence[str] = (),
        stats_interval_ms: int = 100,
    ):
        self.kind = kind
        self.pools: dict[str, dict[str, object]] = {}
        self.ports: dict[str, int] = {}
        for name, settings in pools.items():
            pool = dict(settings)
            if "listen" not in pool:
                pool["listen"] = f"{HOST}:{free_port()}"
            self.ports[name] = int(str(pool["listen"]).rsplit(":", 1)[1])
            self.pools[name] = pool
        self.stats_port = free_port()
        workdir = Path(workdir) / f"{kind}-{self.stats_port}"
        workdir.mkdir(parents=True, exist_ok=True)
        self.conf_path = workdir / "proxy.yml"
        self.conf_path.write_text(to_yaml(self.pools))
        log = workdir / f"{kind}.log"
        argv = [
            proxy_bin(kind), "-c", str(self.conf_path), "-s", str(self.stats_port),
            "-a", HOST, "-o", str(log), "-i", str(stats_interval_ms), *extra_args,
        ]
        self.admin_port = None
        if kind == "walnut":
            # e.g. WALNUT_ARGS="--workers 2 --listener epoll_exclusive"
            argv += shlex.split(os.environ.get("WALNUT_ARGS", ""))
            if not any(a.startswith("--admin") for a in argv):
                # A port of its own: the default one may be held by another
                # walnut (a taken admin port is a start-up error).
                self.admin_port = free_port()
                argv += ["--admin", f"{HOST}:{self.admin_port}"]
        super().__init__(kind, argv, workdir, log)

    def start(self) -> "Proxy":
        binary = self.argv[0]
        if not os.access(binary, os.X_OK):
            raise RuntimeError(
                f"{self.kind} binary {binary} is missing or not executable "
                "(run `make build`, or set WALNUT_BIN / PROXY=nutcracker)"
            )
        super().start()
        self.wait_ready([*self.ports.values(), self.stats_port])
        return self

    def port(self, pool: str | None = None) -> int:
        """Listen port of a pool (the only pool when ``pool`` is None)."""
        if pool is None:
            if len(self.ports) != 1:
                raise ValueError("proxy has several pools: name one")
            return next(iter(self.ports.values()))
        return self.ports[pool]

    def stats(self, timeout: float = 5.0) -> dict:
        """The stats JSON document served on the stats port."""
        return read_stats(self.stats_port, timeout=timeout)


def read_stats(port: int, host: str = HOST, timeout: float = 5.0) -> dict:
    """Connect to a twemproxy-style stats port and parse its JSON document."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    raw = b"".join(chunks)
    try:
        return json.loads(raw)
    except ValueError as e:
        raise AssertionError(f"stats port {port} served invalid JSON ({e}): {raw[:500]!r}") from e


def memcache_pool(backends, **settings) -> dict:
    """A memcached pool dict over ``backends`` (weight 1, unnamed)."""
    pool = {
        "hash": "fnv1a_64",
        "distribution": "ketama",
        "timeout": 2000,
        "servers": [f"{b.address}:1" for b in backends],
    }
    pool.update(settings)
    return pool


def redis_pool(backends, **settings) -> dict:
    """A Redis pool dict over ``backends`` (weight 1, unnamed)."""
    pool = memcache_pool(backends, redis=True)
    pool.update(settings)
    return pool


# ----------------------------------------------------------- raw I/O -----


class RawConn:
    """A blocking client socket with timed reads up to a terminator."""

    def __init__(self, port: int, host: str = HOST, timeout: float = 5.0):
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def __enter__(self) -> "RawConn":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def send(self, data: bytes) -> None:
        """Send all of ``data``."""
        self.sock.sendall(data)

    def _fill(self, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"timed out; received so far: {self.buf[:300]!r}")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout as e:
            raise TimeoutError(f"timed out; received so far: {self.buf[:300]!r}") from e
        if not data:
            return False
        self.buf += data
        return True

    def read_until(self, terminator: bytes, timeout: float | None = None) -> bytes:
        """Read up to and including ``terminator``; raise on timeout or EOF."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            idx = self.buf.find(terminator)
            if idx >= 0:
                end = idx + len(terminator)
                out, self.buf = self.buf[:end], self.buf[end:]
                return out
            if not self._fill(deadline):
                raise ConnectionError(f"EOF before {terminator!r}; received: {self.buf[:300]!r}")

    def read_line(self, timeout: float | None = None) -> bytes:
        """Read one CRLF-terminated line (CRLF included)."""
        return self.read_until(b"\r\n", timeout)

    def read_exactly(self, n: int, timeout: float | None = None) -> bytes:
        """Read exactly ``n`` bytes."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self.buf) < n:
            if not self._fill(deadline):
                raise ConnectionError(f"EOF after {len(self.buf)} of {n} bytes")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def request(self, data: bytes, terminator: bytes = b"\r\n", timeout: float | None = None) -> bytes:
        """Send ``data`` and read until ``terminator``."""
        self.send(data)
        return self.read_until(terminator, timeout)

    def is_closed(self, timeout: float = 2.0) -> bool:
        """True if the peer closes (EOF or reset) within ``timeout`` with no data."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                if not self._fill(deadline):
                    return True
        except TimeoutError:
            return False
        except (ConnectionResetError, BrokenPipeError):
            return True


def send_raw(port: int, data: bytes, terminator: bytes, timeout: float = 5.0) -> bytes:
    """One-shot: connect, send ``data``, read until ``terminator``, close."""
    with RawConn(port, timeout=timeout) as c:
        return c.request(data, terminator, timeout)


def wait_until(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; return that value."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - reported on timeout
            last_exc = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_exc!r})")
