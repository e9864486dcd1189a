#!/usr/bin/env python3
"""Latency a client sees while it is handed over: a reload (HUP) and a hot
upgrade (USR2 then QUIT) under load, next to the same load without one.

memcached (CPU 0) behind walnut with 2 workers; C persistent clients in
threads send get/set 1:1 without pause, each request timed. Three runs of
the same length per round: steady, a HUP in the middle, a USR2 + QUIT in the
middle. Reported per run: requests, errors, reconnects, p50/p99/p99.9/max
(ms), and the same over the 1 s window around the event; medians over
rounds. Writes results/handover.md.

    python3 bench/handover.py [--rounds 3] [--seconds 4] [--clients 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from procs import children_of, free_port, wait_port  # noqa: E402


def pct(v: list[float], q: float) -> float:
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


class Load:
    def __init__(self, port: int, clients: int, seconds: float):
        self.port, self.seconds = port, seconds
        self.samples: list[tuple[float, float]] = []  # (start, latency ms)
        self.errors = 0
        self.reconnects = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(clients)]

    def run(self, i: int) -> None:
        key = b"hk%d" % i
        val = b"x" * 100
        set_req = b"set %s 0 0 %d\r\n%s\r\n" % (key, len(val), val)
        get_req = b"get %s\r\n" % key
        s = socket.create_connection(("127.0.0.1", self.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        local: list[tuple[float, float]] = []
        end = time.monotonic() + self.seconds
        n = 0
        while time.monotonic() < end:
            req, want = (set_req, b"STORED\r\n") if n % 2 == 0 else (get_req, b"END\r\n")
            n += 1
            t0 = time.monotonic()
            try:
                s.sendall(req)
                buf = b""
                while not buf.endswith(want):
                    chunk = s.recv(4096)
                    if not chunk:
                        raise ConnectionError("closed")
                    buf += chunk
            except OSError:
                with self.lock:
                    self.errors += 1
                    self.reconnects += 1
                s.close()
                s = socket.create_connection(("127.0.0.1", self.port))
                continue
            local.append((t0, (time.monotonic() - t0) * 1000))
        s.close()
        with self.lock:
            self.samples.extend(local)

    def start(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def join(self) -> None:
        for t in self.threads:
            t.join()


def one_run(binary: Path, mc_port: int, work: Path, clients: int, seconds: float, event: str) -> dict:
    port, stats = free_port(), free_port()
    conf = work / f"walnut-{event}.yml"
    conf.write_text(
        "pool:\n"
        f"  listen: 127.0.0.1:{port}\n"
        "  hash: fnv1a_64\n  distribution: ketama\n  timeout: 2000\n"
        f"  servers:\n    - 127.0.0.1:{mc_port}:1\n"
        "_walnut:\n  workers: 2\n  cpu_affinity: auto\n"
    )
    log = work / f"walnut-{event}.log"
    proc = subprocess.Popen([str(binary), "-c", str(conf), "-s", str(stats), "-o", str(log)])
    masters = [proc.pid]
    try:
        wait_port(port, proc)
        load = Load(port, clients, seconds).start()
        time.sleep(seconds / 2)
        at = time.monotonic()
        if event == "reload":
            conf.write_text(conf.read_text().replace("timeout: 2000", "timeout: 2500"))
            os.kill(proc.pid, signal.SIGHUP)
        elif event == "upgrade":
            old_kids = set(children_of(proc.pid))
            os.kill(proc.pid, signal.SIGUSR2)
            deadline = time.monotonic() + 5
            new = None
            while time.monotonic() < deadline and new is None:
                new = next((k for k in children_of(proc.pid) if k not in old_kids), None)
                time.sleep(0.005)
            if new is not None:
                masters.append(new)
                while time.monotonic() < deadline and "is ready" not in log.read_text():
                    time.sleep(0.005)
            at = time.monotonic()
            os.kill(proc.pid, signal.SIGQUIT)
        load.join()
    finally:
        for m in masters:
            try:
                os.kill(m, signal.SIGTERM)
            except ProcessLookupError:
                pass
        proc.wait(timeout=10)
        for m in masters[1:]:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and os.path.exists(f"/proc/{m}"):
                time.sleep(0.01)
    lat = [l for _, l in load.samples]
    near = [l for t0, l in load.samples if at - 0.5 <= t0 <= at + 0.5]
    return {
        "requests": len(lat), "errors": load.errors, "reconnects": load.reconnects,
        "p50": pct(lat, 0.5), "p99": pct(lat, 0.99), "p999": pct(lat, 0.999), "max": max(lat, default=0),
        "near_p99": pct(near, 0.99), "near_max": max(near, default=0), "near_n": len(near),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--out", default=str(HERE / "results" / "handover.md"))
    args = ap.parse_args()
    binary = Path(os.environ.get("WALNUT_BIN", ROOT / "target" / "release" / "walnut"))
    work = Path(tempfile.mkdtemp(prefix="walnut-handover-"))
    # The upgrade execs the binary again: a private copy keeps it stable.
    shutil.copy2(binary, work / "walnut")
    binary = work / "walnut"
    mc_port = free_port()
    mc = subprocess.Popen(["taskset", "-c", "0", "memcached", "-u", "root", "-l", "127.0.0.1",
                           "-p", str(mc_port), "-U", "0", "-t", "1"])
    rows: dict[str, list[dict]] = {"steady": [], "reload": [], "upgrade": []}
    try:
        wait_port(mc_port, mc)
        for _ in range(args.rounds):
            for event in rows:
                rows[event].append(one_run(binary, mc_port, work, args.clients, args.seconds, event))
    finally:
        mc.terminate()
        mc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    med = lambda runs, k: statistics.median(r[k] for r in runs)  # noqa: E731
    lines = [
        f"# Latency through a reload and an upgrade ({args.clients} persistent clients, "
        f"memcached get/set 1:1, {args.seconds:g} s per run, medians of {args.rounds} rounds)",
        "",
        "| run | requests | errors | reconnects | p50 ms | p99 ms | p99.9 ms | max ms | "
        "±0.5 s around the event: p99 ms | max ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for event, runs in rows.items():
        lines.append(
            f"| {event} | {med(runs, 'requests'):.0f} | {sum(r['errors'] for r in runs)} | "
            f"{sum(r['reconnects'] for r in runs)} | {med(runs, 'p50'):.3f} | {med(runs, 'p99'):.3f} | "
            f"{med(runs, 'p999'):.3f} | {med(runs, 'max'):.2f} | {med(runs, 'near_p99'):.3f} | "
            f"{med(runs, 'near_max'):.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


if __name__ == "__main__":
    main()
