"""Medians over repetitions, ratios, and the Markdown / CSV / PNG outputs."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

# Idle-connection fields (bench/idle.py).
IDLE = ["replied", "held", "accepted", "refused", "rss_mb_base", "pss_kb_per_conn",
        "pss_mb_total", "rss_mb_after_close", "rss_mb_open_2", "rss_mb_open_3",
        "rss_mb_after_close_3",
        "growth_kb_per_conn", "max_proc_fds", "procs", "open_secs", "close_secs"]
FIELDS = ["rps", "p50", "p99", "p999", "cpu_per_M", "rss_kb_per_conn", "over_30ms",
          "requests", "accept_eagain", "rss_mb_total", "cpu_split"] + IDLE
COLUMNS = ["section", "scenario", "target", "reps", "rps", "p50", "p99", "p999", "cpu_per_M",
           "rss_kb_per_conn", "over_30ms_per_M", "accept_eagain", "rss_mb_total",
           "rps_vs_nutcracker", "rps_vs_direct", "cpu_vs_nutcracker", "cpu_vs_predixy",
           "cpu_vs_best_peer", "cpu_vs_before", "cpu_split"] + IDLE + ["note"]
# CPUs of each target in the workers section.
WORKERS_CPUS = {"nutcracker": "1", "nutcracker-x2": "0-1 (both)", "walnut": "1",
                "walnut-before": "1", "walnut-2w": "0-1"}
IDLE_COLUMNS = ["section", "scenario", "target", "requests", "rss_mb_total",
                "rss_kb_per_conn"] + IDLE + ["note"]


def write_table(lines: list[str], out: str | None) -> None:
    """Print a Markdown table (its lines) and write it to `out` if given."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        Path(out).write_text(text)


