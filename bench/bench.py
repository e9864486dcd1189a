"""walnut vs nutcracker vs the bare backend: the benchmark driver.

Run through `make bench` (bench/run.sh), which builds everything and raises
`ulimit -n` first. `--quick` runs each scenario once and shorter.

Pinning on the 2-core machine: backends and load generators on CPU 0; the
1-worker proxies (walnut, nutcracker) on CPU 1. walnut with 2 workers runs on
CPUs 0-1 and so shares CPU 0 with the backends and the generator: its
scaling figure is a lower bound of what a free second core would give.

WALNUT_BEFORE=/path/to/walnut adds `walnut-before`, a 1-worker walnut from
that binary pinned like walnut, as a target wherever 1-worker walnut runs
(the report's "CPU vs before"). The `workers` section sets walnut's workers
against two nutcrackers sharing the listen address with SO_REUSEPORT.
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
from procs import HOST, ROOT, Group, Predixy, Proxy, free_port, have_predixy, memcached, redis_server, rss_kb
from procs import cpu_seconds, listeners_on, nutcracker_reuseport

BACKEND_CPU = "0"
PROXY_CPU = "1"
BOTH_CPUS = "0-1"
MAIN = ["direct", "nutcracker", "walnut"]
SCALE = MAIN + ["walnut-2w"]
# Redis scenarios also run against predixy when its binary is there.
REDIS = MAIN + ["predixy"]
REDIS_SCALE = SCALE + ["predixy"]
# An older walnut binary, run as `walnut-before` wherever `walnut` runs.
WALNUT_BEFORE = os.environ.get("WALNUT_BEFORE")
# The workers section: 1 and 2 nutcrackers (SO_REUSEPORT), 1 and 2 walnut workers.
WORKERS = ["nutcracker", "nutcracker-x2", "walnut", "walnut-2w"]


def scenarios() -> list[dict]:
    """(name, pool, generator, parameters, targets), run in this order each rep."""
    def rb(name, pool, targets=REDIS, n0=None, **kw):
        # n0: requests of a target's first run (later runs are sized from it).
        return {"name": name, "pool": pool, "gen": "redis", "kw": kw, "targets": targets,
                "n0": n0 or 20000 * kw.get("pipeline", 1)}

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
        # MGETs through a proxy run at a tenth of the GET rate: a smaller first run.
        rb("redis MGET 10 keys/3 srv -P16", "r3", command=mget, pipeline=16, n0=64000),
        rb("redis MGET 10 keys/3 srv -P64", "r3", command=mget, pipeline=64, n0=64000),
        rb("redis MGET 10 keys/3 srv", "r3", command=mget),
        rb("redis SET 1KB", "r1", test="set", size=1024),
        rb("redis GET 1KB", "r1", test="get", size=1024),
        rb("redis SET 16KB", "r1", test="set", size=16384, keyspace=1000),
        rb("redis GET 16KB", "r1", test="get", size=16384, keyspace=1000),
        mc("mc get/set 9:1 100B", "m1", SCALE, size=100),
        mc("mc get/set 9:1 100B (memaslap)", "m1", gen="memaslap", size=100),
        mc("mc multi-get 10 keys/3 srv", "m3", get_ratio=1.0, mget=10, size=100),
        mc("mc get 100B -P16", "m1", get_ratio=1.0, size=100, pipeline=16),
        mc("mc get 100B -P64", "m1", get_ratio=1.0, size=100, pipeline=64),
        mc("mc set 100B -P16", "m1", get_ratio=0.0, size=100, pipeline=16),
        mc("mc multi-get 10 keys/3 srv -P16", "m3", get_ratio=1.0, mget=10, size=100,
           pipeline=16),
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
    """Run fn() and add the proxy's CPU seconds per million requests and RSS;
    for a Group also the busier member's share of its CPU (cpu_split, %)."""
    pids = proxy.pids() if proxy else []
    rss0, cpu0 = rss_kb(pids), cpu_seconds(pids)
    members = getattr(proxy, "members", [])
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
        if members:
            used = [sum(v - cpu0.get(p, 0.0) for p, v in cpu_seconds(m.pids()).items())
                    for m in members]
            res["cpu_split"] = max(used) / max(sum(used), 1e-9) * 100
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

    def proxy(self, kind: str, cpus: str, pools: dict | None = None, **kw) -> Proxy:
        pools = pools or self.pools()
        p = Proxy(kind, pools, self.work, cpus, **kw).start()
        p.pool_ports = {name: int(v["listen"].rsplit(":", 1)[1]) for name, v in pools.items()}
        self.procs.append(p)
        return p

    def start_proxies(self) -> None:
        """nutcracker, 1- and 2-worker walnut, and walnut-before when asked."""
        self.proxies = {
            "nutcracker": self.proxy("nutcracker", PROXY_CPU),
            "walnut": self.proxy("walnut", PROXY_CPU, workers=1),
            "walnut-2w": self.proxy("walnut", BOTH_CPUS, workers=2),
        }
        if WALNUT_BEFORE:
            self.proxies["walnut-before"] = self.proxy("walnut", PROXY_CPU, workers=1,
                                                       binary=WALNUT_BEFORE)

    @staticmethod
    def with_before(targets: list[str]) -> list[str]:
        """`targets`, with walnut-before after walnut when WALNUT_BEFORE is set."""
        out = []
        for t in targets:
            out.append(t)
            if t == "walnut" and WALNUT_BEFORE:
                out.append("walnut-before")
        return out

    def port(self, target: str, pool: str) -> int:
        if target == "direct":  # multi-server pools: the first server holds every key
            return self.redis[0] if pool.startswith("r") else self.mc[0]
        return self.proxies[target].pool_ports[pool]

    def run_one(self, scn: dict, target: str, rep: int, section: str = "load") -> dict:
        port = self.port(target, scn["pool"])
        proxy = self.proxies.get(target)
        kw = dict(scn["kw"])
        if scn["gen"] == "redis":
            # Requests per run: sized from this target's previous run to last ~secs.
            key = (scn["name"], target)
            n = self.n_for.get(key, scn["n0"])
            res = measured(proxy, 50, lambda: loads.redis_benchmark(port, n, **kw))
            self.n_for[key] = int(min(3e6, max(5000, res["rps"] * self.secs)))
        elif scn["gen"] == "memaslap":
            res = measured(proxy, 50, lambda: loads.memaslap(port, max(1, self.secs), **kw))
        else:
            # Keys stored before, not inside, the measured run: the stores
            # would count in the proxy's CPU but not in the requests.
            loads.mcload_prefill(port, kw.get("size", 100), kw.get("keyspace", 10000))
            res = measured(proxy, 50, lambda: loads.mcload(port, self.secs, **kw))
        res.update(section=section, scenario=scn["name"], target=target, rep=rep)
        return res

    def prefill_r3(self) -> None:
        """Store the MGET keyspace through a 3-server pool so MGETs hit."""
        port = self.proxies["walnut"].pool_ports["r3"]
        loads.redis_benchmark(port, 30000, test="set", size=100)

    def main_scenarios(self) -> None:
        self.start_proxies()
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
                for target in self.with_before(scn["targets"]):
                    if target not in self.proxies and target != "direct":
                        continue
                    try:
                        row = self.run_one(scn, target, rep)
                    except Exception as e:  # noqa: BLE001 - one failure must not end the run
                        print(f"  !! {scn['name']} / {target}: {e}", flush=True)
                        continue
                    self.rows.append(row)
                    print(f"  [{rep + 1}/{self.reps}] {scn['name']:<32} {target:<13} "
                          f"{row['rps']:>10.0f} rps  p99 {row.get('p99')}  "
                          f"cpu/M {row.get('cpu_per_M', float('nan')):.2f}s", flush=True)

    def nutcrackers_x2(self) -> Group | None:
        """Two nutcrackers on the same listen addresses (SO_REUSEPORT), both
        on CPUs 0-1 like walnut's 2 workers; None when they cannot share."""
        how = nutcracker_reuseport(self.work)
        if how is None:
            print("  !! nutcracker takes no `reuseport` key and there is no C compiler "
                  "for the SO_REUSEPORT shim: nutcracker-x2 skipped")
            return None
        print(f"  nutcracker-x2: SO_REUSEPORT by "
              f"{'the pool key reuseport: true' if how[0] == 'key' else 'LD_PRELOAD shim'}",
              flush=True)
        pools = self.pools()
        group = Group("nutcracker", [self.proxy("nutcracker", BOTH_CPUS, pools=pools,
                                                reuseport=how) for _ in range(2)])
        for port in group.pool_ports.values():
            deadline = time.monotonic() + 5
            while listeners_on(port) < 2:
                if time.monotonic() > deadline:
                    group.stop()
                    raise RuntimeError(f"nutcracker-x2: not two listeners on port {port}")
                time.sleep(0.05)
        return group

    def workers(self) -> None:
        """walnut 1 and 2 workers against 1 nutcracker and 2 nutcrackers behind
        SO_REUSEPORT, for a pipelined Redis GET and the memcached 9:1 mix."""
        picked = [s for s in scenarios()
                  if s["name"] in ("redis GET 100B -P16", "mc get/set 9:1 100B")
                  and (not self.args.only or self.args.only in s["name"])]
        if not picked:
            return
        try:
            x2 = self.nutcrackers_x2()
        except Exception as e:  # noqa: BLE001
            print(f"  !! nutcracker-x2: {e}", flush=True)
            x2 = None
        if x2:
            self.proxies["nutcracker-x2"] = x2
        for rep in range(self.reps):
            for scn in picked:
                for target in self.with_before(WORKERS):
                    if target not in self.proxies:
                        continue
                    try:
                        row = self.run_one(scn, target, rep, "workers")
                    except Exception as e:  # noqa: BLE001
                        print(f"  !! workers {scn['name']} / {target}: {e}", flush=True)
                        continue
                    self.rows.append(row)
                    print(f"  [{rep + 1}/{self.reps}] workers {scn['name']:<24} {target:<14} "
                          f"{row['rps']:>10.0f} rps  p99 {row.get('p99')}  "
                          f"cpu/M {row.get('cpu_per_M', float('nan')):.2f}s", flush=True)
        if x2:
            x2.stop()
            del self.proxies["nutcracker-x2"]

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
        if "walnut-before" in self.proxies:
            targets["walnut-before"] = self.proxies["walnut-before"]
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
    ap.add_argument("--only", help="run only load (and workers) scenarios whose name "
                    "contains this")
    ap.add_argument("--skip", default="",
                    help="comma list of: load,workers,listener,quickack,idle")
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
            b.start_proxies()
        if "workers" not in skip:
            print("== workers vs 2 nutcrackers (SO_REUSEPORT)", flush=True)
            b.workers()
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
