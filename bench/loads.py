"""Load generators: redis-benchmark, memcaslap (memaslap) and bench/loadgen.

Each runner returns a dict with requests, rps, p50/p99/p999 (ms, None when the
tool cannot tell) and over_30ms (None when unknown).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

from procs import HOST, ROOT

MCLOAD = os.environ.get("MCLOAD_BIN",
                        str(ROOT / "bench" / "loadgen" / "target" / "release" / "mcload"))
GEN_CPU = "0"


def _run(argv: list[str], timeout: float) -> str:
    out = subprocess.run(["taskset", "-c", GEN_CPU, *argv], capture_output=True,
                         timeout=timeout, check=False)
    text = out.stdout.decode("utf-8", "replace")
    if out.returncode != 0:
        err = out.stderr.decode("utf-8", "replace")
        raise RuntimeError(f"{argv[0]} failed ({out.returncode}): {err[-500:]} {text[-500:]}")
    return text


def redis_benchmark(port: int, n: int, clients: int = 50, pipeline: int = 1,
                    test: str = "get", size: int = 100, keyspace: int = 10000,
                    command: list[str] | None = None, keepalive: bool = True) -> dict:
    """Run redis-benchmark once; parse its summary and percentile distribution."""
    argv = ["redis-benchmark", "-h", HOST, "-p", str(port), "-n", str(n), "-c", str(clients),
            "-P", str(pipeline), "-d", str(size), "-r", str(keyspace), "--precision", "3"]
    if not keepalive:
        argv += ["-k", "0"]
    argv += command if command else ["-t", test]
    text = _run(argv, timeout=600).replace("\r", "\n")
    res: dict = {"requests": n, "over_30ms": None}
    m = re.search(r"throughput summary: ([\d.]+) requests per second", text)
    if not m:
        raise RuntimeError(f"no throughput in redis-benchmark output: {text[-800:]}")
    res["rps"] = float(m.group(1))
    m = re.search(r"latency summary \(msec\):\s*\n\s*avg\s+min\s+p50\s+p95\s+p99\s+max\s*\n"
                  r"\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", text)
    res["p50"] = float(m.group(3)) if m else None
    res["p99"] = float(m.group(5)) if m else None
    # p99.9: first line of the HDR percentile distribution at or above 99.9 %.
    res["p999"] = None
    for pct, ms in re.findall(r"^([\d.]+)% <= ([\d.]+) milliseconds", text, re.M):
        if float(pct) >= 99.9:
            res["p999"] = float(ms)
            break
    return res


def mcload(port: int, seconds: float, conns: int = 50, get_ratio: float = 0.9,
           mget: int = 1, size: int = 100, keyspace: int = 10000, pipeline: int = 1,
           prefill: bool = False) -> dict:
    """Run bench/loadgen (memcached text protocol, per-request latencies)."""
    argv = [str(MCLOAD), "--addr", f"{HOST}:{port}", "--duration", str(seconds),
            "--conns", str(conns), "--get-ratio", str(get_ratio), "--mget", str(mget),
            "--value-size", str(size), "--keyspace", str(keyspace),
            "--pipeline", str(pipeline)]
    if prefill:
        argv.append("--prefill")
    doc = json.loads(_run(argv, timeout=seconds + 120).strip().splitlines()[-1])
    if doc["errors"]:
        raise RuntimeError(f"mcload saw {doc['errors']} error replies")
    return {"requests": doc["requests"], "rps": doc["rps"], "p50": doc["p50_ms"],
            "p99": doc["p99_ms"], "p999": doc["p999_ms"], "over_30ms": doc["over_30ms"]}


def mcload_prefill(port: int, size: int = 100, keyspace: int = 10000) -> None:
    """Store every key of the keyspace once (`mcload --prefill`, next to no
    load after it), so that a measured run that follows finds them."""
    mcload(port, 0.0, conns=1, size=size, keyspace=keyspace, prefill=True)


def memaslap(port: int, seconds: float, size: int = 100, conns: int = 50) -> dict:
    """Run memcaslap with a 9:1 get/set mix; throughput only (no percentiles)."""
    cfg = f"key\n20 20 1\nvalue\n{size} {size} 1\ncmd\n0 0.1\n1 0.9\n"
    with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as f:
        f.write(cfg)
    try:
        text = _run(["memcaslap", "-s", f"{HOST}:{port}", "-T", "1", "-c", str(conns),
                     "-t", f"{max(1, round(seconds))}s", "-F", f.name], timeout=seconds + 60)
    finally:
        Path(f.name).unlink(missing_ok=True)
    m = re.search(r"Run time: ([\d.]+)s Ops: (\d+) TPS: (\d+)", text)
    if not m:
        raise RuntimeError(f"no summary in memcaslap output: {text[-800:]}")
    return {"requests": int(m.group(2)), "rps": float(m.group(3)), "p50": None,
            "p99": None, "p999": None, "over_30ms": None}
