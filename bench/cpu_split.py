#!/usr/bin/env python3
"""Proxy CPU per request, user and system apart: walnut (and walnut-before
with WALNUT_BEFORE), predixy and nutcracker, one at a time in front of one
redis-server, for GET and SET of 100 B and 16 KB values, pipelined and not.

Where `bench.py` runs every proxy for ~2 s per scenario with all of them
started, this runs a fixed number of requests per round with only the
measured proxy alive, rounds interleaved across the proxies, and reports the
median of the rounds: the figure it is after is CPU time, not throughput.
redis-server and redis-benchmark share CPU 0, the proxy (walnut with one
worker, predixy with one thread) is alone on CPU 1.

    python3 bench/cpu_split.py [--rounds 5] [--requests 2000000] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import write_table  # noqa: E402
from procs import (  # noqa: E402
    HOST, NUTCRACKER, PREDIXY, WALNUT, Proc, free_port, have_predixy, redis_server, tree,
    user_sys_seconds,
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


def start_proxy(kind: str, binary: str, backend: int, work: Path) -> tuple[Proc, int]:
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
        (d / "p.yml").write_text(
            f"split:\n  listen: {HOST}:{port}\n  hash: fnv1a_64\n  distribution: ketama\n"
            f"  redis: true\n  servers:\n    - {HOST}:{backend}:1\n")
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=2_000_000)
    ap.add_argument("--out", default=None, help="also write the table (Markdown) here")
    ap.add_argument("--only", default="",
                    help="loads whose name contains these (comma: all of them), e.g. P16 or 16KB,P1")
    args = ap.parse_args()
    peers = [("walnut", WALNUT)]
    if os.environ.get("WALNUT_BEFORE"):
        peers.append(("walnut-before", os.environ["WALNUT_BEFORE"]))
    if have_predixy():
        peers.append(("predixy", PREDIXY))
    peers.append(("nutcracker", NUTCRACKER))
    work = Path(tempfile.mkdtemp(prefix="walnut-cpu-split-"))
    backend = free_port()
    redis = redis_server(backend, work, "0")
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
            got: dict[str, list[tuple[float, float, float]]] = {p: [] for p, _ in peers}
            for _ in range(args.rounds):
                for kind, binary in peers:
                    proxy, port = start_proxy(kind, binary, backend, work)
                    try:
                        bench(port, test, pipeline, max(n // 10, 1000), size)  # connections, warm-up
                        pids = tree(proxy.pid)
                        u0, s0 = user_sys(pids)
                        rps = bench(port, test, pipeline, n, size)
                        u1, s1 = user_sys(pids)
                    finally:
                        proxy.stop()
                    got[kind].append(((u1 - u0) / n * 1e6, (s1 - s0) / n * 1e6, rps))
            for kind, _ in peers:
                us = [g[0] for g in got[kind]]
                ss = [g[1] for g in got[kind]]
                tot = [g[0] + g[1] for g in got[kind]]
                rows.append((load, kind, statistics.median(us), statistics.median(ss),
                             statistics.median(tot), statistics.median(g[2] for g in got[kind]),
                             tot))
                print(f"  {load:<14} {kind:<14} user {rows[-1][2]:.3f}  sys {rows[-1][3]:.3f}"
                      f"  total {rows[-1][4]:.3f} us/req  ({rows[-1][5]:,.0f} req/s)", flush=True)
    finally:
        redis.stop()
    lines = [f"Proxy CPU per request (µs), medians of {args.rounds} interleaved rounds of "
             f"{args.requests:,} requests (P1 and 16 KB values: a tenth), one proxy alive at a time, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average at end "
             f"{os.getloadavg()[0]:.2f}.", "",
             "| load | proxy | user | sys | total | req/s | total / walnut | walnut / best peer |",
             "|---|---|---|---|---|---|---|---|"]
    for load in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == load]
        walnut = next(r[4] for r in mine if r[1] == "walnut")
        best = min((r[4] for r in mine if r[1] in ("predixy", "nutcracker")), default=None)
        for r in mine:
            ratio = f"{walnut / best:.2f}" if r[1] == "walnut" and best else ""
            lines.append(f"| {load} | {r[1]} | {r[2]:.3f} | {r[3]:.3f} | {r[4]:.3f} | "
                         f"{r[5]:,.0f} | {r[4] / walnut:.2f} | {ratio} |")
    write_table(lines, args.out)


if __name__ == "__main__":
    main()
