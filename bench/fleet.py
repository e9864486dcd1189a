#!/usr/bin/env python3
"""A fleet of three walnuts configured from etcd: how long `walnut fleet
apply` takes to reach every member, and what the barrier of a placement
change costs clients.

  apply      R rounds of a change that moves no key (a pool `timeout`
             toggled): per member, the time from the start of `walnut
             fleet apply` to its `/metrics` showing the new revision
             (polled every 5 ms); median and max over members and rounds
  files      the same change the way a fleet configured by files makes
             it: three walnuts with `-c`, each file rewritten and each
             master sent SIGHUP back to back (no barrier), same load
  barrier    CHANGES placement changes (a server added, removed, added,
             ...) of a `migration: true` Redis pool while six
             clients INCR and RPUSH through all three members (the e2e
             test's load), each request timed: writes acknowledged,
             refused, lost; the barrier's length as each member's agent
             logged it (from its own prepare to the go); the requests the
             members held for it (their `fleet_held` counters) and the
             latency of the requests for moving keys (those now on the
             keys whose server changed) that overlapped a member's fenced
             window (its placement switch to its go, from its log)
             against the requests before the first change
  cpu        steady state, no change: the CPU time (/proc utime+stime of
             the master and its workers, the fleet agent apart) per request
             of one walnut started with `--etcd`/`--fleet` against one
             started with `-c` on the same pool (`migration: true`, one
             Redis), each in turn under the same redis-benchmark load
             (walnut pinned to CPU 0, the rest to CPU 1), interleaved
             rounds, medians

Uses the e2e helpers (tests/e2e/fleetkit.py): its own etcd on free
loopback ports. Writes results/fleet.md.

    python3 bench/fleet.py [--rounds 20] [--changes 6] [--cpu-rounds 15] [--only cpu]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))

import signal  # noqa: E402

import redis  # noqa: E402
from conftest import Processes  # noqa: E402
from fleetkit import Etcd, Member, apply, port_offset, wait_for  # noqa: E402
from procs import HOST, free_port, redis_pool, to_yaml  # noqa: E402
from test_fleet_migration import COUNTERS, LISTS, Fleet, Load, lost_writes, metric_sum  # noqa: E402

# bench/procs.py (its /proc readers), under another name than the e2e
# helpers' procs module.
_spec = importlib.util.spec_from_file_location("bench_procs", HERE / "procs.py")
bench_procs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_procs)


class TimedLoad(Load):
    """The e2e test's load, each request timed: (wall start, seconds,
    member index, key, refused)."""

    def __init__(self, ports: list[int]):
        super().__init__("redis", ports)
        self.log: list[tuple[float, float, int, str, bool]] = []

    def run(self, n: int) -> None:
        rnd = random.Random(n)
        clients = [self.client(p) for p in self.ports]
        seq = 0
        while not self.stop.is_set():
            m = seq % len(clients)
            c = clients[m]
            seq += 1
            push = seq % 2
            if push:
                j = rnd.randrange(LISTS)
                key, v = f"l:{j}", n * 10_000_000 + seq
            else:
                i = rnd.randrange(COUNTERS)
                key = f"c:{i}"
            t0 = time.time()
            ok = True
            try:
                if push:
                    c.rpush(key, v)
                else:
                    c.incr(key)
            except Exception as e:  # noqa: BLE001 - a failed write is not acknowledged
                ok = False
                with self.lock:
                    self.refused += 1
                    if len(self.errors) < 5:
                        self.errors.append(repr(e))
                if not isinstance(e, redis.ResponseError):
                    clients[m] = self.client(self.ports[m])
            dt = time.time() - t0
            with self.lock:
                self.log.append((t0, dt, m, key, not ok))
                if ok:
                    self.acked += 1
                    if push:
                        self.pushed[j].append(v)
                    else:
                        self.incr_acked[i] += 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--changes", type=int, default=6)
    ap.add_argument("--cpu-rounds", type=int, default=15)
    ap.add_argument("--cpu-requests", type=int, default=100_000)
    ap.add_argument("--only", choices=["cpu"], help="run only this phase (prints, writes nothing)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        procs = Processes(Path(d))
        try:
            if args.only == "cpu":
                print("\n".join(cpu_phase(procs, args.cpu_rounds, args.cpu_requests)))
                return 0
            return run(procs, args)
        finally:
            procs.stop_all()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def log_time(line: str) -> float:
    """The wall time of a walnut log line ([YYYY-mm-dd HH:MM:SS.mmm])."""
    return datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S.%f").timestamp()


def log_lines_after(m, t: float, text: str) -> list[float]:
    """Times of a member's log lines containing `text` logged after `t`."""
    return [log_time(x) for x in m.log_path.read_text().splitlines() if text in x and log_time(x) >= t]


