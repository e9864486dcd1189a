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
  after      the same rounds on the 3 servers once the migration is done
             (with every server on CPU 1, a third server adds no capacity,
             only its own costs: this phase tells those apart from the
             migration's)

Per phase: medians over rounds of client p50/p99 (ms) and requests per
second, and the redis-servers' CPU per 1000 client requests (utime+stime
from /proc, which includes the migrator's DUMP/RESTORE/DEL). Also: time from
the reload to the migration's end, keys moved, keys per second.

--anchor first runs Redis Cluster's own resharding on the same keys in the
same run: 2 cluster-enabled redis-servers (CPU 1), the keys on one that
serves every slot, then `redis-cli --cluster reshard` (pipeline 100) moves
half the slots to the other; keys moved per second, next to walnut's.
--remove runs the other way: the keys are loaded on 3 servers and the
reload removes the third (scale-in). Then steady and migrating both use the
3 servers (a moved key is read where it is, on the server leaving), so the
migration's own cost is read against steady without a topology change in
between, and "after" is the 2 servers.
--paired measures the migrating phase in pairs of rounds, the migrator
paused (admin `migration pause`) for one and running for the other, and
reports the median of each pair's ratio: what the moving itself costs the
clients, read against rounds a few seconds apart on the same placement
and the same map of moved keys, so that the machine's drift (other jobs
on this 2-core host move a round's figures by ±15 %) cancels out. Serving
moved keys while nothing moves is in both rounds of a pair (its cost:
`--rate 1`).
--twin (with --paired) adds a third round to each pair: the same
load through a second walnut (2 workers, CPU 1) serving the same servers
by the configuration before the reload, without a migration. It is the
steady state at the same moment: what a pool costs when nothing
migrates, against rounds a few seconds apart rather than minutes, so that
the machine's drift between the steady phase and the migration does not
count. The three rounds of a cycle take turns coming first. (It reads a
moved key where the key was: on the server the key
left, a nil; a nil costs a server about what a 100-byte value does.)
--twin-after: the twin serves the configuration after the reload instead
(the pool the change makes, without a migration): when a server is added,
the clients then spread over three servers instead of two, which costs the
servers more per request (fewer requests per wake-up), and --twin mixes
that cost into the migration's. (It reads a key not moved yet on its new
owner: a nil.)
--memcached runs walnut's migration over 3 memcacheds instead; the keys
are loaded through walnut by a pipelined writer, whose keys/s are
reported as memcached's write rate here, and the load is bench/loadgen's
mcload (gets only, 50 persistent connections, rounds of --round-seconds).

    python3 bench/migration.py [--keys 1000000] [--rate 100000] [--round 100000]
                               [--no-load] [--anchor] [--memcached]
"""

from __future__ import annotations

import argparse
import os
import re
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
from loads import mcload, redis_benchmark  # noqa: E402
from procs import (HOST, WALNUT, Proc, children_of, cpu_seconds, free_port, memcached,  # noqa: E402
                   redis_server)

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


def conf(listen: int, servers: list[int], rate: int, redis: bool = True,
         migration: bool = True) -> str:
    lines = ["rd:", f"  listen: {HOST}:{listen}", "  hash: fnv1a_64", "  distribution: ketama",
             f"  redis: {'true' if redis else 'false'}", "  timeout: 5000",
             f"  migration: {'true' if migration else 'false'}",
             f"  migration_rate: {rate}", "  servers:"]
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


def load_memcache(port: int, keys: int, name: bytes = b"key:%012d") -> float:
    """`set key:%012d` (or `name`) with 100-byte values through walnut,
    pipelined (a writer thread, the replies read as they come); keys per
    second."""
    import threading
    val = b"v" * 100
    t = time.monotonic()
    with socket.create_connection((HOST, port), timeout=60) as s:
        def write() -> None:
            for base in range(0, keys, 10000):
                s.sendall(b"".join(b"set %s 0 0 100\r\n%s\r\n" % (name % i, val)
                                   for i in range(base, min(keys, base + 10000))))
        w = threading.Thread(target=write, daemon=True)
        w.start()
        want, got = keys * len(b"STORED\r\n"), 0
        while got < want:
            chunk = s.recv(1 << 20)
            if not chunk or b"ERROR" in chunk:
                raise RuntimeError(chunk[:200])
            got += len(chunk)
        w.join()
    return keys / (time.monotonic() - t)


def cli(port: int, *args: str) -> str:
    return subprocess.run(["redis-cli", "-h", HOST, "-p", str(port), *args], capture_output=True,
                          text=True, timeout=900, check=True).stdout


def cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is a port too."""
    while True:
        p = free_port()
        if p + 10000 < 65536:
            try:
                with socket.socket() as s:
                    s.bind((HOST, p + 10000))
                return p
            except OSError:
                pass