def _median(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def summarize(rows: list[dict]) -> list[dict]:
    """One row per (section, scenario, target) with medians and ratios."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["section"], r["scenario"], r["target"]), []).append(r)
    out = []
    for (section, scenario, target), rs in groups.items():
        s = {"section": section, "scenario": scenario, "target": target, "reps": len(rs),
             "note": rs[0].get("note", "")}
        for f in FIELDS:
            s[f] = _median([r.get(f) for r in rs])
        over = [r["over_30ms"] / r["requests"] * 1e6 for r in rs
                if r.get("over_30ms") is not None and r.get("requests")]
        s["over_30ms_per_M"] = _median(over)
        out.append(s)
    by = {(s["section"], s["scenario"], s["target"]): s for s in out}
    for s in out:
        # The workers section sets nutcracker-x2 against 1 nutcracker too.
        if not (s["target"].startswith("walnut")
                or s["section"] == "workers" and s["target"] != "nutcracker"):
            continue
        key = (s["section"], s["scenario"])
        nc, direct = by.get((*key, "nutcracker")), by.get((*key, "direct"))
        s["rps_vs_nutcracker"] = _ratio(s["rps"], nc and nc["rps"])
        s["rps_vs_direct"] = _ratio(s["rps"], direct and direct["rps"])
        s["cpu_vs_nutcracker"] = _ratio(s["cpu_per_M"], nc and nc["cpu_per_M"])
        pd = by.get((*key, "predixy"))
        s["cpu_vs_predixy"] = _ratio(s["cpu_per_M"], pd and pd["cpu_per_M"])
        peers = [p["cpu_per_M"] for p in (nc, pd) if p and p.get("cpu_per_M")]
        s["cpu_vs_best_peer"] = _ratio(s["cpu_per_M"], min(peers) if peers else None)
        before = by.get((*key, "walnut-before")) if s["target"] == "walnut" else None
        s["cpu_vs_before"] = _ratio(s["cpu_per_M"], before and before["cpu_per_M"])
    return out


def _ratio(a, b) -> float | None:
    return a / b if a is not None and b else None


def write_csv(summary: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for s in summary:
            w.writerow({k: _fmt(s.get(k), csv_mode=True) for k in COLUMNS})


def _fmt(v, digits: int = 2, csv_mode: bool = False) -> str:
    if v is None or v == "":
        return "" if csv_mode else "n/a"
    if isinstance(v, float):
        if csv_mode:
            return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.{digits}f}"
    return str(v)


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) if not isinstance(c, str) else c for c in r) + " |"
              for r in rows]
    return lines + [""]


def markdown(summary: list[dict], meta: dict) -> str:
    """The results as Markdown tables, one per section."""
    out = [
        "# walnut benchmark: walnut vs nutcracker 0.5.0 (and predixy, Redis only, when built) "
        "vs the bare backend", "",
        f"Mode **{meta['mode']}**, {meta['date']}, host {meta['host']} ({meta['cpus']} CPUs, "
        f"Linux {meta['kernel']}); medians of {meta['reps']} runs of ~{meta['secs']} s each; "
        f"whole run {meta.get('elapsed_s', '?')} s. Load average at start "
        f"{' '.join(meta['loadavg_start'])}, at end {' '.join(meta.get('loadavg_end', []))}.",
        "",
        "The machine is shared and noisy (2 cores, other builds running): take single "
        "figures with a grain of salt, the ratios within one run are the useful part.",
        "",
        "Pinning: redis-server / memcached (3 each) and the load generator on CPU 0; "
        "nutcracker, predixy (1 thread) and 1-worker walnut (and *walnut-before*, when run) on "
        "CPU 1; 2-worker walnut on CPUs 0-1 (shares CPU 0 "
        "with backends and generator). *direct* = the generator talking to the first backend "
        "(for 3-server pools it holds every key). Latencies in ms; CPU = proxy master + workers "
        "utime+stime, seconds per million requests (an MGET / multi-get of 10 keys counts as "
        "one request); RSS/conn = (peak RSS during the run - RSS before) / 50 connections, KiB.",
        "",
        "Generators: redis-benchmark 7 (p99.9 = first HDR bucket >= 99.9 %); memcached: "
        "bench/loadgen `mcload` (memcaslap gives no percentiles), plus one memcaslap row "
        "(throughput only).", "",
        "## Load", "",
        "memcached `-P16` / `-P64` rows: `mcload --pipeline N`, N requests written at once per "
        "connection and the next N once all replies are in (a pipelined multi-get sends N "
        "`get` lines of 10 keys each); gets hit (keys stored first).", "",
    ]
    load = [s for s in summary if s["section"] == "load"]
    before = any(s["target"] == "walnut-before" for s in summary)
    if before:
        out += ["*walnut-before* = a 1-worker walnut from an older binary (`WALNUT_BEFORE`), "
                "pinned like walnut; *CPU vs before* = walnut's CPU per request / "
                "walnut-before's.", ""]
    out += _table(
        ["scenario", "target", "req/s", "p50", "p99", "p99.9", "CPU s/M req", "RSS KiB/conn",
         "req/s vs nutcracker", "req/s vs direct", "CPU vs nutcracker", "CPU vs predixy",
         "CPU vs best peer"] + (["CPU vs before"] if before else []),
        [[s["scenario"], s["target"], s["rps"], s["p50"], s["p99"], s["p999"], s["cpu_per_M"],
          s["rss_kb_per_conn"], s.get("rps_vs_nutcracker"), s.get("rps_vs_direct"),
          s.get("cpu_vs_nutcracker"), s.get("cpu_vs_predixy"), s.get("cpu_vs_best_peer")]
         + ([s.get("cpu_vs_before")] if before else []) for s in load])
    wk = [s for s in summary if s["section"] == "workers"]
    if wk:
        out += ["## walnut workers vs 2 nutcrackers behind SO_REUSEPORT", "",
                "How twemproxy is scaled past one core today: several nutcrackers with the "
                "same YAML, their pools' listeners sharing one address with SO_REUSEPORT "
                "(the pool key `reuseport: true`; for a nutcracker without that key, 0.5.0 "
                "among them, the same socket option set by an LD_PRELOAD shim before bind()), "
                "the kernel spreading connections over them by a hash of the 4-tuple. "
                "*nutcracker-x2* = two such nutcrackers, both on CPUs 0-1 (not one per CPU: "
                "the same as walnut-2w's two workers, which walnut leaves unpinned here, "
                "`--cpu-affinity none`); *walnut-2w* = `--workers 2` (reuseport "
                "listeners, walnut's default); nutcracker and 1-worker walnut on CPU 1. "
                "CPU = all processes of the target. *busier process* = the share of the "
                "two nutcrackers' CPU taken by the busier one (50 % = an even split of the "
                "50 client connections). On this 2-CPU machine the backends and the load "
                "generator share CPU 0 with the second nutcracker / second worker, so the "
                "2-process figures are a lower bound of what a free second core would give.",
                ""]
        out += _table(
            ["scenario", "target", "CPUs", "req/s", "p50", "p99", "CPU s/M req",
             "req/s vs 1 nutcracker", "CPU vs 1 nutcracker", "busier process"],
            [[s["scenario"], s["target"], WORKERS_CPUS.get(s["target"], "?"), s["rps"],
              s["p50"], s["p99"], s["cpu_per_M"], s.get("rps_vs_nutcracker"),
              s.get("cpu_vs_nutcracker"),
              "" if s.get("cpu_split") is None else f"{s['cpu_split']:.0f} %"]
             for s in wk])
    lst = [s for s in summary if s["section"] == "listener"]
    if lst:
        out += ["## walnut listener modes (2 workers, redis-benchmark -k 0: one connection "
                "per GET)", "",
                "accept_eagain = wasted accept wakeups (accept found no connection) summed over "
                "workers, read from walnut's admin port (GET /metrics).", ""]
        out += _table(["mode", "conn+GET/s", "p50", "p99", "CPU s/M req", "accept_eagain"],
                      [[s["scenario"], s["rps"], s["p50"], s["p99"], s["cpu_per_M"],
                        s["accept_eagain"]] for s in lst])
    qa = [s for s in summary if s["section"] == "quickack"]
    if qa:
        out += ["## 40 ms-class outliers (requests > 30 ms per million), mcload, 50 conns", "",
                "direct = memcached with no proxy in between: what it counts is this "
                "machine's own stalls (scheduling), the floor a proxy is measured against. "
                "A delayed-ACK stall would show for walnut with QUICKACK off and not with it "
                "on.", ""]
        out += _table(["scenario", "proxy", "req/s", "p99", "p99.9", "> 30 ms per M"],
                      [[s["scenario"], s["target"], s["rps"], s["p99"], s["p999"],
                        s["over_30ms_per_M"]] for s in qa])
    idle = [s for s in summary if s["section"] == "idle"]
    if idle:
        out += ["## Idle client connections (bench/idle.py; Redis pool, one GET each)", ""]
        if meta.get("idle_verdict"):
            out += [f"**{meta['idle_verdict']}**", ""]
        out += [IDLE_METHOD, ""]
        out += idle_table(idle)
    return "\n".join(out)


IDLE_METHOD = (
    "Method (bench/idle.py): for each count a freshly started proxy gets a 200-connection "
    "warm-up, then three cycles of: open the connections, measure, close them all, measure. "
    "Connections are opened by bench/idle_open.py processes (at most 15 000 each, each bound "
    "to its own loopback source address); each sends one Redis GET that the proxy forwards "
    "to redis-server, reads the `$-1` reply, then idles. RSS = sum of VmRSS over the proxy's "
    "master and workers (pages shared between them, such as the binary's text and the "
    "shared-memory counters, count once per process); PSS = sum of Pss (shared pages "
    "divided among the processes). KiB/conn = (RSS open - RSS before) / connections, cycle "
    "1. *after close* = RSS once the kernel shows no proxy-side connection left, followed "
    "for up to 2.5 s (a walnut worker returns freed heap on its once-a-second tick). "
    "*growth 2→3* = change of the open RSS from cycle 2 to cycle 3 per connection: a leak "
    "shows there, the allocator's first growth in cycle 1 does not. *held* = client "
    "connections the proxy reports (walnut: curr_connections from its shared-memory "
    "counters; nutcracker: proxy-side sockets from `ss`, as its stats JSON lags by its -i "
    "interval); *accepted* = walnut's total_connections delta; *refused* = walnut log "
    "lines for a connection not taken (accept error, max_connections, client_connections), "
    "all cycles. walnut-8w = `--workers 8`, reuseport listeners, CPUs 0-1; walnut and "
    "nutcracker = one process on CPU 1. nutcracker is a single process: under the 20 000 "
    "descriptor limit it holds at most ~19 900 clients, so it is measured at 10 000 and "
    "19 000 only (the same for 1-worker walnut, for the like-for-like comparison).")


def idle_table(idle: list[dict]) -> list[str]:
    """The idle-connection rows as a Markdown table."""
    def mib(v):
        return f"{v:.1f}" if v is not None else "n/a"

    def held(s):
        if s["held"] is None:
            return "n/a"
        return f"{s['held']:.0f}" + ("" if s["accepted"] is None else
                                     f" / {s['accepted']:.0f}")

    return _table(
        ["connections", "proxy", "replied", "held / accepted", "refused", "RSS before MiB",
         "RSS open MiB", "RSS KiB/conn", "PSS open MiB", "PSS KiB/conn",
         "RSS after close MiB", "cycles 2, 3: RSS open MiB",
         "growth 2→3 KiB/conn", "cycle 3: RSS after close MiB", "max fds / process",
         "open s", "note"],
        [[s["scenario"].replace(" idle conns", ""), s["target"],
          "n/a" if s["replied"] is None else f"{s['replied']:.0f}", held(s),
          "n/a" if s["refused"] is None else f"{s['refused']:.0f}",
          mib(s["rss_mb_base"]), mib(s["rss_mb_total"]), s["rss_kb_per_conn"],
          mib(s["pss_mb_total"]), s["pss_kb_per_conn"], mib(s["rss_mb_after_close"]),
          f"{mib(s['rss_mb_open_2'])}, {mib(s['rss_mb_open_3'])}",
          s["growth_kb_per_conn"], mib(s["rss_mb_after_close_3"]),
          "n/a" if s["max_proc_fds"] is None else f"{s['max_proc_fds']:.0f}",
          s["open_secs"], s["note"] or ""] for s in idle])


def write_idle(rows: list[dict], meta: dict, out: Path, verdict: str) -> None:
    """idle.md and idle.csv: the idle-connection scenario on its own."""
    idle = summarize([r for r in rows if r["section"] == "idle"])
    with open(out / "idle.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=IDLE_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for s in idle:
            w.writerow({k: _fmt(s.get(k), csv_mode=True) for k in IDLE_COLUMNS})
    md = [
        "# walnut idle client connections: memory per connection, up to 100 000", "",
        f"{meta['date']}, whole run {meta.get('elapsed_s', '?')} s, load average at start "
        f"{' '.join(meta['loadavg_start'])}, at end {' '.join(meta.get('loadavg_end', []))}; "
        f"RLIMIT_NOFILE hard limit {meta.get('nofile', '?')} per process.", "",
        f"**{verdict}**", "",
        IDLE_METHOD, "",
    ]
    md += idle_table(idle)
    (out / "idle.md").write_text("\n".join(md))


def chart(summary: list[dict], path: Path) -> None:
    """Bars of throughput and CPU per request, per scenario and target."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no chart")
        return
    load = [s for s in summary if s["section"] == "load"]
    scen = list(dict.fromkeys(s["scenario"] for s in load))
    targets = ["direct", "nutcracker", "walnut", "walnut-2w"]
    if any(s["target"] == "walnut-before" for s in load):
        targets.insert(3, "walnut-before")
    by = {(s["scenario"], s["target"]): s for s in load}
    fig, axes = plt.subplots(2, 1, figsize=(14, 9), sharex=True)
    width = 0.8 / len(targets)
    for i, t in enumerate(targets):
        xs = [j + (i - (len(targets) - 1) / 2) * width for j in range(len(scen))]
        rps = [(by.get((sc, t)) or {}).get("rps") or 0 for sc in scen]
        cpu = [(by.get((sc, t)) or {}).get("cpu_per_M") or 0 for sc in scen]
        axes[0].bar(xs, [r / 1000 for r in rps], width, label=t)
        axes[1].bar(xs, cpu, width, label=t)
    axes[0].set_ylabel("throughput, k req/s")
    axes[1].set_ylabel("proxy CPU s per M req")
    axes[0].legend()
    axes[0].set_title("walnut vs nutcracker vs direct (medians; noisy shared 2-core host)")
    axes[1].set_xticks(range(len(scen)))
    axes[1].set_xticklabels(scen, rotation=35, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
