#!/usr/bin/env python3
"""What holding a pipelined batch's replies (`_walnut: reply_hold`) saves
and what it costs: walnut as it runs (reply_hold 200 µs), walnut with
`reply_hold: 0`, and nutcracker, one at a time in front of one memcached
and one redis-server, for pipelined and unpipelined loads.

Per request: the proxy's CPU and the backend's (user + system, from
/proc: a proxy that sends a backend smaller batches makes it spend more
per request, which sets the throughput when the backend's CPU is the
bottleneck), the proxy's writes to
clients (TCP data segments proxy->client from `ss -ti`, a window in the
middle of each run), and the load generator's latency (mcload: from the
batch's write to each reply; redis-benchmark: to the batch's last reply).
A held reply shows in mcload's p50: it counts the wait of every reply of
a batch but the last, which is what a client that reads replies as they
come would see.

The backends and load generator share CPU 0, the proxy (one walnut
worker, or nutcracker) is alone on CPU 1; rounds are interleaved and the
medians reported.

    python3 bench/reply_hold.py [--rounds 3] [--seconds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import write_table  # noqa: E402
import loads  # noqa: E402
from backend_cost import segments  # noqa: E402
from procs import HOST, Proxy, free_port, memcached, redis_server, user_sys_seconds  # noqa: E402

WINDOW = 1.0
# (load, backend, pipeline, get ratio, connections). The light load (2
# connections: nothing saturated, replies arrive spread out) is where a
# held reply's wait shows most in the latency of the batch's early replies.
LOADS = [("mc get 100B -P16", "mc", 16, 1.0, 50), ("mc get 100B -P64", "mc", 64, 1.0, 50),
         ("mc set 100B -P16", "mc", 16, 0.0, 50), ("mc get/set 9:1 100B -P1", "mc", 1, 0.9, 50),
         ("mc get 100B -P16, 2 conns", "mc", 16, 1.0, 2),
         ("redis GET 100B -P16", "redis", 16, 1.0, 50)]
PROXIES = [("walnut", {}), ("walnut reply_hold 0", {"reply_hold": "0"}), ("nutcracker", {})]


def run_load(kind: str, port: int, pipeline: int, ratio: float, conns: int,
             secs: float) -> dict:
    if kind == "mc":
        return loads.mcload(port, secs, conns=conns, get_ratio=ratio, pipeline=pipeline)
    # redis-benchmark runs a count, not a time: about `secs` at its rate here.
    n = int(secs * 350_000)
    return loads.redis_benchmark(port, n, clients=conns, pipeline=pipeline, test="get")


def one_run(proxy: Proxy, port: int, load: tuple, secs: float, backend: int) -> dict:
    name, kind, pipeline, ratio, conns = load
    got = {}

    def go() -> None:
        got["res"] = run_load(kind, port, pipeline, ratio, conns, secs)

    pids = proxy.pids()
    cpu0, back0 = user_sys_seconds(pids), sum(user_sys_seconds([backend])[backend])
    t = threading.Thread(target=go)
    t.start()
    time.sleep(max((secs - WINDOW) / 2, 0.2))
    seg0, a = segments(), time.monotonic()
    time.sleep(WINDOW)
    seg1, b = segments(), time.monotonic()
    t.join()
    cpu1, back1 = user_sys_seconds(pids), sum(user_sys_seconds([backend])[backend])
    res = got["res"]
    n = max(res["requests"], 1)
    window_requests = res["rps"] * (b - a)
    writes = sum(v - seg0[k] for k, v in seg1.items()
                 if k in seg0 and int(k[0].rsplit(":", 1)[1]) == port)
    return {"rps": res["rps"], "p50": res["p50"], "p99": res["p99"], "p999": res["p999"],
            "cpu_us": sum(sum(cpu1[p]) - sum(cpu0.get(p, (0, 0))) for p in cpu1) / n * 1e6,
            "backend_us": (back1 - back0) / n * 1e6,
            "writes": writes / max(window_requests, 1)}


def fmt(v) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--only", default="", help="loads whose name holds this")
    ap.add_argument("--out", default=None, help="also write the table (Markdown) here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="walnut-reply-hold-"))
    mc_port, redis_port = free_port(), free_port()
    backends = [memcached(mc_port, work, "0"), redis_server(redis_port, work, "0")]
    proxies: dict[str, tuple[Proxy, dict[str, int]]] = {}
    chosen = [ld for ld in LOADS if args.only in ld[0]]
    try:
        for label, settings in PROXIES:
            ports = {"mc": free_port(), "redis": free_port()}
            pools = {"mc": {"listen": f"{HOST}:{ports['mc']}", "redis": False,
                            "servers": [f"{HOST}:{mc_port}"]},
                     "rd": {"listen": f"{HOST}:{ports['redis']}", "redis": True,
                            "servers": [f"{HOST}:{redis_port}"]}}
            kind = label.split()[0]
            proxies[label] = (Proxy(kind, pools, work, "1", workers=1,
                                    process=settings).start(), ports)
        loads.mcload_prefill(proxies["walnut"][1]["mc"])
        loads.redis_benchmark(proxies["walnut"][1]["redis"], 20000, test="set")
        got: dict[tuple[str, str], list[dict]] = {}
        for r in range(args.rounds):
            for load in chosen:
                for label, (proxy, ports) in proxies.items():
                    backend = backends[0 if load[1] == "mc" else 1].pid
                    row = one_run(proxy, ports[load[1]], load, args.seconds, backend)
                    got.setdefault((load[0], label), []).append(row)
                    print(f"  [{r + 1}/{args.rounds}] {load[0]:<24} {label:<20} "
                          f"{row['rps']:>9,.0f} req/s  cpu {row['cpu_us']:.3f} us  "
                          f"backend {row['backend_us']:.3f} us  "
                          f"writes {row['writes']:.3f}/req  p50 {fmt(row['p50'])} "
                          f"p99 {fmt(row['p99'])} ms", flush=True)
    finally:
        for proxy, _ in proxies.values():
            proxy.stop()
        for b in backends:
            b.stop()
    lines = [f"Pipelined replies held for their batch (`reply_hold`), medians of {args.rounds} "
             f"interleaved rounds of {args.seconds:g} s, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
             "| load | proxy | req/s | proxy CPU µs/req | ÷ nutcracker | backend CPU µs/req "
             "| writes to clients/req | p50 ms | p99 ms | p99.9 ms |", "|---" * 10 + "|"]
    for load in chosen:
        base = statistics.median(r["cpu_us"] for r in got[(load[0], "nutcracker")])
        for label in proxies:
            rows = got[(load[0], label)]
            med = {c: (None if rows[0][c] is None else statistics.median(r[c] for r in rows))
                   for c in rows[0]}
            lines.append(f"| {load[0]} | {label} | {med['rps']:,.0f} | {med['cpu_us']:.3f} | "
                         f"{med['cpu_us'] / base:.2f} | {med['backend_us']:.2f} | "
                         f"{med['writes']:.3f} | {fmt(med['p50'])} | "
                         f"{fmt(med['p99'])} | {fmt(med['p999'])} |")
    write_table(lines, args.out)


if __name__ == "__main__":
    main()