def reshard_anchor(work: Path, keys: int) -> dict:
    """Redis Cluster's own resharding of the same keys: 2 nodes, the keys
    on one that serves every slot, half the slots moved to the other by
    `redis-cli --cluster reshard` (pipeline 100)."""
    ports = [cluster_port() for _ in range(2)]
    nodes = []
    try:
        for p in ports:
            d = work / f"cluster-{p}"
            d.mkdir(parents=True, exist_ok=True)
            nodes.append(Proc(["redis-server", "--port", str(p), "--bind", HOST, "--save", "",
                               "--appendonly", "no", "--dir", str(d), "--cluster-enabled", "yes",
                               "--cluster-config-file", str(d / "nodes.conf"),
                               "--logfile", str(d / "redis.log")], SERVER_CPU, d / "stdout")
                         .start([p]))
        cli(ports[0], "cluster", "addslotsrange", "0", "16383")
        cli(ports[1], "cluster", "meet", HOST, str(ports[0]))
        ids = [cli(p, "cluster", "myid").strip() for p in ports]
        deadline = time.monotonic() + 30
        while not all("cluster_state:ok" in cli(p, "cluster", "info")
                      and "cluster_known_nodes:2" in cli(p, "cluster", "info") for p in ports):
            if time.monotonic() > deadline:
                raise RuntimeError("cluster did not form")
            time.sleep(0.1)
        load_keys(ports[0], keys)
        t = time.monotonic()
        # On the servers' CPU, as walnut's migrator is (a child of walnut).
        out = subprocess.run(["taskset", "-c", SERVER_CPU, "redis-cli", "--cluster", "reshard", f"{HOST}:{ports[0]}",
                              "--cluster-from", ids[0], "--cluster-to", ids[1],
                              "--cluster-slots", "8192", "--cluster-yes",
                              "--cluster-pipeline", "100"],
                             capture_output=True, text=True, timeout=1800)
        secs = time.monotonic() - t
        if out.returncode != 0:
            raise RuntimeError(out.stdout[-500:] + out.stderr[-500:])
        moved = int(cli(ports[1], "dbsize"))
        return {"seconds": secs, "moved": moved, "keys_per_second": moved / secs,
                "left": int(cli(ports[0], "dbsize"))}
    finally:
        for n in nodes:
            n.stop()


def phase(walnut_port: int, servers: list[Proc], keys: int, round_n: int,
          until, walnut_pid: int, mc_seconds: float = 0.0) -> list[dict]:
    """Rounds of load until `until()` says stop; per round the client's
    figures, and the servers' and walnut's (master, workers, migrator)
    CPU per 1000 requests."""
    rows = []
    while True:
        pids = [s.pid for s in servers]
        ours = [walnut_pid] + children_of(walnut_pid)
        c0 = sum(cpu_seconds(pids).values())
        w0 = cpu_seconds(ours)
        if mc_seconds:
            r = mcload(walnut_port, mc_seconds, conns=50, get_ratio=1.0, keyspace=keys)
        else:
            r = redis_benchmark(walnut_port, round_n, clients=50, test="get", keyspace=keys)
        round_n = r.get("requests", round_n) if mc_seconds else round_n
        c1 = sum(cpu_seconds(pids).values())
        # A migrator that ended during the round counts up to its last
        # reading before: it is gone from /proc.
        w1 = cpu_seconds(ours)
        r["server_cpu_ms_per_1k"] = (c1 - c0) * 1000 / round_n * 1000
        r["walnut_cpu_ms_per_1k"] = sum(w1.get(p, w0[p]) - w0[p] for p in w0) * 1e6 / round_n
        # Of which the migrator (the rest: master and workers).
        r["migrator_cpu_ms_per_1k"] = sum(w1.get(p, w0[p]) - w0[p] for p in w0 if is_migrator(p)) * 1e6 / round_n
        rows.append(r)
        print(f"  round {len(rows)}: {r['rps']:.0f} rps, p50 {r['p50']}, p99 {r['p99']} ms, "
              f"servers {r['server_cpu_ms_per_1k']:.1f}, walnut {r['walnut_cpu_ms_per_1k']:.1f} "
              f"(migrator {r['migrator_cpu_ms_per_1k']:.1f}) "
              f"ms/1k, load {os.getloadavg()[0]:.1f}", flush=True)
        if until(len(rows)):
            return rows


def is_migrator(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"walnut: migrator")
    except OSError:
        return False


