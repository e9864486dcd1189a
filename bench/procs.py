"""Processes for the benchmark: backends, proxies, and /proc accounting.

Everything binds 127.0.0.1 on ports picked at run time, runs in its own
session, is pinned with `taskset`, and is stopped by pid.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[1]
WALNUT = os.environ.get("WALNUT_BIN", str(ROOT / "target" / "release" / "walnut"))
NUTCRACKER = os.environ.get("NUTCRACKER_BIN", "/usr/sbin/nutcracker")
# predixy (Redis only), a peer when a binary is there: PREDIXY_BIN, or the
# build recipe in bench/README.md leaves it at ../peers/predixy/src/predixy.
PREDIXY = os.environ.get("PREDIXY_BIN", str(ROOT.parent / "peers" / "predixy" / "src" / "predixy"))


def have_predixy() -> bool:
    return os.access(PREDIXY, os.X_OK)
CLK_TCK = os.sysconf("SC_CLK_TCK")
_USED: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (never reused)."""
    while True:
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        if port not in _USED:
            _USED.add(port)
            return port


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """Block until host:port accepts a TCP connection."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process {proc.args} exited with {proc.returncode}")
        try:
            with socket.create_connection((HOST, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} not ready after {timeout}s ({proc.args})")


# ------------------------------------------------------------ /proc ----


def children_of(pid: int) -> list[int]:
    """Direct children of `pid`, found by the ppid field of /proc/*/stat."""
    kids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            kids.append(int(d))
    return kids


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children_of(p))
    return out


def user_sys_seconds(pids: list[int]) -> dict[int, tuple[float, float]]:
    """utime and stime (seconds) of each live pid."""
    out = {}
    for p in pids:
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2:].split()
        out[p] = (int(f[11]) / CLK_TCK, int(f[12]) / CLK_TCK)
    return out


def proc_sum(files: list[Path], key: str) -> int:
    """Sum of the first number on the `key` line of each of `files`
    (/proc files of live processes; one that is gone counts 0)."""
    n = 0
    for f in files:
        try:
            for line in f.read_text().splitlines():
                if line.startswith(key):
                    n += int(line.split()[1])
        except OSError:
            continue
    return n


def sleeps(pids: list[int]) -> int:
    """Voluntary context switches (the times a thread slept, as in
    `epoll_wait`) of every thread of pids."""
    tasks = []
    for p in pids:
        try:
            tasks += [t / "status" for t in Path(f"/proc/{p}/task").iterdir()]
        except OSError:
            continue
    return proc_sum(tasks, "voluntary_ctxt_switches:")


def read_calls(pids: list[int]) -> int:
    """Read calls of pids (`/proc/PID/io` syscr: read(2) and readv, not
    recvfrom). Write calls are not counted alike: syscw misses send(2),
    which walnut writes sockets with, while predixy and nutcracker use
    writev (`segments_to` counts the writes to a backend instead)."""
    return proc_sum([Path(f"/proc/{p}/io") for p in pids], "syscr:")


def segments_to(ports: list[int]) -> int:
    """Data segments sent so far on the established connections to any of
    `ports` on 127.0.0.1 (`ss -ti` data_segs_out): a proxy's writes to its
    backends as the kernel sent them, whichever call made them."""
    filt = "( " + " or ".join(f"dport = :{p}" for p in ports) + " )"
    out = subprocess.run(["ss", "-tinH", "state", "established", filt],
                         capture_output=True, text=True, check=True).stdout
    return sum(int(w.split(":")[1]) for w in out.split() if w.startswith("data_segs_out:"))


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """utime+stime (seconds) of each live pid."""
    return {p: u + s for p, (u, s) in user_sys_seconds(pids).items()}


def rss_kb(pids: list[int]) -> int:
    """Sum of VmRSS (KiB) over pids."""
    return proc_sum([Path(f"/proc/{p}/status") for p in pids], "VmRSS:")


# ----------------------------------------------------------- managed ----


class Proc:
    """A server process started in its own session, stopped by pid."""

    def __init__(self, argv: list[str], cpus: str | None, log: Path,
                 env: dict[str, str] | None = None):
        self.argv = (["taskset", "-c", cpus] if cpus else []) + argv
        self.log = log
        self.env = {**os.environ, **env} if env else None
        self.p: subprocess.Popen | None = None

    def start(self, ports: list[int]) -> "Proc":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.p = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True,
                                      env=self.env)
        for port in ports:
            wait_port(port, self.p)
        return self

    @property
    def pid(self) -> int:
        assert self.p is not None
        return self.p.pid

    def pids(self) -> list[int]:
        """The process and its children (walnut's workers)."""
        return tree(self.pid)

    def stop(self) -> None:
        if self.p is None or self.p.poll() is not None:
            return
        kids = self.pids()
        os.kill(self.pid, signal.SIGTERM)
        try:
            self.p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.p.wait()
        for k in kids[1:]:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass


def redis_server(port: int, work: Path, cpus: str) -> Proc:
    d = work / f"redis-{port}"
    d.mkdir(parents=True, exist_ok=True)
    return Proc(["redis-server", "--port", str(port), "--bind", HOST, "--save", "",
                 "--appendonly", "no", "--dir", str(d), "--maxclients", "60000",
                 "--logfile", str(d / "redis.log")], cpus, d / "stdout").start([port])


def memcached(port: int, work: Path, cpus: str) -> Proc:
    return Proc(["memcached", "-u", "root", "-l", HOST, "-p", str(port), "-U", "0",
                 "-m", "1024", "-t", "1", "-c", "4096"], cpus,
                work / f"memcached-{port}.log").start([port])


def yaml_pools(pools: dict[str, dict], reuseport: bool = False) -> str:
    """Twemproxy YAML for {name: {listen, redis, servers}}; `reuseport`
    adds the pool key `reuseport: true` (SO_REUSEPORT on the listener)."""
    out = []
    for name, p in pools.items():
        out += [f"{name}:", f"  listen: {p['listen']}", "  hash: fnv1a_64",
                "  distribution: ketama", f"  redis: {'true' if p['redis'] else 'false'}"]
        out += ["  reuseport: true"] if reuseport else []
        out += ["  servers:"]
        out += [f"    - {s}:1" for s in p["servers"]]
    return "\n".join(out) + "\n"


class Proxy(Proc):
    """walnut or nutcracker over the same pools (identical YAML). `binary`
    replaces the walnut binary (WALNUT_BEFORE); `reuseport` is how a
    nutcracker shares its listen addresses with another one (see
    nutcracker_reuseport)."""

    def __init__(self, kind: str, pools: dict[str, dict], work: Path, cpus: str,
                 workers: int = 1, listener: str | None = None, quickack: bool = True,
                 binary: str | None = None, reuseport: tuple[str, dict] | None = None,
                 process: dict[str, str] | None = None):
        self.kind = kind
        self.stats_port = free_port()
        d = work / f"{kind}-{self.stats_port}"
        d.mkdir(parents=True, exist_ok=True)
        conf = yaml_pools(pools, reuseport=bool(reuseport and reuseport[0] == "key"))
        settings = dict(process or {})
        if not quickack:
            settings["tcp_quickack"] = "false"
        if kind == "walnut" and settings:
            conf += "_walnut:\n" + "".join(f"  {k}: {v}\n" for k, v in settings.items())
        (d / "proxy.yml").write_text(conf)
        self.log_path = d / "proxy.log"
        binary = binary or (WALNUT if kind == "walnut" else NUTCRACKER)
        argv = [binary, "-c", str(d / "proxy.yml"),
                "-s", str(self.stats_port), "-a", HOST, "-o", str(self.log_path)]
        self.admin_port = free_port() if kind == "walnut" else None
        if kind == "walnut":
            argv += ["--workers", str(workers), "--cpu-affinity", "none",
                     "--admin", f"{HOST}:{self.admin_port}"]
            if listener:
                argv += ["--listener", listener]
        self.ports = [int(p["listen"].rsplit(":", 1)[1]) for p in pools.values()]
        super().__init__(argv, cpus, d / "stdout", env=reuseport[1] if reuseport else None)

    def start(self, ports: list[int] | None = None) -> "Proxy":
        super().start(self.ports + [self.stats_port])
        return self

    def metric_sum(self, name: str) -> int | None:
        """Sum of a Prometheus metric over its label sets (walnut's admin
        port, GET /metrics); None when unavailable."""
        if self.admin_port is None:
            return None
        try:
            with socket.create_connection((HOST, self.admin_port), timeout=3) as s:
                s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                chunks = []
                while True:
                    d = s.recv(65536)
                    if not d:
                        break
                    chunks.append(d)
        except OSError:
            return None
        total, seen = 0, False
        for line in b"".join(chunks).decode(errors="replace").splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += int(float(line.rsplit(" ", 1)[1]))
                seen = True
        return total if seen else None

    def stats(self) -> dict | None:
        """The stats JSON, or None when unreadable."""
        try:
            with socket.create_connection((HOST, self.stats_port), timeout=3) as s:
                chunks = []
                while data := s.recv(65536):
                    chunks.append(data)
            return json.loads(b"".join(chunks))
        except (OSError, ValueError):
            return None


def listeners_on(port: int) -> int:
    """Listening TCP sockets on 127.0.0.1:port (`ss`), to tell that every
    process of a SO_REUSEPORT group bound its own."""
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                         text=True, check=False).stdout
    return sum(1 for line in out.splitlines() if line.strip())


# SO_REUSEPORT before every bind(): for a nutcracker without the pool key
# `reuseport` (0.5.0 has none), the same effect as that key.
_REUSEPORT_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <sys/socket.h>

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    static int (*real_bind)(int, const struct sockaddr *, socklen_t);
    int one = 1;

    if (real_bind == NULL)
        real_bind = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "bind");
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    return real_bind(fd, addr, len);
}
"""


def nutcracker_reuseport(work: Path) -> tuple[str, dict] | None:
    """How nutcrackers can share a listen address: ("key", {}) when the
    binary takes the pool key `reuseport: true` (twemproxy after 0.5.0),
    else ("preload", {"LD_PRELOAD": shim}) with a shim built by `cc` that
    sets SO_REUSEPORT before bind(); None without a C compiler."""
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        conf = Path(tmp) / "reuseport.yml"
        conf.write_text(yaml_pools({"probe": {"listen": f"{HOST}:{free_port()}",
                                              "redis": True, "servers": [f"{HOST}:1"]}},
                                   reuseport=True))
        probe = subprocess.run([NUTCRACKER, "-t", "-c", str(conf)], capture_output=True,
                               check=False)
    if probe.returncode == 0:
        return ("key", {})
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None
    src, lib = work / "reuseport.c", work / "reuseport.so"
    src.write_text(_REUSEPORT_C)
    built = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(src), "-ldl"],
                           capture_output=True, text=True, check=False)
    if built.returncode != 0:
        raise RuntimeError(f"building the SO_REUSEPORT shim failed: {built.stderr[-500:]}")
    return ("preload", {"LD_PRELOAD": str(lib)})


class Group:
    """Several proxy processes serving the same listen addresses
    (SO_REUSEPORT), measured as one: CPU and RSS summed over all."""

    def __init__(self, kind: str, members: list[Proxy]):
        self.kind = kind
        self.members = members
        self.admin_port = None
        self.pool_ports = members[0].pool_ports

    def pids(self) -> list[int]:
        return [pid for m in self.members for pid in m.pids()]

    def stop(self) -> None:
        for m in self.members:
            m.stop()


class Predixy:
    """predixy over the Redis pools: one process per pool (predixy binds one
    address), each with one worker thread, pinned like the other proxies.
    Keys spread by crc16 modulo the servers (predixy's standalone pools)."""

    def __init__(self, pools: dict[str, dict], work: Path, cpus: str):
        self.kind = "predixy"
        self.admin_port = None
        self.procs: dict[str, Proc] = {}
        self.pool_ports: dict[str, int] = {}
        for name, pool in pools.items():
            if not pool.get("redis"):
                continue
            port = int(pool["listen"].rsplit(":", 1)[1])
            d = work / f"predixy-{port}"
            d.mkdir(parents=True, exist_ok=True)
            groups = "\n".join(
                f"    Group g{i} {{\n        + {srv}\n    }}" for i, srv in enumerate(pool["servers"]))
            (d / "predixy.conf").write_text(
                f"Name bench-{name}\nBind {pool['listen']}\nWorkerThreads 1\nClientTimeout 0\n"
                "LogVerbSample 0\nLogDebugSample 0\nLogInfoSample 0\nLogNoticeSample 1\n"
                "LogWarnSample 1\nLogErrorSample 1\n"
                "Authority {\n    Auth {\n        Mode write\n    }\n}\n"
                "StandaloneServerPool {\n    Hash crc16\n    Distribution modula\n"
                f"    RefreshMethod fixed\n{groups}\n}}\n")
            self.procs[name] = Proc([PREDIXY, str(d / "predixy.conf")], cpus, d / "stdout")
            self.pool_ports[name] = port

    def start(self) -> "Predixy":
        for name, p in self.procs.items():
            p.start([self.pool_ports[name]])
        return self

    def pids(self) -> list[int]:
        return [pid for p in self.procs.values() for pid in p.pids()]

    def stop(self) -> None:
        for p in self.procs.values():
            p.stop()


def find_counter(doc: object, name: str) -> int | None:
    """Sum of every value named `name` anywhere in a JSON document."""
    found = None
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == name and isinstance(v, (int, float)):
                found = (found or 0) + int(v)
            else:
                sub = find_counter(v, name)
                if sub is not None:
                    found = (found or 0) + sub
    elif isinstance(doc, list):
        for v in doc:
            sub = find_counter(v, name)
            if sub is not None:
                found = (found or 0) + sub
    return found
