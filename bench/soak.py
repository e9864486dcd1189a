#!/usr/bin/env python3
"""Bounded soak test: mixed memcached + Redis load through walnut while
faults are injected on a schedule.

    python3 bench/soak.py --minutes 10        # default
    python3 bench/soak.py --minutes 2 --out bench/results

Backends (3 memcached, 3 redis-server) and walnut run on 127.0.0.1 on free
ports; client threads keep a modest, throttled load. Every FAULT_PERIOD
seconds the next fault of the schedule is injected: kill -9 and restart of a
backend, SIGSTOP/SIGCONT of a backend, kill -9 of a walnut worker, SIGHUP
reload. Once a second the workers' VmRSS and the counters are sampled.

Writes <out>/soak.md (tables: RSS over time, errors by cause, latency),
<out>/soak.json (raw samples) and, when matplotlib is importable,
<out>/soak.png. Exit status 1 if walnut died or stopped serving.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from conftest import Processes  # noqa: E402
from faultkit import Resp, RespError, rss_kb, workers  # noqa: E402
from procs import RawConn, memcache_pool, redis_pool  # noqa: E402

FAULT_PERIOD = 10.0
PIPELINE = 10


class Stats:
    """Counters shared by the client threads (one lock, coarse)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ops = 0
        self.errors: Counter = Counter()
        self.lat_ms: list[float] = []

    def add(self, ops: int, lat_ms: float, errors: list[str]) -> None:
        with self.lock:
            self.ops += ops
            self.lat_ms.append(lat_ms)
            for e in errors:
                self.errors[e] += 1

    def take(self) -> tuple[int, Counter, list[float]]:
        with self.lock:
            out = (self.ops, self.errors, self.lat_ms)
            self.ops, self.errors, self.lat_ms = 0, Counter(), []
            return out


def cause(text: str) -> str:
    """Error reply text reduced to its cause (no key names)."""
    text = text.strip()
    for word in ("Connection refused", "Connection timed out", "Connection reset by peer",
                 "Broken pipe", "No route to host"):
        if word in text:
            return word
    return text[:60]


def mc_client(port: int, stats: Stats, stop: threading.Event, rate: float, seed: int) -> None:
    rnd = random.Random(seed)
    conn = None
    while not stop.is_set():
        try:
            if conn is None:
                conn = RawConn(port, timeout=3)
            keys = [f"soak:mc:{rnd.randrange(5000)}" for _ in range(PIPELINE)]
            errs: list[str] = []
            t0 = time.monotonic()
            payload = b"".join(
                f"set {k} 0 0 {len(k)}\r\n{k}\r\n".encode() if i % 3 == 0 else f"get {k}\r\n".encode()
                for i, k in enumerate(keys)
            )
            conn.send(payload)
            for i, k in enumerate(keys):
                line = conn.read_line()
                if line.startswith(b"VALUE"):
                    conn.read_line()
                    line = conn.read_line()
                if line not in (b"STORED\r\n", b"END\r\n"):
                    errs.append("mc: " + cause(line.decode("latin-1")))
            stats.add(len(keys), (time.monotonic() - t0) * 1000 / len(keys), errs)
        except (OSError, TimeoutError, ConnectionError) as e:
            stats.add(0, 0.0, [f"mc: client connection: {type(e).__name__}"])
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.05)
        time.sleep(rnd.expovariate(rate / PIPELINE))
    if conn is not None:
        conn.close()


def redis_client(port: int, stats: Stats, stop: threading.Event, rate: float, seed: int) -> None:
    rnd = random.Random(seed)
    conn = None
    while not stop.is_set():
        try:
            if conn is None:
                conn = Resp(port, timeout=3)
            keys = [f"soak:rd:{rnd.randrange(5000)}" for _ in range(PIPELINE)]
            errs: list[str] = []
            t0 = time.monotonic()
            reqs = [Resp.encode("SET", k, k) if i % 3 == 0 else Resp.encode("GET", k) for i, k in enumerate(keys)]
            reqs.append(Resp.encode("MGET", *keys[:4]))
            conn.sock.sendall(b"".join(reqs))
            for _ in reqs:
                r = conn.read()
                if isinstance(r, RespError):
                    errs.append("redis: " + cause(str(r)))
            stats.add(len(reqs), (time.monotonic() - t0) * 1000 / len(reqs), errs)
        except (OSError, TimeoutError, ConnectionError, ValueError) as e:
            stats.add(0, 0.0, [f"redis: client connection: {type(e).__name__}"])
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.05)
        time.sleep(rnd.expovariate(rate / PIPELINE))
    if conn is not None:
        conn.close()


def pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


