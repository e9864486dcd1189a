#!/usr/bin/env python3
"""What one pull costs its request: a SET (`--op set`) of a key whose
owner changed (pulled from its old owner on first access, the old copy
deleted before the SET runs) against a SET of a key that did not move,
one request at a time on one connection, no other load. With `--op get`
(the default), GETs: a GET of a moved key is read where the key is (old
owner first, then the new one) and moves nothing, so every key stays
where it was and all GETs are counted together ("not moved"); compare
them with a binary that pulls on a GET.

K keys of 100 bytes on 2 redis-servers behind walnut (1 worker,
`migration: true`, `migration_rate: 1`: the migrator moves about one key a
second, so the clients' requests pull the moved keys themselves); a reload
adds a third server; then every key is read once, in order, and timed.
A key found on the new server afterwards was pulled by its GET (the few
the migrator moved meanwhile are counted with them). Servers and walnut
on CPU 1, the client on CPU 0. With several binaries (WALNUT_BINS, a
comma-separated list of name=path), they alternate, `--repeats` each.

    python3 bench/pull_latency.py [--keys 20000] [--repeats 3] [--op get|set]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from migration import admin, cli, conf, load_keys, migration_state  # noqa: E402
from procs import HOST, WALNUT, Proc, free_port, redis_server  # noqa: E402

SERVER_CPU = "1"


def get_times(port: int, keys: int, op: str = "get") -> list[float]:
    """Each key read (or written) once, in order: seconds per request."""
    out = []
    value = b"w" * 100
    want, head = (107, b"$100\r\n") if op == "get" else (5, b"+OK\r\n")
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(keys):
            k = b"key:%012d" % i
            if op == "get":
                req = b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(k), k)
            else:
                req = b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$100\r\n%s\r\n" % (len(k), k, value)
            t = time.perf_counter()
            s.sendall(req)
            buf = b""
            # $100\r\n + 100 bytes + \r\n, or +OK\r\n
            while len(buf) < want:
                chunk = s.recv(4096)
                if not chunk:
                    raise RuntimeError("closed")
                buf += chunk
            out.append(time.perf_counter() - t)
            if not buf.startswith(head):
                raise RuntimeError(f"{k!r}: {buf[:60]!r}")
    return out


def one(binary: str, keys: int, op: str) -> dict:
    work = Path(tempfile.mkdtemp(prefix="walnut-bench-pull-"))
    ports = [free_port() for _ in range(3)]
    servers: list[Proc] = []
    walnut = None
    try:
        servers = [redis_server(p, work, SERVER_CPU) for p in ports]
        listen, stats, adm = free_port(), free_port(), free_port()
        cfg = work / "walnut.yml"
        cfg.write_text(conf(listen, ports[:2], 1))
        walnut = Proc([binary, "-c", str(cfg), "-s", str(stats), "-o", str(work / "walnut.log"),
                       "--workers", "1", "--cpu-affinity", "none", "--admin", f"{HOST}:{adm}"],
                      SERVER_CPU, work / "walnut.stdout").start([listen, adm])
        load_keys(listen, keys)
        cfg.write_text(conf(listen, ports, 1))
        os.kill(walnut.pid, signal.SIGHUP)
        deadline = time.monotonic() + 30
        while migration_state(adm).get("state") != "running":
            if time.monotonic() > deadline:
                raise RuntimeError(admin(adm, "migration"))
            time.sleep(0.05)
        os.sched_setaffinity(0, {0})
        times = get_times(listen, keys, op)
        on_new = set()
        for k in cli(ports[2], "--scan", "--pattern", "key:*").split():
            on_new.add(int(k.split(":")[1]))
    finally:
        if walnut:
            walnut.stop()
        for s in servers:
            s.stop()
    pulled = [t for i, t in enumerate(times) if i in on_new]
    stayed = [t for i, t in enumerate(times) if i not in on_new]
    q = lambda v, p: sorted(v)[int(p * (len(v) - 1))] * 1e6 if v else float("nan")  # noqa: E731
    return {"pulled": len(pulled), "stayed": len(stayed),
            "pulled_p50": q(pulled, 0.5), "pulled_p99": q(pulled, 0.99),
            "stayed_p50": q(stayed, 0.5), "stayed_p99": q(stayed, 0.99)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--op", choices=["get", "set"], default="get")
    args = ap.parse_args()
    bins = [b.split("=", 1) for b in os.environ.get("WALNUT_BINS", f"walnut={WALNUT}").split(",")]
    got: dict[str, list[dict]] = {n: [] for n, _ in bins}
    for r in range(args.repeats):
        for name, path in bins:
            res = one(path, args.keys, args.op)
            got[name].append(res)
            print(f"{name} {r + 1}: {res} load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"\n{args.op.upper()}s, one at a time:\n")
    print(f"| binary | {args.op.upper()}s that pulled | pulled p50 µs | pulled p99 µs | not moved p50 µs | "
          "not moved p99 µs | pulled p50 − not moved p50 |")
    print("|---|---|---|---|---|---|---|")
    for name, rs in got.items():
        m = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        print(f"| {name} | {m('pulled'):.0f} | {m('pulled_p50'):.0f} | {m('pulled_p99'):.0f} | "
              f"{m('stayed_p50'):.0f} | {m('stayed_p99'):.0f} | "
              f"{m('pulled_p50') - m('stayed_p50'):.0f} |")


if __name__ == "__main__":
    main()
