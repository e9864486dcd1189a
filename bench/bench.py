"""walnut vs nutcracker vs the bare backend: the benchmark driver.

Run through `make bench` (bench/run.sh), which builds everything and raises
`ulimit -n` first. `--quick` runs each scenario once and shorter.

Pinning on the 2-core machine: backends and load generators on CPU 0; the
1-worker proxies (walnut, nutcracker) on CPU 1. walnut with 2 workers runs on
CPUs 0-1 and so shares CPU 0 with the backends and the generator: its
scaling figure is a lower bound of what a free second core would give.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import threading
import time
from pathlib import Path

import idle
import loads
import report
from procs import HOST, ROOT, Predixy, Proxy, free_port, have_predixy, memcached, redis_server, rss_kb
from procs import cpu_seconds

BACKEND_CPU = "0"
PROXY_CPU = "1"
BOTH_CPUS = "0-1"
MAIN = ["direct", "nutcracker", "walnut"]
SCALE = MAIN + ["walnut-2w"]
# Redis scenarios also run against predixy when its binary is there.
REDIS = MAIN + ["predixy"]
REDIS_SCALE = SCALE + ["predixy"]


def scenarios() -> list[dict]:
    """(name, pool, generator, parameters, targets), run in this order each rep."""
    def rb(name, pool, targets=REDIS, **kw):
        return {"name": name, "pool": pool, "gen": "redis", "kw": kw, "targets": targets}

    def mc(name, pool, targets=MAIN, gen="mcload", **kw):
        return {"name": name, "pool": pool, "gen": gen, "kw": kw, "targets": targets}

    mget = ["mget"] + ["key:__rand_int__"] * 10
    return [
        rb("redis SET 100B", "r1", test="set", size=100),
        rb("redis GET 100B", "r1", REDIS_SCALE, test="get", size=100),
        rb("redis SET 100B -P16", "r1", test="set", size=100, pipeline=16),
        rb("redis GET 100B -P16", "r1", REDIS_SCALE, test="get", size=100, pipeline=16),
        rb("redis SET 100B -P64", "r1", test="set", size=100, pipeline=64),
        rb("redis GET 100B -P64", "r1", test="get", size=100, pipeline=64),
        rb("redis MGET 10 keys/3 srv -P16", "r3", command=["mget"] + ["key:__rand_int__"] * 10,
           pipeline=16),
        rb("redis MGET 10 keys/3 srv", "r3", command=mget),
        rb("redis SET 1KB", "r1", test="set", size=1024),
        rb("redis GET 1KB", "r1", test="get", size=1024),
        rb("redis SET 16KB", "r1", test="set", size=16384, keyspace=1000),
        rb("redis GET 16KB", "r1", test="get", size=16384, keyspace=1000),
        mc("mc get/set 9:1 100B", "m1", SCALE, size=100),
        mc("mc get/set 9:1 100B (memaslap)", "m1", gen="memaslap", size=100),
        mc("mc multi-get 10 keys/3 srv", "m3", get_ratio=1.0, mget=10, size=100),
        mc("mc get/set 9:1 1KB", "m1", size=1024),
        mc("mc get/set 9:1 16KB", "m1", size=16384, keyspace=1000),
    ]


class Sampler(threading.Thread):
    """Highest RSS of a process tree while a load runs."""

    def __init__(self, proxy: Proxy | None):
        super().__init__(daemon=True)
        self.proxy, self.peak, self.stop_ev = proxy, 0, threading.Event()

    def run(self) -> None:
        while self.proxy and not self.stop_ev.wait(0.1):
            self.peak = max(self.peak, rss_kb(self.proxy.pids()))


def measured(proxy: Proxy | None, conns: int, fn) -> dict:
    """Run fn() and add the proxy's CPU seconds per million requests and RSS."""
    pids = proxy.pids() if proxy else []
    rss0, cpu0 = rss_kb(pids), cpu_seconds(pids)
    sampler = Sampler(proxy)
    sampler.start()
    res = fn()
    sampler.stop_ev.set()
    sampler.join()
    if proxy:
        cpu1 = cpu_seconds(proxy.pids())
        cpu = sum(v - cpu0.get(p, 0.0) for p, v in cpu1.items())
        res["cpu_per_M"] = cpu / max(res["requests"], 1) * 1e6
        res["rss_kb_per_conn"] = max(sampler.peak, rss_kb(proxy.pids())) - rss0
        res["rss_kb_per_conn"] /= max(conns, 1)
    return res