class Soak:
    def __init__(self, args: argparse.Namespace, workdir: Path):
        self.args = args
        self.procs = Processes(workdir)
        self.faults: list[tuple[float, str]] = []
        self.samples: list[dict] = []
        self.errors_total: Counter = Counter()
        self.errors_by_fault: dict[str, Counter] = {}
        self.lat_all: list[float] = []
        self.t0 = time.monotonic()

    def start(self) -> None:
        os.environ.setdefault("WALNUT_BIN", self.args.walnut)
        self.mcs = [self.procs.memcached() for _ in range(3)]
        self.rds = [self.procs.redis() for _ in range(3)]
        pools = {
            "mc": memcache_pool(self.mcs, timeout=500),
            "rd": redis_pool(self.rds, timeout=500),
        }
        self.proxy = self.procs.proxy("walnut", pools, extra_args=["--workers", str(self.args.workers)])

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    # ------------------------------------------------------------ faults --

    def schedule(self):
        """The fault schedule: (name, action) pairs, cycled."""

        def restart(group, i, proto):
            def act():
                b = group[i]
                b.kill()
                time.sleep(3)
                port = b.port
                group[i] = self.procs.redis(port=port) if proto == "redis" else self.procs.memcached(port=port)
            return act

        def freeze(b, secs=2.0):
            def act():
                b.signal(signal.SIGSTOP)
                try:
                    time.sleep(secs)
                finally:
                    b.signal(signal.SIGCONT)
            return act

        def kill_worker():
            ws = workers(self.proxy)
            if ws and ws[0] != self.proxy.pid:
                os.kill(ws[0], signal.SIGKILL)

        def reload():
            self.proxy.signal(signal.SIGHUP)

        return [
            ("kill -9 + restart memcached #1", restart(self.mcs, 1, "mc")),
            ("SIGSTOP redis #2 for 2 s", lambda: freeze(self.rds[2])()),
            ("kill -9 a walnut worker", kill_worker),
            ("kill -9 + restart redis #0", restart(self.rds, 0, "redis")),
            ("SIGSTOP memcached #2 for 2 s", lambda: freeze(self.mcs[2])()),
            ("SIGHUP reload", reload),
        ]

    def fault_loop(self, stop: threading.Event, stats_cut) -> None:
        plan = self.schedule()
        i = 0
        while not stop.wait(FAULT_PERIOD):
            name, act = plan[i % len(plan)]
            i += 1
            stats_cut(name)
            self.faults.append((self.now(), name))
            try:
                act()
            except Exception as e:  # noqa: BLE001 - recorded, the soak goes on
                self.faults.append((self.now(), f"{name} failed: {e!r}"))

    # ------------------------------------------------------------- run ----

    def run(self) -> bool:
        stats = Stats()
        stop = threading.Event()
        threads = []
        for n in range(self.args.clients):
            threads.append(threading.Thread(
                target=mc_client, args=(self.proxy.port("mc"), stats, stop, self.args.rate, n), daemon=True))
            threads.append(threading.Thread(
                target=redis_client, args=(self.proxy.port("rd"), stats, stop, self.args.rate, 100 + n),
                daemon=True))
        current = {"fault": "none"}

        def cut(name: str) -> None:
            current["fault"] = name

        fault_stop = threading.Event()
        ft = threading.Thread(target=self.fault_loop, args=(fault_stop, cut), daemon=True)
        for t in threads:
            t.start()
        ft.start()
        end = self.t0 + self.args.minutes * 60
        ok = True
        while time.monotonic() < end:
            time.sleep(1)
            ops, errs, lat = stats.take()
            ws = workers(self.proxy)
            sample = {
                "t": self.now(),
                "ops": ops,
                "errors": sum(errs.values()),
                "rss_workers_kb": sum(rss_kb(p) for p in ws if p != self.proxy.pid),
                "rss_master_kb": rss_kb(self.proxy.pid),
                "workers": len([p for p in ws if p != self.proxy.pid]),
                "p50_ms": round(pct(lat, 50), 3),
                "p99_ms": round(pct(lat, 99), 3),
                "max_ms": round(max(lat, default=0.0), 3),
                "fault": current["fault"],
            }
            self.samples.append(sample)
            self.lat_all.extend(lat)
            self.errors_total.update(errs)
            self.errors_by_fault.setdefault(current["fault"], Counter()).update(errs)
            if not self.proxy.alive():
                ok = False
                break
        fault_stop.set()
        ft.join(15)
        # Let the last fault heal, then check walnut serves both pools.
        time.sleep(3)
        stop.set()
        for t in threads:
            t.join(10)
        self.final_ok = ok and self.serves()
        return self.final_ok

    def serves(self) -> bool:
        try:
            with RawConn(self.proxy.port("mc"), timeout=3) as c:
                if c.request(b"set soak:final 0 0 1\r\nx\r\n") != b"STORED\r\n":
                    return False
            with Resp(self.proxy.port("rd"), timeout=3) as r:
                return r.call("PING") == "PONG"
        except (OSError, TimeoutError, ConnectionError):
            return False

    def stop(self) -> None:
        self.procs.stop_all()

    # ---------------------------------------------------------- report ----

    def write(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "soak.json").write_text(json.dumps({
            "minutes": self.args.minutes,
            "faults": self.faults,
            "samples": self.samples,
            "errors": dict(self.errors_total),
        }, indent=1))
        lines = [
            "# walnut soak",
            "",
            f"{self.args.minutes} min, {self.args.workers} workers, {self.args.clients} memcached + "
            f"{self.args.clients} Redis client threads at ~{self.args.rate:.0f} req/s each "
            f"(pipelines of {PIPELINE}), a fault every {FAULT_PERIOD:.0f} s. "
            f"Walnut alive and serving at the end: **{'yes' if self.final_ok else 'NO'}**.",
            "",
            f"Total requests: {sum(s['ops'] for s in self.samples)}; errors: "
            f"{sum(self.errors_total.values())}; latency per request (pipeline time / size) "
            f"p50 {pct(self.lat_all, 50):.2f} ms, p99 {pct(self.lat_all, 99):.2f} ms, "
            f"max {max(self.lat_all, default=0):.1f} ms.",
            "",
            "## Faults injected",
            "",
            "| t (s) | fault |",
            "|---:|---|",
            *[f"| {t} | {name} |" for t, name in self.faults],
            "",
            "## Errors by cause",
            "",
            "| cause | count |",
            "|---|---:|",
            *[f"| {c} | {n} |" for c, n in self.errors_total.most_common()],
            "",
            "## Errors by fault window (the 10 s after each fault started)",
            "",
            "| fault | errors | causes |",
            "|---|---:|---|",
            *[
                f"| {f} | {sum(c.values())} | "
                + ", ".join(f"{k}: {v}" for k, v in c.most_common(3)) + " |"
                for f, c in self.errors_by_fault.items()
            ],
            "",
            "## Over time (10 s buckets)",
            "",
            "| t (s) | req/s | errors | p50 ms | p99 ms | max ms | workers | workers RSS (kB) | master RSS (kB) |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for i in range(0, len(self.samples), 10):
            b = self.samples[i : i + 10]
            lines.append(
                f"| {b[-1]['t']:.0f} | {sum(s['ops'] for s in b) / len(b):.0f} | "
                f"{sum(s['errors'] for s in b)} | {max(s['p50_ms'] for s in b):.2f} | "
                f"{max(s['p99_ms'] for s in b):.2f} | {max(s['max_ms'] for s in b):.1f} | "
                f"{b[-1]['workers']} | {b[-1]['rss_workers_kb']} | {b[-1]['rss_master_kb']} |"
            )
        (out / "soak.md").write_text("\n".join(lines) + "\n")
        self.chart(out / "soak.png")

    def chart(self, path: Path) -> None:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("soak: matplotlib not available, no chart")
            return
        t = [s["t"] for s in self.samples]
        fig, ax = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
        ax[0].plot(t, [s["rss_workers_kb"] / 1024 for s in self.samples], label="workers RSS")
        ax[0].plot(t, [s["rss_master_kb"] / 1024 for s in self.samples], label="master RSS")
        ax[0].set_ylabel("MiB")
        ax[0].legend(loc="upper left")
        ax[1].plot(t, [s["ops"] for s in self.samples], label="req/s")
        ax[1].plot(t, [s["errors"] for s in self.samples], label="errors/s")
        ax[1].legend(loc="upper left")
        ax[2].plot(t, [s["p99_ms"] for s in self.samples], label="p99 ms")
        ax[2].plot(t, [s["p50_ms"] for s in self.samples], label="p50 ms")
        ax[2].set_yscale("log")
        ax[2].legend(loc="upper left")
        ax[2].set_xlabel("seconds")
        for a in ax:
            for ft, _ in self.faults:
                a.axvline(ft, color="grey", alpha=0.3)
        fig.suptitle("walnut soak (grey lines: faults)")
        fig.tight_layout()
        fig.savefig(path, dpi=80)
        print(f"soak: chart written to {path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="duration (default 10)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--clients", type=int, default=2, help="client threads per protocol")
    ap.add_argument("--rate", type=float, default=500.0, help="target requests/s per client thread")
    ap.add_argument("--walnut", default=str(ROOT / "target" / "release" / "walnut"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="walnut-soak-") as tmp:
        soak = Soak(args, Path(tmp))
        try:
            soak.start()
            ok = soak.run()
        finally:
            soak.stop()
        soak.write(Path(args.out))
    print((Path(args.out) / "soak.md").read_text())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
