"""scripts/demo.sh --smoke: the demo starts, serves both pools, the stats
and admin ports, and DEMO_PORT_BASE moves every one of its ports."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess

import pytest

from procs import REPO_ROOT, can_connect

# Offsets of the demo's ports from DEMO_PORT_BASE (scripts/demo.sh).
OFFSETS = (121, 122, 211, 212, 222, 223, 379, 380)


def free_base() -> int:
    for _ in range(200):
        base = random.randrange(2000, 32000 - 400, 100)
        if not any(can_connect(base + o) for o in OFFSETS):
            return base
    raise RuntimeError("no free port range for the demo")


def test_demo_smoke_on_moved_ports() -> None:
    for tool in ("memcached", "redis-server", "redis-cli", "nc"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed (the demo would install it with apt)")
    if not os.path.exists(REPO_ROOT / "target/release/walnut") and not shutil.which("cargo"):
        pytest.skip("no walnut build and no cargo")
    base = free_base()
    env = dict(os.environ, DEMO_PORT_BASE=str(base))
    out = subprocess.run(
        ["scripts/demo.sh", "--smoke"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)
    assert out.returncode == 0, text
    assert "smoke: ok" in text
    # Every port the demo prints is one of the moved ones, none a default.
    printed = {int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", text)}
    printed |= {int(p) for p in re.findall(r"-p (\d+)", text)}
    printed |= {int(p) for pair in re.findall(r"backends (\d+) (\d+)", text) for p in pair}
    assert printed == {base + o for o in OFFSETS}, (sorted(printed), text)
    assert f"--admin 127.0.0.1:{base + 223}" in text
    # Everything it started is stopped again.
    assert not any(can_connect(base + o) for o in OFFSETS)
