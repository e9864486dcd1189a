#!/usr/bin/env python3
"""What TLS costs through walnut: CPU per request and throughput with TLS
on the client side, on the server side and on both, next to plain TCP, in
one run.

One redis-server (CPU 0) serves a plain port and a TLS port. One walnut
(1 worker, CPU 1) has four pools in front of it:

  plain    plain listener, plain server connection
  client   TLS listener (redis-benchmark --tls), plain server connection
  server   plain listener, TLS to the server
  both     TLS on both sides

redis-benchmark (CPU 0, 50 persistent connections, 100 B values) runs GET
and SET at -P 1 and -P 16 against each pool; rounds are interleaved and
medians reported. Proxy CPU is utime+stime of walnut's master and worker
from /proc, in microseconds per request. Certificates are made with
openssl in a temporary directory. Writes results/tls.md.

    python3 bench/tls.py [--rounds 3] [--requests 200000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import loads  # noqa: E402
from procs import HOST, WALNUT, Proc, cpu_seconds, free_port  # noqa: E402

SIDES = ["plain", "client", "server", "both"]
WORKLOADS = [("GET", "get", 1), ("SET", "set", 1), ("GET", "get", 16), ("SET", "set", 16)]


def make_certs(d: Path) -> None:
    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=bench CA")
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=localhost")
    (d / "ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "ext")


def bench_tls(port: int, n: int, pipeline: int, test: str, tls: bool, ca: Path) -> dict:
    """redis-benchmark, with --tls when the listener speaks it."""
    if not tls:
        return loads.redis_benchmark(port, n, pipeline=pipeline, test=test)
    argv = ["--tls", "--cacert", str(ca)]
    return loads.redis_benchmark(port, n, pipeline=pipeline, test=test,
                                 command=argv + ["-t", test])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=200_000)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="walnut-bench-tls-"))
    make_certs(work)
    plain_port, tls_port = free_port(), free_port()
    (work / "redis").mkdir()
    redis = Proc(["redis-server", "--port", str(plain_port), "--bind", HOST, "--save", "",
                  "--appendonly", "no", "--dir", str(work / "redis"),
                  "--tls-port", str(tls_port), "--tls-cert-file", str(work / "server.crt"),
                  "--tls-key-file", str(work / "server.key"),
                  "--tls-ca-cert-file", str(work / "ca.crt"), "--tls-auth-clients", "no"],
                 "0", work / "redis.log").start([plain_port, tls_port])
    ports = {s: free_port() for s in SIDES}
    conf = []
    for side in SIDES:
        listen_tls = side in ("client", "both")
        server_tls = side in ("server", "both")
        conf += [f"{side}:", f"  listen: {HOST}:{ports[side]}", "  redis: true",
                 "  hash: fnv1a_64", "  distribution: ketama"]
        if listen_tls:
            conf += [f"  tls_cert: {work / 'server.crt'}", f"  tls_key: {work / 'server.key'}"]
        if server_tls:
            conf += ["  server_tls: true", f"  server_tls_ca: {work / 'ca.crt'}"]
        conf += ["  servers:", f"    - {HOST}:{tls_port if server_tls else plain_port}:1"]
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
                for side in SIDES:
                    pids = walnut.pids()
                    before = cpu_seconds(pids)
                    res = bench_tls(ports[side], args.requests, pipe, test,
                                    side in ("client", "both"), work / "ca.crt")
                    after = cpu_seconds(pids)
                    cpu = sum(after.values()) - sum(before.values())
                    res["us_per_req"] = cpu * 1e6 / args.requests
                    results.setdefault((name, pipe, side), []).append(res)
                    print(f"round {rnd + 1} {name} P{pipe} {side}: {res['rps']:.0f} rps, "
                          f"{res['us_per_req']:.2f} us/req", flush=True)
    finally:
        walnut.stop()
        redis.stop()

    med = lambda xs: statistics.median(xs)  # noqa: E731
    lines = [
        "# TLS through walnut",
        "",
        f"`python3 bench/tls.py --rounds {args.rounds} --requests {args.requests}`: one "
        "redis-server (CPU 0, plain and TLS ports), walnut with 1 worker (CPU 1), "
        "redis-benchmark on CPU 0 with 50 connections and 100 B values; medians of "
        f"{args.rounds} interleaved rounds. CPU: walnut's utime+stime per request.",
        "",
        "| workload | TLS on | rps | walnut µs/req | CPU vs plain | rps vs plain | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, _test, pipe in WORKLOADS:
        base = results[(name, pipe, "plain")]
        base_cpu = med([r["us_per_req"] for r in base])
        base_rps = med([r["rps"] for r in base])
        for side in SIDES:
            rs = results[(name, pipe, side)]
            cpu, rps = med([r["us_per_req"] for r in rs]), med([r["rps"] for r in rs])
            p50 = med([r["p50"] for r in rs if r["p50"] is not None] or [0])
            p99 = med([r["p99"] for r in rs if r["p99"] is not None] or [0])
            label = {"plain": "none", "client": "clients", "server": "servers",
                     "both": "both"}[side]
            lines.append(f"| {name} P{pipe} | {label} | {rps:,.0f} | {cpu:.2f} | "
                         f"{cpu / base_cpu:.2f}× | {rps / base_rps:.2f}× | {p50:.3f} | {p99:.3f} |")
    out = HERE / "results" / "tls.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