def fenced_window(m, t: float) -> tuple[float, float] | None:
    """A member's fenced window in the change applied at `t`: its
    placement switch to its worker's "passed its barrier" line."""
    switch = log_lines_after(m, t, "placement switch:")
    go = log_lines_after(m, t, "the fleet passed its barrier")
    if not switch or not go:
        return None
    return switch[0], go[0]


def owners(servers) -> dict[str, int]:
    """Which server holds each key (index in `servers`)."""
    out = {}
    for i, srv in enumerate(servers):
        r = redis.Redis(host=HOST, port=srv.port, socket_timeout=10)
        for k in r.keys("*"):
            out[k.decode()] = i
    return out


def run(procs, args) -> int:
    rounds = args.rounds
    f = Fleet(procs, "redis")
    lat: list[float] = []
    for i in range(rounds):
        f.pools["p"]["timeout"] = 2000 + i % 2
        t0 = time.monotonic()
        r = apply(f.etcd, "mig", procs.workdir, f.pools)
        assert r.returncode == 0, r.stderr
        rev = int(r.stdout.split("revision ")[1].split()[0])
        pending = set(range(3))
        while pending:
            for k in list(pending):
                if f.members[k].revision() >= rev:
                    lat.append(time.monotonic() - t0)
                    pending.discard(k)
            time.sleep(0.005)
    # Worker counters are the live generation's: each change's fenced
    # generation is read once its migration is done, before the next.
    held = held_s = refused_fleet = 0.0
    changes = args.changes
    in_window: list[float] = []
    windows_ms: list[float] = []
    moved_n: list[int] = []
    t_first = None
    with TimedLoad(f.ports) as load:
        wait_for(lambda: load.acked > 2000, 20, "load")
        t0 = time.monotonic()
        for k in range(changes):
            # A server added, then removed again, in turn.
            servers = f.servers if k % 2 == 0 else f.servers[:2]
            before = owners(f.servers)
            t_apply = time.time()
            t_first = t_first or t_apply
            f.pools["p"]["servers"] = f.make(servers)["servers"]
            assert apply(f.etcd, "mig", procs.workdir, f.pools, wait=10).returncode == 0
            wait_for(lambda: all(fenced_window(m, t_apply) for m in f.members), 20, "barrier passed", step=0.05)
            wait_for(lambda: all(log_lines_after(m, t_apply, "migration done, workers no longer pull") for m in f.members),
                     60, "migration done", step=0.1)
            held += metric_sum(f.members, "walnut_worker_fleet_held_requests_total")
            held_s += metric_sum(f.members, "walnut_worker_fleet_held_seconds_total")
            refused_fleet += metric_sum(f.members, "walnut_worker_fleet_refused_requests_total")
            after = owners(f.servers)
            moved = {key for key, i in after.items() if key in before and before[key] != i}
            moved_n.append(len(moved))
            windows = [fenced_window(m, t_apply) for m in f.members]
            windows_ms += [(w[1] - w[0]) * 1000 for w in windows]
            with load.lock:
                log = list(load.log)
            in_window += [dt for (t, dt, m, key, bad) in log
                          if key in moved and t + dt >= windows[m][0] and t <= windows[m][1]]
        at = load.acked
        wait_for(lambda: load.acked > at + 1000, 30, "load after")
        elapsed = time.monotonic() - t0
    lost = lost_writes("redis", f.ports[0], load)
    steady = [dt for (t, dt, _, _, bad) in load.log if t + dt < t_first and not bad]
    ms = lambda x: f"{x * 1000:.1f}"  # noqa: E731
    barrier_lines = [
        f"- requests the members held for the barriers (`fleet_held`): {held:.0f}, "
        f"{ms(held_s / max(held, 1))} ms held on average; refused by the fleet (`fleet_refused`): {refused_fleet:.0f}",
        f"- latency of the requests for moving keys ({', '.join(map(str, moved_n))} of {COUNTERS + LISTS} keys moved "
        f"per change) that overlapped a member's fenced window (its placement switch to its go: median "
        f"{statistics.median(windows_ms):.0f} ms, max {max(windows_ms):.0f} ms over {len(windows_ms)}): "
        f"{len(in_window)} requests, p50 {ms(pct(in_window, 0.5)) if in_window else '-'} ms, "
        f"p99 {ms(pct(in_window, 0.99)) if in_window else '-'} ms, max {ms(max(in_window)) if in_window else '-'} ms; "
        f"every request before the first change: p50 {ms(pct(steady, 0.5))} ms, p99 {ms(pct(steady, 0.99))} ms, "
        f"max {ms(max(steady))} ms ({len(steady)} requests)",
    ]
    files = by_files(procs)
    cpu = cpu_phase(procs, args.cpu_rounds, args.cpu_requests)
    # The barriers each member's agent logged, the last `changes` ones.
    barrier = []
    for m in f.members:
        found = re.findall(r"prepared revision \d+ \((\d+) ms after this one\)", m.log_path.read_text())
        barrier += [int(x) for x in found[-changes:]]
    lines = [
        "# A fleet of three walnuts from etcd",
        "",
        f"`python3 bench/fleet.py --rounds {rounds} --changes {changes} --cpu-rounds {args.cpu_rounds}` ({time.strftime('%Y-%m-%d')}, 2 shared cores, loopback).",
        "",
        f"- apply to applied, per member ({len(lat)} samples): median {statistics.median(lat) * 1000:.0f} ms, "
        f"max {max(lat) * 1000:.0f} ms",
        f"- {changes} placement changes under load (a server added, removed, added, ...; {elapsed:.1f} s of load): "
        f"{load.acked} writes acknowledged, "
        f"{load.refused} refused (errors: {sorted(set(load.errors))[:2]}), lost {lost[0]} increments and {lost[1]} pushes ({COUNTERS} counters, 300 lists)",
        f"- barrier per member and change, its prepare to the go, as its agent logged it: median "
        f"{statistics.median(barrier):.0f} ms, max {max(barrier)} ms ({len(barrier)})",
        *barrier_lines,
        f"- the same change by files (3 x `-c`, SIGHUP back to back, no barrier): {files}",
        "",
        *cpu,
        "",
    ]
    out = HERE / "results" / "fleet.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


