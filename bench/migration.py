#!/usr/bin/env python3
"""Online scale-out under load: how long the background migrator takes to
move a pool's keys after a server is added, and what clients and servers
pay meanwhile, next to the same load without a migration.

Redis (3 redis-servers, CPU 1) behind walnut (2 workers, CPU 1; the load,
redis-benchmark GET over the whole key space with 50 persistent clients, on
CPU 0). K keys of 100 bytes are loaded through walnut on 2 servers; then:

  steady     rounds of the load on the 2 servers, no migration
  migrating  the same rounds from the reload that adds the third server
             until the migrator reports done

Per phase: medians over rounds of client p50/p99 (ms) and requests per
second, and the redis-servers' CPU per 1000 client requests (utime+stime
from /proc, which includes the migrator's DUMP/RESTORE/DEL). Also: time from
the reload to the migration's end, keys moved, keys per second. Writes
results/migration.md.

    python3 bench/migration.py [--keys 1000000] [--rate 1000] [--round 100000]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from loads import redis_benchmark  # noqa: E402
from procs import HOST, WALNUT, Proc, cpu_seconds, free_port, redis_server  # noqa: E402

SERVER_CPU = "1"


def admin(port: int, line: str) -> str:
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(line.encode() + b"\r\nquit\r\n")
        buf = b""
        while chunk := s.recv(65536):
            buf += chunk
    return buf.decode()


def migration_state(port: int) -> dict[str, str]:
    for line in admin(port, "migration").splitlines():
        kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if kv.get("pool") == "rd" and "source" not in kv:
            return kv
    return {}


def conf(listen: int, servers: list[int], rate: int) -> str:
    lines = ["rd:", f"  listen: {HOST}:{listen}", "  hash: fnv1a_64", "  distribution: ketama",
             "  redis: true", "  timeout: 5000", "  migration: true", f"  migration_rate: {rate}",
             "  servers:"]
    lines += [f"    - {HOST}:{p}:1" for p in servers]
    return "\n".join(lines) + "\n"


def load_keys(port: int, keys: int) -> None:
    """SET key:%012d (redis-benchmark's -r names) with 100-byte values, in
    one pipe through walnut."""
    val = b"v" * 100
    chunks = []
    for i in range(keys):
        k = b"key:%012d" % i
        chunks.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$100\r\n%s\r\n" % (len(k), k, val))
    data = b"".join(chunks)
    out = subprocess.run(["redis-cli", "-h", HOST, "-p", str(port), "--pipe"], input=data,
                         capture_output=True, timeout=900, check=True)
    if b"errors: 0" not in out.stdout:
        raise RuntimeError(out.stdout.decode()[-500:])


def phase(walnut_port: int, servers: list[Proc], keys: int, round_n: int,
          until) -> list[dict]:
    """Rounds of load until `until()` says stop; per round the client's
    figures and the servers' CPU per 1000 requests."""
    rows = []
    while True:
        pids = [s.pid for s in servers]
        c0 = sum(cpu_seconds(pids).values())
        r = redis_benchmark(walnut_port, round_n, clients=50, test="get", keyspace=keys)
        c1 = sum(cpu_seconds(pids).values())
        r["server_cpu_ms_per_1k"] = (c1 - c0) * 1000 / round_n * 1000
        rows.append(r)
        if until(len(rows)):
            return rows


def med(rows: list[dict], k: str) -> float:
    vals = [r[k] for r in rows if r.get(k) is not None]
    return statistics.median(vals) if vals else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=1000, help="migration_rate (walnut's default 1000)")
    ap.add_argument("--round", type=int, default=100_000, help="requests per load round")
    ap.add_argument("--steady-rounds", type=int, default=5)
    ap.add_argument("--no-load", action="store_true",
                    help="no client load during the migration: the migrator alone moves every key")
    ap.add_argument("--out", default=str(HERE / "results" / "migration.md"))
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="walnut-bench-mig-"))
    ports = [free_port() for _ in range(3)]
    servers: list[Proc] = []
    walnut = None
    try:
        servers = [redis_server(p, work, SERVER_CPU) for p in ports]
        listen, stats, adm = free_port(), free_port(), free_port()
        cfg = work / "walnut.yml"
        cfg.write_text(conf(listen, ports[:2], args.rate))
        walnut = Proc([WALNUT, "-c", str(cfg), "-s", str(stats), "-o", str(work / "walnut.log"),
                       "--workers", "2", "--cpu-affinity", "none", "--admin", f"{HOST}:{adm}"],
                      SERVER_CPU, work / "walnut.stdout").start([listen, adm])
        t = time.monotonic()
        load_keys(listen, args.keys)
        print(f"loaded {args.keys} keys in {time.monotonic() - t:.1f} s", flush=True)

        steady = phase(listen, servers, args.keys, args.round,
                       lambda n: n >= args.steady_rounds)
        print(f"steady: p50 {med(steady, 'p50')} p99 {med(steady, 'p99')} ms", flush=True)

        cfg.write_text(conf(listen, ports, args.rate))
        t0 = time.monotonic()
        os.kill(walnut.pid, signal.SIGHUP)
        done_at: list[float] = []

        def finished(_n: int) -> bool:
            st = migration_state(adm)
            if st.get("state") == "done":
                done_at.append(time.monotonic())
                return True
            return False

        if args.no_load:
            while not finished(0):
                time.sleep(0.5)
            migrating = []
        else:
            migrating = phase(listen, servers, args.keys, args.round, finished)
        st = migration_state(adm)
        secs = done_at[0] - t0 if done_at else float("nan")
        print(f"migration: {st}", flush=True)
        dbsizes = [int(subprocess.run(["redis-cli", "-h", HOST, "-p", str(p), "dbsize"],
                                      capture_output=True, check=True).stdout) for p in ports]
    finally:
        if walnut:
            walnut.stop()
        for s in servers:
            s.stop()

    lines = [
        "# Online scale-out under load (bench/migration.py)",
        "",
        f"{args.keys} keys of 100 B on 2 redis-servers behind walnut (2 workers); a reload adds a",
        f"third server; `migration_rate: {args.rate}`. Load: redis-benchmark GET, 50 clients,",
        f"{args.round} requests per round, uniformly over the key space (CPU 0; servers and",
        "walnut on CPU 1). Medians over rounds.",
        "",
        "| phase | rounds | rps | p50 ms | p99 ms | servers' CPU ms / 1k requests |",
        "|---|---|---|---|---|---|",
    ]
    for name, rows in (("steady", steady), ("migrating", migrating)):
        if not rows:
            lines.append(f"| {name} | no load (--no-load) | | | | |")
            continue
        lines.append(f"| {name} | {len(rows)} | {med(rows, 'rps'):.0f} | {med(rows, 'p50'):.3f} | "
                     f"{med(rows, 'p99'):.3f} | {med(rows, 'server_cpu_ms_per_1k'):.3f} |")
    lines += [
        "",
        f"Migration: {secs:.1f} s from the reload to `state=done` (the last round ends after it);",
        f"scanned {st.get('scanned')}, moved {st.get('moved')}, skipped {st.get('skipped')}, "
        f"failed {st.get('failed')}, {st.get('keys_per_second')} keys/s moved.",
        f"Keys per server afterwards: {dbsizes} (sum {sum(dbsizes)}).",
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
