#!/usr/bin/env python3
"""The code's shape in numbers: Rust files over 800 lines, functions over
100 lines, and `too_many_arguments` allows under src/ (the limits
ARCHITECTURE.md keeps). Exit 1 when any limit is passed. Also, for
information only, the methods of `impl Worker` blocks in src/worker
(what issue 33 counts: concerns should own their handlers).

    python3 scripts/shape.py [--quiet]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILE_MAX, FN_MAX = 800, 100
FN_START = re.compile(r"^\s*(pub(\([a-z]+\))?\s+)?(const\s+|unsafe\s+|async\s+)*fn\s+([A-Za-z0-9_]+)")


def functions(lines: list[str]):
    """(name, first line, length) of every fn with a body: braces counted
    from its signature, strings and comments ignored roughly (enough for
    this code base's style)."""
    i = 0
    while i < len(lines):
        m = FN_START.match(lines[i])
        if not m:
            i += 1
            continue
        depth, started, j = 0, False, i
        while j < len(lines):
            code = re.sub(r'"(\\.|[^"\\])*"', '""', lines[j].split("//")[0])
            code = re.sub(r"'(\\.|[^'\\])'", "''", code)
            if not started and ";" in code and "{" not in code:
                break  # a declaration without a body
            for ch in code:
                if ch == "{":
                    depth += 1
                    started = True
                elif ch == "}":
                    depth -= 1
            if started and depth <= 0:
                yield m.group(4), i + 1, j - i + 1
                break
            j += 1
        i += 1


WORKER_IMPL = re.compile(r"^\s*impl(<[^>]*>)?\s+(super::|crate::worker::)?Worker(<[^>]*>)?\s*\{")


def worker_methods() -> dict[str, int]:
    """Per file of src/worker, the fns at depth 1 of its `impl Worker`
    blocks."""
    out: dict[str, int] = {}
    for path in sorted((ROOT / "src" / "worker").rglob("*.rs")):
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            if not WORKER_IMPL.match(lines[i]):
                i += 1
                continue
            depth, j = 0, i
            while j < len(lines):
                code = re.sub(r'"(\\.|[^"\\])*"', '""', lines[j].split("//")[0])
                code = re.sub(r"'(\\.|[^'\\])'", "''", code)
                if j > i and depth == 1 and FN_START.match(lines[j]):
                    name = str(path.relative_to(ROOT))
                    out[name] = out.get(name, 0) + 1
                depth += code.count("{") - code.count("}")
                if j > i and depth <= 0:
                    break
                j += 1
            i = j + 1
    return out


def main() -> int:
    quiet = "--quiet" in sys.argv
    big_files, long_fns, allows = [], [], []
    for path in sorted((ROOT / "src").rglob("*.rs")):
        lines = path.read_text().splitlines()
        rel = path.relative_to(ROOT)
        if len(lines) > FILE_MAX:
            big_files.append((str(rel), len(lines)))
        for name, start, n in functions(lines):
            if n > FN_MAX:
                long_fns.append((f"{rel}:{start}", name, n))
        allows += [f"{rel}:{k + 1}" for k, l in enumerate(lines) if "too_many_arguments" in l]
    print(f"files over {FILE_MAX} lines: {len(big_files)}")
    for f, n in big_files:
        print(f"  {f} {n}")
    print(f"functions over {FN_MAX} lines: {len(long_fns)}")
    for where, name, n in sorted(long_fns, key=lambda x: -x[2]):
        print(f"  {where} {name} {n}")
    print(f"too_many_arguments allows: {len(allows)}")
    if not quiet:
        for a in allows:
            print(f"  {a}")
    methods = worker_methods()
    print(f"Worker methods: {sum(methods.values())}")
    if not quiet:
        for f, n in sorted(methods.items(), key=lambda x: -x[1]):
            print(f"  {f} {n}")
    return 1 if (big_files or long_fns or allows) else 0


if __name__ == "__main__":
    sys.exit(main())