def by_files(procs) -> str:
    servers = [procs.redis() for _ in range(3)]
    pool = redis_pool(servers[:2], migration=True, migration_rate=20000)
    proxies = [procs.proxy("walnut", {"p": dict(pool)}) for _ in range(3)]
    ports = [p.port("p") for p in proxies]
    with Load("redis", ports) as load:
        wait_for(lambda: load.acked > 2000, 20, "load")
        for p in proxies:
            cfg = dict(p.pools["p"])
            cfg["servers"] = redis_pool(servers)["servers"]
            p.conf_path.write_text(to_yaml({"p": cfg}))
        for p in proxies:
            p.signal(signal.SIGHUP)
        at = load.acked
        wait_for(lambda: load.acked > at + 3000, 30, "load after")
    wait_for(lambda: all("migration of pool 'p' done" in p.log_path.read_text() for p in proxies), 60, "done")
    lost = lost_writes("redis", ports[0], load)
    return (f"{load.acked} acknowledged, {load.refused} refused, "
            f"lost {lost[0]} increments and {lost[1]} pushes")


def walnut_cpu(master: int) -> tuple[float, float]:
    """(master + workers, fleet agent) CPU seconds of a walnut."""
    main = agent = 0.0
    for p in bench_procs.tree(master):
        try:
            title = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        cpu = sum(bench_procs.user_sys_seconds([p]).get(p, (0.0, 0.0)))
        if b"fleet agent" in title:
            agent += cpu
        elif b"migrator" not in title:
            main += cpu
    return main, agent


