"""The Grafana dashboard in dist/grafana/walnut.json queries only series
walnut's /metrics really has, with the labels it groups and filters by
(Grafana itself is not run: its queries are checked against a real scrape
of a walnut with traffic, hot keys and a migration going on)."""

from __future__ import annotations

import json
import re
import signal
import urllib.request
from pathlib import Path

import redis
from pymemcache.client.base import Client as MemcacheClient

from procmodel import wait_workers
from procs import HOST, Proxy, free_port, memcache_pool, redis_pool, to_yaml, wait_until
from test_migration_bg import admin

DASHBOARD = Path(__file__).resolve().parents[2] / "dist" / "grafana" / "walnut.json"


def series(scrape: str) -> dict[str, list[set[str]]]:
    """metric name -> label-name sets of its series."""
    out: dict[str, list[set[str]]] = {}
    for line in scrape.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s", line)
        assert m, line
        labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(3) or ""))
        out.setdefault(m.group(1), []).append(labels)
    return out


def test_every_dashboard_query_names_real_series(procs):
    mcs = procs.memcacheds(3)
    rds = [procs.redis() for _ in range(2)]
    mc_port, rd_port = free_port(), free_port()

    def conf(n: int) -> str:
        return to_yaml({
            "mc": memcache_pool(mcs[:n], listen=f"{HOST}:{mc_port}", migration=True),
            "rd": redis_pool(rds, listen=f"{HOST}:{rd_port}"),
        })

    p = Proxy("walnut", procs.workdir, {}, extra_args=["--workers", "2"])
    p.conf_path.write_text(conf(2))
    p.ports = {"mc": mc_port, "rd": rd_port}
    procs.started.append(p)
    p.start()
    gen = wait_workers(p.pid, 2)
    mc = MemcacheClient((HOST, mc_port))
    r = redis.Redis(host=HOST, port=rd_port, protocol=2)
    for i in range(300):
        mc.set(f"k{i}", b"v", noreply=False)
        r.set(f"k{i}", "v")
    p.conf_path.write_text(conf(3))
    p.signal(signal.SIGHUP)
    wait_workers(p.pid, 2, exclude=gen.values())
    wait_until(lambda: "pool=mc" in admin(p.admin_port, "migration"), 20, what="a migration")

    def traffic_seen() -> bool:
        for _ in range(200):
            mc.get("hot")
            r.get("hot")
        return 'key="hot"' in admin(p.admin_port, "metrics")
    wait_until(traffic_seen, 20, what="hot keys in /metrics")
    with urllib.request.urlopen(f"http://{HOST}:{p.admin_port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        scrape = resp.read().decode()
    have = series(scrape)

    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dash["panels"] for t in panel["targets"]]
    var = dash["templating"]["list"][1]["query"]["query"]
    assert len(exprs) >= 14, exprs
    checked = set()
    for expr in exprs + [var]:
        names = re.findall(r"\bwalnut_[a-z0-9_]+", expr)
        assert names, expr
        grouped = set()
        for g in re.findall(r"by \(([^)]*)\)", expr):
            grouped |= {x.strip() for x in g.split(",")} - {"le"}
        grouped |= set(re.findall(r"([a-z_]+)=~", expr))
        grouped |= set(re.findall(r"label_values\([a-z_]+, ([a-z_]+)\)", expr))
        for name in names:
            assert name in have, f"{name} (in {expr!r}) is not in /metrics"
            labels = set().union(*have[name])
            assert grouped <= labels, f"{name} lacks {grouped - labels} (in {expr!r})"
            checked.add(name)
    # Every area the dashboard promises is there.
    for family in ("walnut_server_requests_total", "walnut_request_duration_seconds_bucket",
                   "walnut_server_request_duration_seconds_bucket", "walnut_pool_client_connections",
                   "walnut_pool_server_ejections_total", "walnut_worker_resident_memory_bytes",
                   "walnut_hotkey_requests_per_second", "walnut_migration_keys_total"):
        assert family in checked, family
