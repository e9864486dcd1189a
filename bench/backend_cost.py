#!/usr/bin/env python3
"""What a proxy costs the machines around it: unpipelined memcached load
(bench/loadgen, 50 connections, 9 gets : 1 set) through walnut and
nutcracker, one at a time, with per request:

- the proxy's CPU (user + system) and its voluntary context switches (the
  times it slept in epoll_wait);
- memcached's CPU and the load generator's CPU: they share CPU 0 and, when
  it is saturated, their cost per request sets the throughput;
- TCP data segments per direction (client->proxy, proxy->memcached,
  memcached->proxy, proxy->client), from `ss -ti` on the connections
  before and after a one-second window in the middle of the run.

Requests are counted exactly in the window from memcached's `cmd_get` +
`cmd_set`. memcached and the load generator run on CPU 0, the proxy (one
walnut worker, or nutcracker) on CPU 1; rounds are interleaved.

    python3 bench/backend_cost.py [--rounds 5] [--size 100] [--out FILE]
"""

from __future__ import annotations

import argparse
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import write_table  # noqa: E402
import loads  # noqa: E402
from procs import HOST, Proxy, free_port, memcached, sleeps, user_sys_seconds  # noqa: E402

WINDOW = 1.0


def segments() -> dict[tuple[str, str], int]:
    """data_segs_out of every established TCP connection, by (local, peer)."""
    out = subprocess.run(["ss", "-tinH", "state", "established"], capture_output=True,
                         text=True, check=True).stdout
    found, cur = {}, None
    for line in out.splitlines():
        if line[:1] not in (" ", "\t"):
            f = line.split()
            cur = (f[2], f[3]) if len(f) >= 4 else None
            continue
        m = re.search(r"data_segs_out:(\d+)", line)
        if cur:
            found[cur] = int(m.group(1)) if m else 0
    return found


def mc_requests(port: int) -> int:
    with socket.create_connection((HOST, port), timeout=5) as c:
        c.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            data += c.recv(65536)
    st = dict(line.split()[1:3] for line in data.decode().splitlines() if line.startswith("STAT"))
    return int(st["cmd_get"]) + int(st["cmd_set"])


def role(key: tuple[str, str], listen: int, backend: int) -> str | None:
    local, peer = (int(a.rsplit(":", 1)[1]) for a in key)
    return {listen: "proxy->client", backend: "memcached->proxy"}.get(local) or \
        {listen: "client->proxy", backend: "proxy->memcached"}.get(peer)


def one_run(proxy: Proxy, listen: int, backend: int, mc_pid: int, secs: float,
            size: int) -> dict:
    """A load run; the figures of its middle window."""
    gen_cpu = {}

    def load() -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        gen_cpu["res"] = loads.mcload(listen, secs, size=size)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        gen_cpu["cpu"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)

    t = threading.Thread(target=load)
    t.start()
    time.sleep((secs - WINDOW) / 2)  # into the run's steady middle
    pids = proxy.pids()
    a_seg, a_cpu, a_mc = segments(), user_sys_seconds(pids + [mc_pid]), mc_requests(backend)
    a_sl = sleeps(pids)
    time.sleep(WINDOW)
    b_seg, b_cpu, b_mc = segments(), user_sys_seconds(pids + [mc_pid]), mc_requests(backend)
    b_sl = sleeps(pids)
    t.join()
    n = max(b_mc - a_mc, 1)
    row = {"rps": gen_cpu["res"]["rps"], "p99": gen_cpu["res"]["p99"],
           "proxy_us": sum(sum(b_cpu[p]) - sum(a_cpu[p]) for p in pids) / n * 1e6,
           "memcached_us": (sum(b_cpu[mc_pid]) - sum(a_cpu[mc_pid])) / n * 1e6,
           "loadgen_us": gen_cpu["cpu"] / gen_cpu["res"]["requests"] * 1e6,
           "proxy_sleeps": (b_sl - a_sl) / n}
    for key, segs in b_seg.items():
        r = role(key, listen, backend)
        if r and key in a_seg:
            row[r] = row.get(r, 0.0) + (segs - a_seg[key]) / n
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--size", type=int, default=100, help="value bytes")
    ap.add_argument("--out", default=None, help="also write the table (Markdown) here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="walnut-backend-cost-"))
    backend = free_port()
    mc = memcached(backend, work, "0")
    proxies: dict[str, tuple[Proxy, int]] = {}
    try:
        for kind in ("walnut", "nutcracker"):
            listen = free_port()
            pools = {"mc": {"listen": f"{HOST}:{listen}", "redis": False,
                            "servers": [f"{HOST}:{backend}"]}}
            proxies[kind] = (Proxy(kind, pools, work, "1", workers=1).start(), listen)
        loads.mcload_prefill(proxies["walnut"][1], size=args.size)
        got: dict[str, list[dict]] = {k: [] for k in proxies}
        for r in range(args.rounds):
            for kind, (proxy, listen) in proxies.items():
                row = one_run(proxy, listen, backend, mc.pid, args.seconds, args.size)
                got[kind].append(row)
                print(f"  [{r + 1}/{args.rounds}] {kind:<10} {row['rps']:>9,.0f} req/s  "
                      f"proxy {row['proxy_us']:.2f} us  memcached {row['memcached_us']:.2f} us  "
                      f"loadgen {row['loadgen_us']:.2f} us  proxy->memcached "
                      f"{row.get('proxy->memcached', 0):.3f} segs/req", flush=True)
    finally:
        for proxy, _ in proxies.values():
            proxy.stop()
        mc.stop()
    cols = ["rps", "p99", "proxy_us", "proxy_sleeps", "memcached_us", "loadgen_us",
            "client->proxy", "proxy->memcached", "memcached->proxy", "proxy->client"]
    lines = [f"Unpipelined memcached through each proxy, {args.size} B values, medians of "
             f"{args.rounds} interleaved rounds of {args.seconds:g} s (figures per request from "
             f"a {WINDOW:g} s window in each), "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
             "| proxy | req/s | p99 ms | proxy CPU µs | proxy sleeps | memcached CPU µs | "
             "load generator CPU µs | segments client→proxy | proxy→memcached | "
             "memcached→proxy | proxy→client |",
             "|---" * 11 + "|"]
    for kind, rows in got.items():
        med = {c: statistics.median(r.get(c, 0.0) for r in rows) for c in cols}
        lines.append(f"| {kind} | {med['rps']:,.0f} | {med['p99']:.2f} | {med['proxy_us']:.2f} | "
                     f"{med['proxy_sleeps']:.3f} | {med['memcached_us']:.2f} | "
                     f"{med['loadgen_us']:.2f} | {med['client->proxy']:.3f} | "
                     f"{med['proxy->memcached']:.3f} | {med['memcached->proxy']:.3f} | "
                     f"{med['proxy->client']:.3f} |")
    write_table(lines, args.out)


if __name__ == "__main__":
    main()