def cpu_phase(procs, rounds: int, n: int) -> list[str]:
    """CPU per request, `--etcd` member against `-c`, steady state
    (`--cpu-rounds 0`: skipped)."""
    if rounds == 0:
        return []
    rs = procs.redis()
    etcd = procs._start(lambda: Etcd(procs.workdir), retry=False)
    base = free_port()
    pool = redis_pool([rs], listen=f"{HOST}:{base}", migration=True)
    assert apply(etcd, "cpu", procs.workdir, {"p": pool}).returncode == 0
    off = port_offset(base)
    same = ["--cpu-affinity", "none"]
    member = Member(procs.workdir, etcd.url, "cpu", "m", [base], offset=off, ttl=5, extra=same)
    member.argv = ["taskset", "-c", "0", *member.argv]
    procs.started.append(member)
    member.start()
    # The same pool from a file, the same flags but the fleet's.
    d = procs.workdir / "cpu-plain"
    d.mkdir()
    (d / "walnut.yml").write_text(to_yaml({"p": pool}))
    plain = bench_procs.Proc(
        [bench_procs.WALNUT, "-c", str(d / "walnut.yml"), "-s", str(free_port()), "-a", HOST,
         "--admin", f"{HOST}:{free_port()}", "-o", str(d / "walnut.log"), *same],
        "0", d / "stdout").start([base])
    try:
        return cpu_rounds(member, plain, base, rounds, n)
    finally:
        plain.stop()


def cpu_rounds(member, plain, plain_port: int, rounds: int, n: int) -> list[str]:
    """Interleaved rounds of the same load on each walnut."""
    wait_for(lambda: redis.Redis(host=HOST, port=member.ports[0], socket_timeout=2).set("probe", "1"), 10, "member in step")
    who = {"--etcd member": (member.pid, member.ports[0]), "-c": (plain.pid, plain_port)}
    per_req: dict[str, list[float]] = {k: [] for k in who}
    rps: dict[str, list[float]] = {k: [] for k in who}
    agent_s = 0.0
    wall = 0.0
    for r in range(rounds):
        order = list(who) if r % 2 == 0 else list(reversed(who))
        for name in order:
            pid, port = who[name]
            c0, a0 = walnut_cpu(pid)
            t0 = time.monotonic()
            out = subprocess.run(
                ["taskset", "-c", "1", "redis-benchmark", "-h", HOST, "-p", str(port), "-t", "set,get",
                 "-n", str(n), "-c", "50", "-r", "100000", "-q"],
                capture_output=True, text=True, timeout=300, check=True).stdout
            dt = time.monotonic() - t0
            c1, a1 = walnut_cpu(pid)
            per_req[name].append((c1 - c0) / (2 * n) * 1e6)
            got = [float(x) for x in re.findall(r"([\d.]+) requests per second", out)]
            rps[name].append(statistics.mean(got) if got else 0.0)
            if name == "--etcd member":
                agent_s += a1 - a0
                wall += dt
    m, p = statistics.median(per_req["--etcd member"]), statistics.median(per_req["-c"])
    # Each round's two runs are minutes apart at most: their ratio takes
    # out the machine's drift between rounds.
    paired = statistics.median(a / b for a, b in zip(per_req["--etcd member"], per_req["-c"]) if b > 0)
    fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    return [
        "## CPU per request in steady state: `--etcd` member against `-c`",
        "",
        f"`redis-benchmark -t set,get -n {n} -c 50 -r 100000` against each walnut in turn ({rounds} interleaved rounds; "
        "walnut pinned to CPU 0, redis-benchmark to CPU 1, redis-server and etcd unpinned), one worker, the same "
        "`migration: true` pool over one Redis; CPU = /proc utime+stime of the master and its workers, "
        "10 ms ticks, divided by the 2n requests of a round.",
        "",
        "| walnut | CPU per request, median (µs) | rounds (µs) | requests/s, median |",
        "|---|---|---|---|",
        f"| `--etcd --fleet` member | {m:.2f} | {fmt(per_req['--etcd member'])} | {statistics.median(rps['--etcd member']):,.0f} |",
        f"| `-c` | {p:.2f} | {fmt(per_req['-c'])} | {statistics.median(rps['-c']):,.0f} |",
        "",
        f"Member / plain: {m / p:.3f} (medians), {paired:.3f} (median of the rounds' ratios). The member's fleet agent (a process of its own, off the data path) used "
        f"{agent_s:.2f} s of CPU over the {wall:.0f} s of its rounds.",
    ]


if __name__ == "__main__":
    sys.exit(main())
