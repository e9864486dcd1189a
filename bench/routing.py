#!/usr/bin/env python3
"""What routing across pools costs: walnut's CPU per request through a
plain pool, through a route pool (`routes:`, the keys matching a prefix
route) and through a pool with a shadow pool (`shadow:`, every request
copied), in one run.

Two redis-servers (CPU 0): the pool's and the shadow's. One walnut (1
worker, CPU 1) with:

  plain    one server
  route    routes "key: plain-target", "* other" (redis-benchmark's keys
           all start with "key:")
  shadow   one server, shadow: a pool on the second redis-server

redis-benchmark (CPU 0, 50 persistent connections, 100 B values) runs GET
and SET at -P 1 and -P 16 against each; rounds interleaved, medians
reported. Writes results/routing.md.

    python3 bench/routing.py [--rounds 3] [--requests 200000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import loads  # noqa: E402
from procs import HOST, WALNUT, Proc, cpu_seconds, free_port, redis_server  # noqa: E402

KINDS = ["plain", "route", "shadow"]
WORKLOADS = [("GET", "get", 1), ("SET", "set", 1), ("GET", "get", 16), ("SET", "set", 16)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=200_000)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="walnut-bench-routing-"))
    main_port, shadow_port = free_port(), free_port()
    servers = [redis_server(main_port, work, "0"), redis_server(shadow_port, work, "0")]
    ports = {k: free_port() for k in KINDS}
    target = f"    - {HOST}:{main_port}:1"
    conf = [
        "plain:", f"  listen: {HOST}:{ports['plain']}", "  redis: true", "  servers:", target,
        "other:", f"  listen: {HOST}:{free_port()}", "  redis: true", "  servers:",
        f"    - {HOST}:{shadow_port}:1",
        "route:", f"  listen: {HOST}:{ports['route']}", "  redis: true", "  routes:",
        "    - \"key: plain\"", "    - \"* other\"",
        "shadow:", f"  listen: {HOST}:{ports['shadow']}", "  redis: true", "  shadow: other",
        "  servers:", target,
    ]
    (work / "walnut.yml").write_text("\n".join(conf) + "\n")
    stats_port = free_port()
    walnut = Proc([WALNUT, "-c", str(work / "walnut.yml"), "-s", str(stats_port), "-a", HOST,
                   "-o", str(work / "walnut.log"), "--workers", "1", "--cpu-affinity", "none",
                   "--admin", f"{HOST}:{free_port()}"], "1", work / "walnut.out")
    walnut.start(list(ports.values()) + [stats_port])
    results: dict[tuple, list] = {}
    try:
        for rnd in range(args.rounds):
            for name, test, pipe in WORKLOADS:
                for kind in KINDS:
                    pids = walnut.pids()
                    before = cpu_seconds(pids)
                    res = loads.redis_benchmark(ports[kind], args.requests, pipeline=pipe,
                                                test=test)
                    after = cpu_seconds(pids)
                    res["us_per_req"] = (sum(after.values()) - sum(before.values())) * 1e6 \
                        / args.requests
                    results.setdefault((name, pipe, kind), []).append(res)
                    print(f"round {rnd + 1} {name} P{pipe} {kind}: {res['rps']:.0f} rps, "
                          f"{res['us_per_req']:.2f} us/req", flush=True)
    finally:
        walnut.stop()
        for s in servers:
            s.stop()

    med = statistics.median
    lines = [
        "# Routing across pools: what it costs",
        "",
        f"`python3 bench/routing.py --rounds {args.rounds} --requests {args.requests}`: "
        "redis-servers on CPU 0, walnut with 1 worker on CPU 1, redis-benchmark on CPU 0 "
        "with 50 connections and 100 B values; medians of interleaved rounds. CPU: walnut's "
        "utime+stime per client request (the shadow pool's copies included).",
        "",
        "| workload | pool | rps | walnut µs/req | CPU vs plain | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, _test, pipe in WORKLOADS:
        base = med([r["us_per_req"] for r in results[(name, pipe, "plain")]])
        for kind in KINDS:
            rs = results[(name, pipe, kind)]
            cpu = med([r["us_per_req"] for r in rs])
            lines.append(
                f"| {name} P{pipe} | {kind} | {med([r['rps'] for r in rs]):,.0f} | {cpu:.2f} | "
                f"{cpu / base:.2f}× | {med([r['p50'] or 0 for r in rs]):.3f} | "
                f"{med([r['p99'] or 0 for r in rs]):.3f} |")
    out = HERE / "results" / "routing.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