def curr_items(port: int) -> int:
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += s.recv(65536)
    return int(re.search(rb"STAT curr_items (\d+)", buf).group(1))


def med(rows: list[dict], k: str) -> float:
    vals = [r[k] for r in rows if r.get(k) is not None]
    return statistics.median(vals) if vals else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=100000,
                    help="migration_rate, the pace's ceiling (walnut's default 100000)")
    ap.add_argument("--round", type=int, default=100_000, help="requests per load round")
    ap.add_argument("--steady-rounds", type=int, default=5)
    ap.add_argument("--max-rounds", type=int, default=0,
                    help="stop the migrating phase after this many rounds (0: at `done`); with a "
                         "low --rate, clients' pulls move nearly every key: their cost alone")
    ap.add_argument("--no-load", action="store_true",
                    help="no client load during the migration: the migrator alone moves every key")
    ap.add_argument("--anchor", action="store_true",
                    help="first, redis-cli --cluster reshard of the same keys (Redis only)")
    ap.add_argument("--memcached", action="store_true",
                    help="3 memcacheds instead of redis-servers")
    ap.add_argument("--remove", action="store_true",
                    help="start on 3 servers and remove the third (scale-in)")
    ap.add_argument("--paired", action="store_true",
                    help="while migrating, rounds in pairs: the migrator paused, then running (with --twin, in turn)")
    ap.add_argument("--twin", action="store_true",
                    help="with --paired: a round through a walnut without migration on the "
                         "servers before the reload, before each pair")
    ap.add_argument("--twin-after", action="store_true",
                    help="with --twin: the twin serves the configuration after the reload")
    ap.add_argument("--round-seconds", type=float, default=2.0,
                    help="with --memcached: seconds per load round")
    ap.add_argument("--out", default=str(HERE / "results" / "migration-run.md"))
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="walnut-bench-mig-"))
    anchor = reshard_anchor(work, args.keys) if args.anchor else None
    if anchor:
        print(f"anchor: redis-cli --cluster reshard {anchor}", flush=True)
    ports = [free_port() for _ in range(3)]
    servers: list[Proc] = []
    walnut = twin = None
    try:
        start = memcached if args.memcached else redis_server
        servers = [start(p, work, SERVER_CPU) for p in ports]
        listen, stats, adm = free_port(), free_port(), free_port()
        cfg = work / "walnut.yml"
        redis = not args.memcached
        before, after_ports = (ports, ports[:2]) if args.remove else (ports[:2], ports)
        cfg.write_text(conf(listen, before, args.rate, redis))
        walnut = Proc([WALNUT, "-c", str(cfg), "-s", str(stats), "-o", str(work / "walnut.log"),
                       "--workers", "2", "--cpu-affinity", "none", "--admin", f"{HOST}:{adm}"],
                      SERVER_CPU, work / "walnut.stdout").start([listen, adm])
        t = time.monotonic()
        load_rate = None
        if redis:
            load_keys(listen, args.keys)
        else:
            # mcload's key names when it reads them.
            load_rate = load_memcache(listen, args.keys,
                                      b"key:%012d" if args.no_load else b"key:%010d")
        print(f"loaded {args.keys} keys in {time.monotonic() - t:.1f} s", flush=True)
        twin_listen = free_port()
        if args.twin:
            twin_cfg = work / "twin.yml"
            twin_servers = after_ports if args.twin_after else before
            twin_cfg.write_text(conf(twin_listen, twin_servers, args.rate, redis, migration=False))
            twin = Proc([WALNUT, "-c", str(twin_cfg), "-s", str(free_port()),
                         "-o", str(work / "twin.log"), "--workers", "2",
                         "--cpu-affinity", "none"],
                        SERVER_CPU, work / "twin.stdout").start([twin_listen])

        mc_seconds = args.round_seconds if args.memcached else 0.0
        steady = [] if args.no_load else phase(listen, servers, args.keys, args.round,
                                               lambda n: n >= args.steady_rounds, walnut.pid,
                                               mc_seconds)
        if steady:
            print(f"steady: p50 {med(steady, 'p50')} p99 {med(steady, 'p99')} ms", flush=True)

        cfg.write_text(conf(listen, after_ports, args.rate, redis))
        t0 = time.monotonic()
        os.kill(walnut.pid, signal.SIGHUP)
        done_at: list[float] = []

        def finished(n: int) -> bool:
            if args.max_rounds and n >= args.max_rounds:
                return True
            st = migration_state(adm)
            if st.get("state") == "done":
                done_at.append(time.monotonic())
                return True
            return False

        cpu: dict[str, float] = {}
        paused: list[dict] = []
        twins: list[dict] = []
        if args.no_load:
            # CPU seconds of the migrator (its last reading before it
            # exits) and of the servers over the migration.
            pids = [s.pid for s in servers]
            c0 = sum(cpu_seconds(pids).values())
            while not finished(0):
                for pid in children_of(walnut.pid):
                    try:
                        title = Path(f"/proc/{pid}/cmdline").read_bytes()
                    except OSError:
                        continue
                    if title.startswith(b"walnut: migrator"):
                        cpu["migrator"] = cpu_seconds([pid]).get(pid, cpu.get("migrator", 0.0))
                time.sleep(0.2)
            cpu["servers"] = sum(cpu_seconds(pids).values()) - c0
            migrating = []
        elif args.paired:
            paused, migrating = [], []
            # With a twin, each cycle's three rounds in turn first, so that
            # no kind of round always follows the same other one.
            kinds = ["twin", "paused", "running"] if twin else ["paused", "running"]
            cycle = 0
            while True:
                order = kinds[cycle % len(kinds):] + kinds[:cycle % len(kinds)] if twin else kinds
                cycle += 1
                for kind in order:
                    if kind == "twin":
                        twins += phase(twin_listen, servers, args.keys, args.round,
                                       lambda n: True, twin.pid, mc_seconds)
                        continue
                    admin(adm, f"migration {'pause' if kind == 'paused' else 'resume'} rd")
                    (paused if kind == "paused" else migrating).extend(
                        phase(listen, servers, args.keys, args.round, lambda n: True,
                              walnut.pid, mc_seconds))
                if finished(len(migrating)):
                    break
            admin(adm, "migration resume rd")
        else:
            migrating = phase(listen, servers, args.keys, args.round, finished, walnut.pid,
                              mc_seconds)
        st = migration_state(adm)
        counts = {}
        for line in admin(adm, "metrics").splitlines():
            for name in ("pulled_keys", "moved_reads", "moved_rereads"):
                if line.startswith(f"walnut_worker_{name}_total{{"):
                    counts[name] = counts.get(name, 0) + float(line.rsplit(" ", 1)[1])
        after = [] if args.no_load or not done_at else phase(
            listen, servers, args.keys, args.round, lambda n: n >= args.steady_rounds, walnut.pid,
            mc_seconds)
        secs = done_at[0] - t0 if done_at else float("nan")
        print(f"migration: {st}", flush=True)
        dbsizes = [int(cli(p, "dbsize")) if redis else curr_items(p) for p in ports]
    finally:
        if twin:
            twin.stop()
        if walnut:
            walnut.stop()
        for s in servers:
            s.stop()

    backend = "memcacheds" if args.memcached else "redis-servers"
    lines = [
        "# Online scale-out under load (bench/migration.py)",
        "",
        (f"{args.keys} keys of 100 B on 3 {backend} behind walnut (2 workers); a reload removes "
         "the third" if args.remove else
         f"{args.keys} keys of 100 B on 2 {backend} behind walnut (2 workers); a reload adds a "
         "third server") + f"; `migration_rate: {args.rate}`. Load: "
        + (f"mcload gets, 50 connections, rounds of {args.round_seconds} s,"
           if args.memcached else f"redis-benchmark GET, 50 clients, {args.round} requests per round,"),
        "uniformly over the key space (CPU 0; servers and walnut on CPU 1). Medians over rounds.",
        "",
        "| phase | rounds | rps | p50 ms | p99 ms | servers' CPU ms / 1k requests | walnut's CPU ms / 1k requests | of which the migrator's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in (("steady", steady), ("migrating", migrating), ("after", after)):
        if not rows:
            lines.append(f"| {name} | no load (--no-load) | | | | | | |")
            continue
        lines.append(f"| {name} | {len(rows)} | {med(rows, 'rps'):.0f} | {med(rows, 'p50'):.3f} | "
                     f"{med(rows, 'p99'):.3f} | {med(rows, 'server_cpu_ms_per_1k'):.3f} | "
                     f"{med(rows, 'walnut_cpu_ms_per_1k'):.3f} | {med(rows, 'migrator_cpu_ms_per_1k'):.3f} |")
    if steady and migrating:
        for name, rows in (("steady", steady), ("after", after)):
            if rows:
                lines.append("")
                lines.append(
                    f"Migrating against {name}: requests/s "
                    f"{med(migrating, 'rps') / med(rows, 'rps') - 1:+.1%}, p50 "
                    f"×{med(migrating, 'p50') / med(rows, 'p50'):.2f}, p99 "
                    f"×{med(migrating, 'p99') / med(rows, 'p99'):.2f}.")
    if paused:
        # Pairs whose running round ended after the migration: left out.
        pairs = [(a, b) for a, b in zip(paused, migrating)][:len(migrating) - (1 if done_at else 0)]
        pairs = pairs or list(zip(paused, migrating))
        ratio = {k: statistics.median(b[k] / a[k] for a, b in pairs if a.get(k) and b.get(k))
                 for k in ("rps", "p50", "p99")}
        each = ", ".join(f"{b['rps'] / a['rps'] - 1:+.1%}" for a, b in pairs)
        lines += [
            "",
            f"Paired rounds (--paired), {len(pairs)} pairs, each the migrator paused and running: "
            f"running against paused, median of the pairs: requests/s {ratio['rps'] - 1:+.1%}, "
            f"p50 ×{ratio['p50']:.2f}, p99 ×{ratio['p99']:.2f}. Each pair's requests/s: {each}.",
            f"Paused rounds' medians: {med(paused, 'rps'):.0f} rps, p50 {med(paused, 'p50'):.3f}, "
            f"p99 {med(paused, 'p99'):.3f} ms (against steady: requests/s "
            + (f"{med(paused, 'rps') / med(steady, 'rps') - 1:+.1%})." if steady else "n/a)."),
        ]
    if twins:
        trios = list(zip(twins, paused, migrating))[:len(pairs)]
        which = "the configuration after the reload" if args.twin_after else "the configuration before"
        lines += ["", f"Twin rounds (--twin, {which}), {len(trios)} trios (twin, paused, running), "
                      "medians of each trio's ratios against its twin round:"]
        for name, i in (("paused", 1), ("running", 2)):
            r = {k: statistics.median(t[i][k] / t[0][k] for t in trios if t[0].get(k) and t[i].get(k))
                 for k in ("rps", "p50", "p99", "walnut_cpu_ms_per_1k", "server_cpu_ms_per_1k")}
            each = ", ".join(f"{t[i]['rps'] / t[0]['rps'] - 1:+.1%}" for t in trios)
            lines.append(
                f"- {name} against twin: requests/s {r['rps'] - 1:+.1%}, p50 ×{r['p50']:.2f}, "
                f"p99 ×{r['p99']:.2f}; walnut's CPU per 1k ×{r['walnut_cpu_ms_per_1k']:.2f}, "
                f"the servers' ×{r['server_cpu_ms_per_1k']:.2f}. Each trio's requests/s: {each}.")
        lines.append(f"Twin rounds' medians: {med(twins, 'rps'):.0f} rps, p50 {med(twins, 'p50'):.3f}, "
                     f"p99 {med(twins, 'p99'):.3f} ms.")
    lines += [
        "",
        f"Migration: {secs:.1f} s from the reload to `state=done` (the last round ends after it);",
        f"scanned {st.get('scanned')}, moved {st.get('moved')}, skipped {st.get('skipped')}, "
        f"failed {st.get('failed')}, {st.get('keys_per_second')} keys/s moved.",
        f"Keys per server afterwards: {dbsizes} (sum {sum(dbsizes)}); "
        + (f"{dbsizes[2]} left on the removed server." if args.remove else
           f"of the {dbsizes[2]} on the new server, {dbsizes[2] - int(st.get('moved') or 0)} "
           "were pulled by clients' requests (the rest by the migrator)."),
        f"Workers' counts: {', '.join(f'{k} {v:.0f}' for k, v in counts.items()) or 'none'} "
        "(keys pulled by requests; GETs of moved keys read where the key is, and how many "
        "of them went on to a second server).",
        f"Load average at the end: {os.getloadavg()[0]:.1f}.",
        "",
    ]
    moved = int(st.get("moved") or 0)
    lines.insert(-1, f"walnut: {moved} moved in {secs:.1f} s from the reload: "
                     f"{moved / secs:.0f} keys/s (reload to done).")
    if cpu:
        lines.insert(-1, f"CPU over the migration: servers {cpu['servers']:.1f} s, walnut's migrator "
                         f"{cpu.get('migrator', float('nan')):.1f} s (last reading, up to 0.2 s "
                         "before it ended).")
    if load_rate:
        lines.insert(-1, f"Loading the keys through walnut (pipelined sets): {load_rate:.0f} keys/s.")
    if anchor:
        lines.insert(-1, f"Anchor, same run: `redis-cli --cluster reshard` (pipeline 100) moved "
                         f"{anchor['moved']} keys in {anchor['seconds']:.1f} s: "
                         f"{anchor['keys_per_second']:.0f} keys/s ({anchor['left']} left on the "
                         f"first node).")
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
