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
  barrier    a server added to a `migration: true` Redis pool while six
             clients INCR and RPUSH through all three members (the e2e
             test's load): writes acknowledged, refused while keys moved,
             lost; the barrier's length as each member's agent logged it
             (from its own prepare to the go)

Uses the e2e helpers (tests/e2e/fleetkit.py): its own etcd on free
loopback ports. Writes results/fleet.md.

    python3 bench/fleet.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))

import signal  # noqa: E402

from conftest import Processes  # noqa: E402
from fleetkit import apply, wait_for  # noqa: E402
from procs import redis_pool, to_yaml  # noqa: E402
from test_fleet_migration import COUNTERS, Fleet, Load, lost_writes  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        procs = Processes(Path(d))
        try:
            return run(procs, args.rounds)
        finally:
            procs.stop_all()


def run(procs, rounds: int) -> int:
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
    with Load("redis", f.ports) as load:
        wait_for(lambda: load.acked > 2000, 20, "load")
        t0 = time.monotonic()
        assert f.add_server().returncode == 0
        at = load.acked
        wait_for(lambda: load.acked > at + 3000, 30, "load after")
        elapsed = time.monotonic() - t0
    f.wait_done(f.members)
    lost = lost_writes("redis", f.ports[0], load)
    files = by_files(procs)
    # The last barrier each member's agent logged is the placement change's.
    barrier = []
    for m in f.members:
        found = re.findall(r"prepared revision \d+ \((\d+) ms after this one\)", m.log_path.read_text())
        barrier.append(int(found[-1]) if found else None)
    lines = [
        "# A fleet of three walnuts from etcd",
        "",
        f"`python3 bench/fleet.py --rounds {rounds}` ({time.strftime('%Y-%m-%d')}, 2 shared cores, loopback).",
        "",
        f"- apply to applied, per member ({len(lat)} samples): median {statistics.median(lat) * 1000:.0f} ms, "
        f"max {max(lat) * 1000:.0f} ms",
        f"- a server added under load ({elapsed:.1f} s of it): {load.acked} writes acknowledged, "
        f"{load.refused} refused, lost {lost[0]} increments and {lost[1]} pushes ({COUNTERS} counters, 300 lists)",
        f"- barrier per member, its prepare to the go, as its agent logged it (ms): {barrier}",
        f"- the same change by files (3 x `-c`, SIGHUP back to back, no barrier): {files}",
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


if __name__ == "__main__":
    sys.exit(main())
