#!/usr/bin/env python3
"""Proxy CPU per request, user and system apart: walnut (and walnut-before
with WALNUT_BEFORE), predixy and nutcracker, one at a time in front of one
redis-server, for GET and SET of 100 B and 16 KB values, pipelined and not;
and walnut (and walnut-before) against nutcracker for memcached gets of 1
and 10 keys over 3 memcached, 16 or 64 in flight per connection (`mc ...`).

Where `bench.py` runs every proxy for ~2 s per scenario with all of them
started, this runs a fixed number of requests per round with only the
measured proxy alive, rounds interleaved across the proxies, and reports the
median of the rounds: the figure it is after is CPU time, not throughput.
redis-server and redis-benchmark share CPU 0, the proxy (walnut with one
worker, predixy with one thread) is alone on CPU 1.

    python3 bench/cpu_split.py [--rounds 5] [--requests 2000000] [--out FILE] [--perf]

--perf also samples each proxy with `perf record -e cpu-clock` during the
measured run (software clock: no hardware counters needed) and adds the
part of its CPU time spent in the kernel's `finish_task_switch`, where a
process that slept (blocked in epoll_wait) is switched back in: on a virtual
machine, waking an idle CPU costs far more there than on bare metal.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import write_table  # noqa: E402
from loads import MCLOAD  # noqa: E402
from procs import (  # noqa: E402
    HOST, NUTCRACKER, PREDIXY, WALNUT, Proc, free_port, have_predixy, memcached, redis_server,
    read_calls, segments_to, sleeps, tree, user_sys_seconds,
)

# (name, redis-benchmark test, pipeline, value bytes). Each GET follows a
# SET of its value size, so that it finds values of that size (a GET on
# keys never set measures nil replies).
LOADS = [("SET", "set", 16, 100), ("GET", "get", 16, 100), ("SET", "set", 64, 100),
         ("GET", "get", 64, 100), ("SET", "set", 1, 100), ("GET", "get", 1, 100),
         ("SET", "set", 1, 16384), ("GET", "get", 1, 16384), ("SET", "set", 16, 16384),
         ("GET", "get", 16, 16384)]


def user_sys(pids: list[int]) -> tuple[float, float]:
    """utime and stime (seconds) summed over pids."""
    both = user_sys_seconds(pids).values()
    return sum(u for u, _ in both), sum(s for _, s in both)


# memcached loads: (name, keys per get, pipeline), over MC_SERVERS memcached;
# `args.requests / (2 * keys)` gets per round.
MC_LOADS = [("mc get/3 -P16", 1, 16), ("mc get/3 -P64", 1, 64), ("mc mget10/3 -P16", 10, 16)]
MC_SERVERS = 3


def start_proxy(kind: str, binary: str, backend: int | list[int], work: Path) -> tuple[Proc, int]:
    """A proxy on CPU 1 in front of `backend`: one redis-server, or a list
    of memcached."""
    memcache = isinstance(backend, list)
    port = free_port()
    d = work / f"{kind}-{port}"
    d.mkdir(parents=True)
    if kind == "predixy":
        (d / "p.conf").write_text(
            f"Name split\nBind {HOST}:{port}\nWorkerThreads 1\nClientTimeout 0\n"
            "LogVerbSample 0\nLogDebugSample 0\nLogInfoSample 0\nLogNoticeSample 1\n"
            "LogWarnSample 1\nLogErrorSample 1\nAuthority {\n    Auth {\n        Mode write\n"
            "    }\n}\nStandaloneServerPool {\n    Hash crc16\n    Distribution modula\n"
            f"    RefreshMethod fixed\n    Group g0 {{\n        + {HOST}:{backend}\n    }}\n}}\n")
        argv = [PREDIXY, str(d / "p.conf")]
    else:
        servers = backend if memcache else [backend]
        (d / "p.yml").write_text(
            f"split:\n  listen: {HOST}:{port}\n  hash: fnv1a_64\n  distribution: ketama\n"
            f"  redis: {'false' if memcache else 'true'}\n  servers:\n"
            + "".join(f"    - {HOST}:{b}:1\n" for b in servers))
        argv = [binary, "-c", str(d / "p.yml"), "-s", str(free_port()), "-o", str(d / "log")]
        if kind != "nutcracker":
            argv += ["--workers", "1", "--cpu-affinity", "none"]
    return Proc(argv, "1", d / "stdout").start([port]), port


def bench(port: int, test: str, pipeline: int, n: int, size: int) -> float:
    """redis-benchmark's requests per second."""
    out = subprocess.run(
        ["taskset", "-c", "0", "redis-benchmark", "-h", HOST, "-p", str(port), "-c", "50",
         "-n", str(n), "-r", "10000", "-d", str(size), "-t", test, "-P", str(pipeline), "-q"],
        capture_output=True, text=True, timeout=600, check=True).stdout
    line = [x for x in out.replace("\r", "\n").splitlines() if "per second" in x][-1]
    return float(line.split(":")[1].split()[0])


