#!/usr/bin/env python3
"""Idle client connections: memory per connection, up to 100 000 of them.

Part of `make bench` (the `idle` section of bench/bench.py) and runnable on
its own:

    make bench-idle                        # = bench/run.sh idle
    make bench-idle BENCH_ARGS="--max 50000"

The machine's hard RLIMIT_NOFILE (20 000 here) is per process, so:
- walnut runs 8 workers on reuseport listeners, each worker holding ~1/8;
- the client side is several bench/idle_open.py processes of at most
  PER_OPENER connections, each bound to its own loopback source address
  (127.0.0.2, 127.0.0.3, ...: the ~28k ephemeral ports are per source
  address); addresses are never reused within a run, so no TIME_WAIT
  left by a previous step is in the way;
- nutcracker is one process: it can hold at most ~19 000 clients, so it is
  measured at 10 000 and 19 000 only, as is 1-worker walnut for the same
  comparison.

Each connection sends one Redis GET (a miss, forwarded to redis-server) and
reads the `$-1` reply before idling, so it is an established, proxied
client. For each count: RSS (sum of VmRSS over master + workers) and PSS
(sum of Pss, shared pages counted once) before, with all connections open,
and after all are closed and the proxy's descriptor count is back to its
baseline. Checked: every connection got its reply, the proxy reports n
client connections, and walnut's log has no refused accept.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import subprocess
import sys
import time
from pathlib import Path

from procs import HOST, ROOT, Proxy, free_port, proc_sum, redis_server, rss_kb

OPENER = Path(__file__).resolve().parent / "idle_open.py"
PER_OPENER = 15000  # connections per opener process (hard fd limit 20 000)
COUNTS = (10000, 19000, 50000, 100000)
NUTCRACKER_MAX = 19000  # one process under a 20 000 descriptor limit
TARGET_MIB = 1024  # issue 7: 100k idle connections in < 1 GiB RSS, all workers
# Lines walnut logs when it does not take a connection it was offered.
REFUSALS = ("accept on pool", "max_connections reached", "client_connections limit")


class Sources:
    """Loopback source addresses 127.0.0.2, 127.0.0.3, ..., never reused."""

    def __init__(self) -> None:
        self.next = 2

    def take(self) -> str:
        while self.next % 256 in (0, 255):
            self.next += 1
        n, self.next = self.next, self.next + 1
        return f"127.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


def pss_kb(pids: list[int]) -> int:
    """Sum of Pss (KiB) over pids: shared pages divided among their users."""
    return proc_sum([Path(f"/proc/{p}/smaps_rollup") for p in pids], "Pss:")


def fd_counts(pids: list[int]) -> list[int]:
    """Open descriptors of each pid."""
    out = []
    for p in pids:
        try:
            out.append(len(os.listdir(f"/proc/{p}/fd")))
        except OSError:
            out.append(0)
    return out


class Openers:
    """Opener processes holding n connections to one port between them."""

    def __init__(self, port: int, n: int, sources: Sources, timeout: float):
        k = max(1, -(-n // PER_OPENER))
        shares = [n // k + (1 if i < n % k else 0) for i in range(k)]
        self.timeout = timeout
        self.procs = [subprocess.Popen(
            [sys.executable, str(OPENER), "--addr", f"{HOST}:{port}",
             "--source", sources.take(), "--n", str(s), "--timeout", str(timeout)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for s in shares]

    def ready(self) -> dict:
        """Wait for every opener's report; the sums."""
        total = {"n": 0, "replied": 0, "failed": 0, "bad_reply": 0, "errors": {}, "secs": 0.0}
        deadline = time.monotonic() + self.timeout + 60
        for p in self.procs:
            assert p.stdout is not None
            r, _, _ = select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))
            line = p.stdout.readline() if r else ""
            if not line:
                raise RuntimeError(f"opener {p.pid} gave no report (exit {p.poll()})")
            doc = json.loads(line)
            for k in ("n", "replied", "failed", "bad_reply"):
                total[k] += doc[k]
            for k, v in doc["errors"].items():
                total["errors"][k] = total["errors"].get(k, 0) + v
            total["secs"] = max(total["secs"], doc["secs"])
        return total

    def close(self) -> None:
        """Tell every opener to close its connections; wait for them (by pid)."""
        for p in self.procs:
            try:
                assert p.stdin is not None
                p.stdin.write("close\n")
                p.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
        for p in self.procs:
            try:
                p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def proxy_side(port: int) -> int:
    """TCP connections on the proxy's side of `port` (accepted or still in the
    backlog, not yet closed by the proxy), counted by the kernel (ss)."""
    out = subprocess.run(["ss", "-Htn", "state", "connected", "exclude", "time-wait",
                          "sport", "=", f":{port}"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return sum(1 for line in out.splitlines() if line.strip())


def settle(port: int, timeout: float = 120.0) -> float:
    """Wait until the proxy has closed every client connection of `port`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        left = proxy_side(port)
        if left == 0:
            return time.monotonic() - t0
        time.sleep(0.2)
    raise RuntimeError(f"{left} client connections still open {timeout:.0f} s after "
                       "the clients closed")


def after_close(p: Proxy, rss0: int, window: float = 2.5) -> int:
    """RSS once the clients are gone. A walnut worker gives freed heap back on
    its once-a-second tick, so RSS is followed for up to `window` seconds
    (less when it is back within 10% of the baseline); the last value."""
    deadline = time.monotonic() + window
    rss = rss_kb(p.pids())
    while rss > rss0 * 1.1 and time.monotonic() < deadline:
        time.sleep(0.1)
        rss = rss_kb(p.pids())
    return rss


def refusals(p: Proxy) -> int:
    """Lines in the proxy's log saying a connection was not taken."""
    try:
        text = p.log_path.read_text(errors="replace")
    except OSError:
        return 0
    return sum(1 for line in text.splitlines() if any(r in line for r in REFUSALS))


def warm(port: int, sources: Sources) -> None:
    """A few hundred short-lived clients first, so that every worker has made
    its backend connection before the baseline is taken."""
    o = Openers(port, 200, sources, 60)
    try:
        res = o.ready()
    finally:
        o.close()
    if res["failed"]:
        raise RuntimeError(f"warm-up: {res['failed']} of 200 without reply {res['errors']}")
    settle(port)


def cycle(p: Proxy, port: int, n: int, sources: Sources, timeout: float) -> dict:
    """Open n idle connections to p, measure, close them all, measure again."""
    pids = p.pids()
    m = {"rss0": rss_kb(pids), "pss0": pss_kb(pids), "refused0": refusals(p)}
    total0 = p.metric_sum("walnut_worker_accepted_connections_total") or 0
    openers = Openers(port, n, sources, timeout)
    try:
        m["res"] = openers.ready()
        pids = p.pids()
        m["rss1"], m["pss1"], m["fds"] = rss_kb(pids), pss_kb(pids), fd_counts(pids)
        if p.kind == "walnut":  # walnut's own count, live from shared memory
            m["held"] = p.metric_sum("walnut_worker_open_connections")
            m["accepted"] = (p.metric_sum("walnut_worker_accepted_connections_total") or 0) \
                - total0
        else:  # nutcracker's stats JSON lags by its -i interval: ask the kernel
            m["held"], m["accepted"] = proxy_side(port), None
    finally:
        openers.close()
    m["close_secs"] = settle(port)
    m["rss2"] = after_close(p, m["rss0"])
    m["pss2"] = pss_kb(p.pids())
    m["refused"] = refusals(p) - m["refused0"]
    m["pids"] = len(pids)
    return m


def measure(name: str, p: Proxy, port: int, n: int, sources: Sources,
            timeout: float) -> dict:
    """Three open/close cycles of n connections on a fresh proxy: the first is
    reported; the open RSS of the second and third shows whether memory grows
    from cycle to cycle once the allocator has reached its working size."""
    cycles = [cycle(p, port, n, sources, timeout) for _ in range(3)]
    notes = []
    for m in cycles:
        res = m["res"]
        if res["failed"]:
            notes.append(f"{res['failed']} without reply {res['errors']}")
        if m["held"] is not None and m["held"] != n:
            notes.append(f"proxy reported {m['held']} clients")
        if m["refused"]:
            notes.append(f"{m['refused']} refusals logged")
    first, _, last = cycles
    rss0, rss1 = first["rss0"], first["rss1"]
    row = {
        "section": "idle", "scenario": f"{n} idle conns", "target": name, "rep": 0,
        "requests": n, "replied": min(m["res"]["replied"] for m in cycles),
        "held": first["held"], "accepted": first["accepted"],
        "refused": sum(m["refused"] for m in cycles) if p.kind == "walnut" else None,
        "rss_mb_base": rss0 / 1024, "rss_mb_total": rss1 / 1024,
        "rss_kb_per_conn": (rss1 - rss0) / n, "pss_mb_total": first["pss1"] / 1024,
        "pss_kb_per_conn": (first["pss1"] - first["pss0"]) / n,
        "rss_mb_after_close": first["rss2"] / 1024,
        "rss_mb_open_2": cycles[1]["rss1"] / 1024, "rss_mb_open_3": last["rss1"] / 1024,
        "rss_mb_after_close_3": last["rss2"] / 1024,
        "growth_kb_per_conn": (last["rss1"] - cycles[1]["rss1"]) / n,
        "max_proc_fds": max(first["fds"]), "procs": first["pids"],
        "open_secs": first["res"]["secs"], "close_secs": first["close_secs"],
        "note": "; ".join(notes),
    }
    print(f"  idle {n:>6} {name:<10} replied {row['replied']}/{n} x3, first in "
          f"{first['res']['secs']:.1f}s  RSS {rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MiB "
          f"({row['rss_kb_per_conn']:.2f} KiB/conn), PSS {first['pss1'] / 1024:.1f} MiB, "
          f"after close {first['rss2'] / 1024:.1f}; open in cycles 2, 3: "
          f"{row['rss_mb_open_2']:.1f}, {row['rss_mb_open_3']:.1f} MiB, after close "
          f"{row['rss_mb_after_close_3']:.1f}; max fds/process {row['max_proc_fds']}"
          + (f"  !! {row['note']}" if notes else ""), flush=True)
    return row


def targets(max_n: int) -> list[tuple[str, dict, list[int]]]:
    """(name, proxy arguments, counts) in the order they run."""
    small = [c for c in COUNTS if c <= min(max_n, NUTCRACKER_MAX)]
    return [
        ("nutcracker", {"kind": "nutcracker", "cpus": "1"}, small),
        ("walnut", {"kind": "walnut", "cpus": "1", "workers": 1}, small),
        ("walnut-8w", {"kind": "walnut", "cpus": "0-1", "workers": 8},
         [c for c in COUNTS if c <= max_n]),
    ]


def run(work: Path, redis_port: int, max_n: int, timeout: float = 300.0) -> list[dict]:
    """Every target and count, each count on a freshly started proxy."""
    rows = []
    sources = Sources()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    for name, kw, counts in targets(max_n):
        for n in counts:
            per_proc = n / kw.get("workers", 1)
            if per_proc + 100 > hard:
                rows.append({"section": "idle", "scenario": f"{n} idle conns", "target": name,
                             "rep": 0, "note": f"skipped: {per_proc:.0f} per process > "
                                               f"ulimit -Hn {hard}"})
                continue
            pools = {"r1": {"listen": f"{HOST}:{free_port()}", "redis": True,
                            "servers": [f"{HOST}:{redis_port}"]}}
            p = Proxy(kw["kind"], pools, work, kw["cpus"], workers=kw.get("workers", 1))
            try:
                p.start()
                warm(p.ports[0], sources)
                rows.append(measure(name, p, p.ports[0], n, sources, timeout))
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"  !! idle {n} {name}: {e}", flush=True)
                rows.append({"section": "idle", "scenario": f"{n} idle conns",
                             "target": name, "rep": 0, "note": f"failed: {e}"})
            finally:
                p.stop()
    for n in (c for c in COUNTS if NUTCRACKER_MAX < c <= max_n):
        rows.append({"section": "idle", "scenario": f"{n} idle conns", "target": "nutcracker",
                     "rep": 0, "note": f"not measured: one process, ulimit -Hn {hard}"})
    return rows


def verdict(rows: list[dict]) -> str:
    """The 100k result against the 1 GiB target, one sentence."""
    for r in rows:
        if r["target"] == "walnut-8w" and r["scenario"] == "100000 idle conns" \
                and r.get("rss_mb_total") is not None:
            ok = r["rss_mb_total"] < TARGET_MIB and not r.get("note")
            return (f"100 000 idle connections, walnut 8 workers: {r['rss_mb_total']:.1f} MiB "
                    f"RSS summed over master + workers (PSS {r['pss_mb_total']:.1f} MiB), "
                    f"{r['replied']} of 100000 replied: target < {TARGET_MIB} MiB "
                    f"{'met' if ok else 'NOT met'}.")
    return "100 000 idle connections were not measured in this run."


def main() -> None:
    import report
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max", type=int, default=100000, help="largest count (default 100000)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--workdir", default=f"/tmp/walnut-idle-{os.getpid()}")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    work = Path(args.workdir)
    t0 = time.monotonic()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "loadavg_start": Path("/proc/loadavg").read_text().split()[:3]}
    redis_port = free_port()
    backend = redis_server(redis_port, work, "0")
    try:
        rows = run(work, redis_port, args.max)
    finally:
        backend.stop()
    meta["elapsed_s"] = round(time.monotonic() - t0)
    meta["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    meta["nofile"] = hard
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report.write_idle(rows, meta, out, verdict(rows))
    print((out / "idle.md").read_text())


if __name__ == "__main__":
    main()