class Bench:
    """Backends and proxies for one run, and the results collected so far."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.work = Path(args.workdir)
        self.secs = 0.6 if args.quick else 2.0
        self.reps = 1 if args.quick else 3
        self.rows: list[dict] = []
        self.procs: list = []
        self.n_for: dict[tuple[str, str], int] = {}
        self.idle_verdict = ""

    def start_backends(self) -> None:
        self.redis = [free_port() for _ in range(3)]
        self.mc = [free_port() for _ in range(3)]
        self.procs += [redis_server(p, self.work, BACKEND_CPU) for p in self.redis]
        self.procs += [memcached(p, self.work, BACKEND_CPU) for p in self.mc]

    def pools(self) -> dict[str, dict]:
        def addr(p):
            return f"{HOST}:{p}"
        return {
            "r1": {"listen": addr(free_port()), "redis": True, "servers": [addr(self.redis[0])]},
            "r3": {"listen": addr(free_port()), "redis": True,
                   "servers": [addr(p) for p in self.redis]},
            "m1": {"listen": addr(free_port()), "redis": False, "servers": [addr(self.mc[0])]},
            "m3": {"listen": addr(free_port()), "redis": False,
                   "servers": [addr(p) for p in self.mc]},
        }

    def proxy(self, kind: str, cpus: str, **kw) -> Proxy:
        pools = self.pools()
        p = Proxy(kind, pools, self.work, cpus, **kw).start()
        p.pool_ports = {name: int(v["listen"].rsplit(":", 1)[1]) for name, v in pools.items()}
        self.procs.append(p)
        return p

    def port(self, target: str, pool: str) -> int:
        if target == "direct":  # multi-server pools: the first server holds every key
            return self.redis[0] if pool.startswith("r") else self.mc[0]
        return self.proxies[target].pool_ports[pool]

    def run_one(self, scn: dict, target: str, rep: int) -> dict:
        port = self.port(target, scn["pool"])
        proxy = self.proxies.get(target)
        kw = dict(scn["kw"])
        if scn["gen"] == "redis":
            # Requests per run: sized from this target's previous run to last ~secs.
            key = (scn["name"], target)
            n = self.n_for.get(key, 20000 * kw.get("pipeline", 1))
            res = measured(proxy, 50, lambda: loads.redis_benchmark(port, n, **kw))
            self.n_for[key] = int(min(3e6, max(5000, res["rps"] * self.secs)))
        elif scn["gen"] == "memaslap":
            res = measured(proxy, 50, lambda: loads.memaslap(port, max(1, self.secs), **kw))
        else:
            res = measured(proxy, 50, lambda: loads.mcload(port, self.secs, prefill=True, **kw))
        res.update(section="load", scenario=scn["name"], target=target, rep=rep)
        return res

    def prefill_r3(self) -> None:
        """Store the MGET keyspace through a 3-server pool so MGETs hit."""
        port = self.proxies["walnut"].pool_ports["r3"]
        loads.redis_benchmark(port, 30000, test="set", size=100)

    def main_scenarios(self) -> None:
        self.proxies = {
            "nutcracker": self.proxy("nutcracker", PROXY_CPU),
            "walnut": self.proxy("walnut", PROXY_CPU, workers=1),
            "walnut-2w": self.proxy("walnut", BOTH_CPUS, workers=2),
        }
        if have_predixy():
            pd = Predixy(self.pools(), self.work, PROXY_CPU).start()
            self.procs.append(pd)
            self.proxies["predixy"] = pd
        else:
            print("  (no predixy binary: see bench/README.md to build one; its rows are skipped)")
        self.prefill_r3()
        for rep in range(self.reps):
            for scn in scenarios():
                if self.args.only and self.args.only not in scn["name"]:
                    continue
                for target in scn["targets"]:
                    if target not in self.proxies and target != "direct":
                        continue
                    try:
                        row = self.run_one(scn, target, rep)
                    except Exception as e:  # noqa: BLE001 - one failure must not end the run
                        print(f"  !! {scn['name']} / {target}: {e}", flush=True)
                        continue
                    self.rows.append(row)
                    print(f"  [{rep + 1}/{self.reps}] {scn['name']:<32} {target:<11} "
                          f"{row['rps']:>10.0f} rps  p99 {row.get('p99')}  "
                          f"cpu/M {row.get('cpu_per_M', float('nan')):.2f}s", flush=True)

    def listener_modes(self) -> None:
        """walnut, 2 workers, per listener mode, under connection churn."""
        for mode in ["reuseport", "epoll_exclusive", "accept_mutex"]:
            try:
                p = self.proxy("walnut", BOTH_CPUS, workers=2, listener=mode)
            except Exception as e:  # noqa: BLE001
                print(f"  !! listener {mode}: {e}")
                continue
            port = p.pool_ports["r1"]
            n = max(2000, int(self.secs * 4000))
            for rep in range(self.reps):
                metric = "walnut_worker_accept_eagain_total"
                before = p.metric_sum(metric)
                res = measured(p, 50, lambda: loads.redis_benchmark(port, n, keepalive=False))
                after = p.metric_sum(metric)
                res["accept_eagain"] = (after - before) if None not in (before, after) else None
                res.update(section="listener", scenario=f"GET, reconnect per request ({mode})",
                           target="walnut-2w", rep=rep)
                self.rows.append(res)
                print(f"  listener {mode:<16} {res['rps']:>8.0f} conn+GET/s  "
                      f"accept_eagain {res['accept_eagain']}", flush=True)
            p.stop()

    def quickack(self) -> None:
        """Requests over 30 ms per million with TCP_QUICKACK on and off."""
        off = self.proxy("walnut", PROXY_CPU, workers=1, quickack=False)
        # "direct" (no proxy) is the machine's own floor: a stall counted
        # there is the scheduler's, not a delayed ACK.
        targets = {"direct": None, "walnut": self.proxies["walnut"],
                   "walnut quickack off": off, "nutcracker": self.proxies["nutcracker"]}
        secs = 1.5 if self.args.quick else 3.0
        for rep in range(self.reps):
            for size in (100, 16384):
                for name, p in targets.items():
                    port = p.pool_ports["m1"] if p else self.mc[0]
                    res = measured(p, 50, lambda: loads.mcload(
                        port, secs, get_ratio=0.5, size=size, keyspace=1000, prefill=True))
                    res.update(section="quickack", target=name, rep=rep,
                               scenario=f"mc get/set 1:1 {size}B")
                    self.rows.append(res)
                    print(f"  quickack {name:<20} {size:>6}B over30ms {res['over_30ms']} "
                          f"of {res['requests']}", flush=True)
        off.stop()

    def idle(self) -> None:
        """Idle client connections up to --idle-max (bench/idle.py)."""
        rows = idle.run(self.work, self.redis[0], self.args.idle_max)
        self.rows += rows
        self.idle_verdict = idle.verdict(rows)
        print(f"  {self.idle_verdict}", flush=True)

    def stop_all(self) -> None:
        for p in reversed(self.procs):
            try:
                p.stop()
            except Exception:  # noqa: BLE001
                pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="one short run per scenario")
    ap.add_argument("--only", help="run only load scenarios whose name contains this")
    ap.add_argument("--skip", default="", help="comma list of: load,listener,quickack,idle")
    ap.add_argument("--idle-max", type=int, default=None,
                    help="largest idle-connection count (default 100000, --quick 19000)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--workdir", default=f"/tmp/walnut-bench-{os.getpid()}")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if args.idle_max is None:
        args.idle_max = 19000 if args.quick else 100000
    b = Bench(args)
    t0 = time.monotonic()
    meta = {"mode": "quick" if args.quick else "full", "host": platform.node(),
            "kernel": platform.release(), "cpus": os.cpu_count(),
            "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "reps": b.reps, "secs": b.secs}
    try:
        b.start_backends()
        print("== load scenarios", flush=True)
        if "load" not in skip:
            b.main_scenarios()
        else:
            b.proxies = {"nutcracker": b.proxy("nutcracker", PROXY_CPU),
                         "walnut": b.proxy("walnut", PROXY_CPU, workers=1),
                         "walnut-2w": b.proxy("walnut", BOTH_CPUS, workers=2)}
        if "listener" not in skip:
            print("== listener modes", flush=True)
            b.listener_modes()
        if "quickack" not in skip:
            print("== TCP_QUICKACK", flush=True)
            b.quickack()
        if "idle" not in skip:
            print("== idle connections", flush=True)
            b.idle()
    finally:
        b.stop_all()
    meta["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    meta["elapsed_s"] = round(time.monotonic() - t0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta["idle_verdict"] = b.idle_verdict
    summary = report.summarize(b.rows)
    report.write_csv(summary, out / "latest.csv")
    md = report.markdown(summary, meta)
    (out / "latest.md").write_text(md)
    report.chart(summary, out / "latest.png")
    if "idle" not in skip:
        meta["nofile"] = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        report.write_idle(b.rows, meta, out, b.idle_verdict)
    print(md)
    print(f"results in {out}/latest.{{md,csv,png}} ({meta['elapsed_s']} s)")


if __name__ == "__main__":
    main()