def mc_bench(port: int, keys: int, pipeline: int, n: int, prefill: bool = False) -> float:
    """mcload's requests per second for `n` gets of `keys` keys (each key
    stored first when `prefill`, so that gets hit)."""
    argv = ["taskset", "-c", "0", MCLOAD, "--addr", f"{HOST}:{port}", "--conns", "50",
            "--requests", str(n), "--duration", "600", "--get-ratio", "1", "--mget", str(keys),
            "--value-size", "100", "--keyspace", "10000", "--pipeline", str(pipeline)]
    if prefill:
        argv.append("--prefill")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=True).stdout
    doc = json.loads(out.strip().splitlines()[-1])
    if doc["errors"]:
        raise RuntimeError(f"mcload saw {doc['errors']} error replies")
    return float(doc["rps"])


# Where a process that slept is switched back in (see --perf).
SWITCH_IN = "finish_task_switch"


def switch_share(data: Path) -> float:
    """The fraction of the samples in `data` (a perf.data) that fell in
    SWITCH_IN."""
    out = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "sym",
                          "--stdio"], capture_output=True, text=True, check=True).stdout
    return sum(float(line.split("%")[0]) for line in out.splitlines()
               if SWITCH_IN in line and line.strip()[:1].isdigit()) / 100


def measure(kind: str, binary: str, backend: int | list[int], work: Path, warm, run,
            n: int, perf: bool = False) -> tuple[float, ...]:
    """One round of one proxy: start it, `warm` it up (connections), then
    user and system µs per request over `run`, its requests per second, its
    read calls, sleeps and data segments sent to the backend per request,
    and (`perf`) the µs per request spent switching back in after a sleep
    (else 0)."""
    ports = backend if isinstance(backend, list) else [backend]
    proxy, port = start_proxy(kind, binary, backend, work)
    data = work / f"perf-{kind}-{proxy.pid}.data"
    try:
        warm(port)
        pids = tree(proxy.pid)
        rec = subprocess.Popen(
            ["perf", "record", "-q", "-e", "cpu-clock", "-o", str(data),
             "-p", ",".join(map(str, pids))], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL) if perf else None
        u0, s0 = user_sys(pids)
        c0 = (read_calls(pids), sleeps(pids), segments_to(ports))
        rps = run(port)
        u1, s1 = user_sys(pids)
        c1 = (read_calls(pids), sleeps(pids), segments_to(ports))
        if rec:
            rec.send_signal(signal.SIGINT)
            rec.wait(timeout=60)
    finally:
        proxy.stop()
    calls = tuple((b - a) / n for a, b in zip(c0, c1))
    user, system = (u1 - u0) / n * 1e6, (s1 - s0) / n * 1e6
    switch = switch_share(data) * (user + system) if perf else 0.0
    return (user, system, rps) + calls + (switch,)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=2_000_000)
    ap.add_argument("--out", default=None, help="also write the table (Markdown) here")
    ap.add_argument("--only", default="",
                    help="loads whose name contains these (comma: all of them), e.g. P16 or 16KB,P1")
    ap.add_argument("--perf", action="store_true",
                    help="also the CPU spent switching back in after sleeps (perf record)")
    args = ap.parse_args()
    if args.perf and shutil.which("perf") is None:
        sys.exit("--perf needs perf (Debian's linux-perf)")
    peers = [("walnut", WALNUT)]
    if os.environ.get("WALNUT_BEFORE"):
        peers.append(("walnut-before", os.environ["WALNUT_BEFORE"]))
    if have_predixy():
        peers.append(("predixy", PREDIXY))
    peers.append(("nutcracker", NUTCRACKER))
    work = Path(tempfile.mkdtemp(prefix="walnut-cpu-split-"))
    backend = free_port()
    redis = redis_server(backend, work, "0")
    mcs: list[Proc] = []
    mc_ports: list[int] = []
    rows = []
    try:
        for name, test, pipeline, size in LOADS:
            load = f"{name} {size if size < 1024 else size // 1024}{'B' if size < 1024 else 'KB'} -P{pipeline}"
            if args.only and not all(w in load for w in args.only.split(",")):
                if test == "set":
                    # Still store values of this size for the GET after it.
                    bench(backend, test, 1, 20_000, size)
                continue
            n = args.requests if pipeline > 1 and size < 1024 else args.requests // 10
            got: dict[str, list[tuple[float, ...]]] = {p: [] for p, _ in peers}
            for _ in range(args.rounds):
                for kind, binary in peers:
                    got[kind].append(measure(
                        kind, binary, backend, work,
                        lambda port: bench(port, test, pipeline, max(n // 10, 1000), size),
                        lambda port: bench(port, test, pipeline, n, size), n, args.perf))
            rows += summarize(load, peers, got)
        mc_peers = [(k, b) for k, b in peers if k != "predixy"]
        for load, keys, pipeline in MC_LOADS:
            if args.only and not all(w in load for w in args.only.split(",")):
                continue
            if not mcs:
                mc_ports += [free_port() for _ in range(MC_SERVERS)]
                mcs += [memcached(p, work, "0") for p in mc_ports]
                # Every key stored once, placed as every proxy here places it.
                measure("walnut", WALNUT, mc_ports, work, lambda port: None,
                        lambda port: mc_bench(port, 1, 1, 1, prefill=True), 1)
            n = args.requests // (2 * keys)
            got = {p: [] for p, _ in mc_peers}
            for _ in range(args.rounds):
                for kind, binary in mc_peers:
                    got[kind].append(measure(
                        kind, binary, mc_ports, work,
                        lambda port: mc_bench(port, keys, pipeline, max(n // 10, 1000)),
                        lambda port: mc_bench(port, keys, pipeline, n), n, args.perf))
            rows += summarize(load, mc_peers, got)
    finally:
        redis.stop()
        for m in mcs:
            m.stop()
    write_rows(rows, args)


def summarize(load: str, peers, got) -> list[tuple]:
    """Rows of medians over the rounds, one per proxy, printed as made."""
    rows = []
    for kind, _ in peers:
        us = [g[0] for g in got[kind]]
        ss = [g[1] for g in got[kind]]
        tot = [g[0] + g[1] for g in got[kind]]
        # Every figure after user, system and req/s, as `measure` returns them.
        calls = tuple(statistics.median(g[i] for g in got[kind])
                      for i in range(3, len(got[kind][0])))
        rows.append((load, kind, statistics.median(us), statistics.median(ss),
                     statistics.median(tot), statistics.median(g[2] for g in got[kind]), tot,
                     calls))
        print(f"  {load:<14} {kind:<14} user {rows[-1][2]:.3f}  sys {rows[-1][3]:.3f}"
              f"  total {rows[-1][4]:.3f} us/req  ({rows[-1][5]:,.0f} req/s)"
              f"  reads {calls[0]:.4f} sleeps {calls[1]:.4f} to-backend {calls[2]:.4f} per req"
              f"  switch-in {calls[3]:.3f} us/req",
              flush=True)
    return rows


def write_rows(rows: list[tuple], args) -> None:
    lines = [f"Proxy CPU per request (µs), medians of {args.rounds} interleaved rounds of "
             f"{args.requests:,} requests (P1 and 16 KB values: a tenth; memcached gets of k keys: "
             f"1/2k), one proxy alive at a time, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average at end "
             f"{os.getloadavg()[0]:.2f}.", "",
             "Reads, sleeps, to backend: the proxy's read calls (`/proc/PID/io` syscr), "
             "voluntary context switches, and data segments sent to the backend (`ss -ti` "
             "data_segs_out), per request (medians). Switch-in (with --perf): µs per request "
             f"in the kernel's `{SWITCH_IN}`, switching the proxy back in after a sleep.", "",
             "| load | proxy | user | sys | total | req/s | total / walnut | walnut / best peer "
             "| reads | sleeps | to backend | switch-in |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for load in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == load]
        walnut = next(r[4] for r in mine if r[1] == "walnut")
        best = min((r[4] for r in mine if r[1] in ("predixy", "nutcracker")), default=None)
        for r in mine:
            ratio = f"{walnut / best:.2f}" if r[1] == "walnut" and best else ""
            lines.append(f"| {load} | {r[1]} | {r[2]:.3f} | {r[3]:.3f} | {r[4]:.3f} | "
                         f"{r[5]:,.0f} | {r[4] / walnut:.2f} | {ratio} | {r[7][0]:.4f} | "
                         f"{r[7][1]:.4f} | {r[7][2]:.4f} | {r[7][3]:.3f} |")
    write_table(lines, args.out)


if __name__ == "__main__":
    main()
