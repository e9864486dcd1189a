"""A fleet of walnuts for the end-to-end tests: an etcd of their own (on free
loopback ports, its own data directory, stopped by pid), instances started
with ``--etcd``/``--fleet``, and ``walnut fleet`` run as a command.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Sequence

from procmodel import children, state_of
from procs import HOST, ManagedProcess, can_connect, free_port, to_yaml, walnut_bin, _ALLOCATED_PORTS

ETCD_BIN = os.environ.get("ETCD_BIN", shutil.which("etcd") or "/usr/bin/etcd")


class Etcd(ManagedProcess):
    """A single-member etcd on 127.0.0.1; ``start`` again after ``stop``
    brings it back on the same ports and data."""

    def __init__(self, workdir: Path):
        self.port = free_port()
        self.peer_port = free_port()
        workdir = Path(workdir) / f"etcd-{self.port}"
        data = workdir / "data"
        peer = f"http://{HOST}:{self.peer_port}"
        argv = [
            ETCD_BIN, "--name", "e2e", "--data-dir", str(data),
            "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"e2e={peer}", "--log-level", "warn",
        ]
        super().__init__("etcd", argv, workdir, workdir / "etcd.stdout")

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=1) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def start(self) -> "Etcd":
        if not os.access(ETCD_BIN, os.X_OK):
            raise RuntimeError(f"etcd not found at {ETCD_BIN} (apt-get install etcd-server)")
        super().start()
        self.wait_ready([self.port])
        deadline = time.monotonic() + 20
        while not self.healthy():
            if not self.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"etcd not healthy\n{self.output_tail()}")
            time.sleep(0.05)
        return self


def port_offset(base: int) -> int:
    """An offset N such that base+N is a free port (and marked taken)."""
    for n in range(1, 2000):
        p = base + n
        if p > 65535 or p in _ALLOCATED_PORTS:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, p))
            except OSError:
                continue
        _ALLOCATED_PORTS.add(p)
        return n
    raise RuntimeError("no free port above the base")


def fleet_cmd(etcd: Etcd, fleet: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """``walnut fleet --etcd URL --fleet NAME ARGS``."""
    return subprocess.run(
        [walnut_bin(), "fleet", "--etcd", etcd.url, "--fleet", fleet, *args],
        capture_output=True, text=True, timeout=timeout,
    )


def apply(etcd: Etcd, fleet: str, workdir: Path, pools: dict, wait: float | None = None) -> subprocess.CompletedProcess:
    """Publish ``pools`` as the fleet's configuration."""
    path = Path(workdir) / f"fleet-{fleet}-{time.monotonic_ns()}.yml"
    path.write_text(to_yaml(pools))
    args = ["apply", str(path)]
    if wait is not None:
        args += ["--wait", str(wait)]
    return fleet_cmd(etcd, fleet, *args)


def status(etcd: Etcd, fleet: str) -> dict:
    r = fleet_cmd(etcd, fleet, "status", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


class Member(ManagedProcess):
    """A walnut of a fleet: its configuration from etcd, its pools moved by
    ``offset`` ports, its own stats and admin ports and fleet directory."""

    def __init__(self, workdir: Path, etcd_urls: str, fleet: str, member: str,
                 base_ports: Sequence[int], offset: int = 0, ttl: int = 2, extra: Sequence[str] = ()):
        self.member = member
        self.stats_port = free_port()
        self.admin_port = free_port()
        self.ports = [p + offset for p in base_ports]
        self.dir = Path(workdir) / f"member-{fleet}-{member}"
        self.dir.mkdir(parents=True, exist_ok=True)
        log = self.dir / "walnut.log"
        argv = [
            walnut_bin(), "--etcd", etcd_urls, "--fleet", fleet, "--fleet-id", member,
            "--fleet-dir", str(self.dir), "--fleet-ttl", str(ttl),
            "-s", str(self.stats_port), "-a", HOST, "--admin", f"{HOST}:{self.admin_port}",
            "-o", str(log), "--port-offset", str(offset), *extra,
        ]
        super().__init__(f"walnut-{member}", argv, self.dir, log)

    def start(self) -> "Member":
        super().start()
        self.wait_ready([*self.ports, self.stats_port, self.admin_port])
        return self

    def admin(self, command: str, timeout: float = 5.0) -> str:
        with socket.create_connection((HOST, self.admin_port), timeout=timeout) as s:
            s.sendall(command.encode() + b"\r\nquit\r\n")
            out = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                out += d
        return out.decode()

    def agent_pid(self) -> int:
        """The pid of this member's fleet agent (a child of its master,
        titled "walnut: fleet agent")."""
        for pid in children(self.pid):
            try:
                if b"fleet agent" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
            except OSError:
                continue
        raise AssertionError(f"member {self.member} has no fleet agent")

    def freeze_agent(self) -> int:
        """SIGSTOP the fleet agent and wait until the kernel says it is
        stopped: the member then publishes nothing and reloads nothing
        new, as a member slow to take a change. Returns its pid."""
        pid = self.agent_pid()
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: state_of(pid) in ("T", "t", None), 5, "the fleet agent stopped", step=0.005)
        return pid

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://{HOST}:{self.admin_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def revision(self) -> int:
        for line in self.metrics().splitlines():
            if line.startswith("walnut_fleet_config_revision{"):
                return int(line.rsplit(" ", 1)[1])
        raise AssertionError("no walnut_fleet_config_revision in /metrics")


def wait_for(pred, timeout: float, what: str, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


__all__ = ["Etcd", "Member", "apply", "status", "fleet_cmd", "port_offset", "wait_for", "can_connect"]
