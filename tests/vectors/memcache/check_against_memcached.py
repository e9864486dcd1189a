#!/usr/bin/env python3
"""Replay requests.txt against a real memcached and check that it answers
(and keeps or closes the connection) as the vectors say.

Usage: memcached -u root -l 127.0.0.1 -p PORT -U 0 &
       python3 check_against_memcached.py PORT
Lines longer than 2048 bytes that memcached reads in one go are answered,
where the vectors close (memcached's outcome there depends on how the bytes
arrive); those vectors are reported as "timing" and not counted as failures.
A vector whose input line is preceded by a "#! reason" line is a deliberate
difference from memcached and is reported, not failed.
"""
import os
import re
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def expand(s):
    return re.sub(r"\{rep:(\d+):([^}]*)\}", lambda m: m.group(2) * int(m.group(1)), s)


def unescape(s):
    out, i = bytearray(), 0
    simple = {"r": 13, "n": 10, "t": 9, "0": 0, "s": 32}
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            d = s[i + 1]
            if d == "x":
                out.append(int(s[i + 2:i + 4], 16))
                i += 4
                continue
            out.append(simple.get(d, ord(d)))
            i += 2
            continue
        out += c.encode()
        i += 1
    return bytes(out)


def talk(port, data, wait=0.3):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(data)
    s.settimeout(wait)
    out, closed = b"", False
    try:
        while True:
            d = s.recv(65536)
            if not d:
                closed = True
                break
            out += d
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    s.close()
    return out, closed


def fields(s):
    return dict(f.split("=", 1) if "=" in f else (f, "") for f in s.split())


def main():
    port = int(sys.argv[1])
    version, _ = talk(port, b"version\r\n")
    fails = timing = total = 0
    inp = None
    deviation = None
    pending = None
    for line in open(os.path.join(HERE, "requests.txt")):
        line = line.rstrip("\n")
        if line.startswith("#!"):
            pending = line[2:].strip()
            continue
        if line.startswith("#"):
            continue
        line = expand(line)
        if line.startswith("> "):
            inp = unescape(line[2:])
            deviation, pending = pending, None
            continue
        if not line.startswith("= ") or inp is None:
            continue
        kind, f = line[2:].split()[0], fields(line[2:])
        total += 1
        ok, note = True, ""
        if kind == "error" and f.get("close") == "1":
            out, closed = talk(port, inp)
            ok = closed and out == b""
            if not ok and b"\n" in inp:
                timing += 1
                ok, note = True, "timing"
        elif kind == "error":
            skip = int(f["skip"])
            reply = unescape(f.get("reply", ""))
            if skip > len(inp):
                # The rest of a rejected data block: send it, then check
                # that the stream is in step again.
                inp = inp + b"x" * (skip - len(inp) - 2) + b"\r\n"
            out, closed = talk(port, inp[:skip] + b"version\r\n")
            ok = not closed and out == reply + version
        elif kind == "done":
            n = int(f["len"])
            route = f["route"]
            out, closed = talk(port, inp[:n] + b"version\r\n")
            if route.startswith("quit"):
                ok = closed and out == b""
            elif route.startswith("reply:"):
                ok = out == unescape(route[6:]) + version or route.startswith("reply:VERSION")
            elif route == "stats":
                ok = out.startswith(b"STAT ") or out.startswith(b"CLIENT_ERROR usage")
            else:
                body = out[: len(out) - len(version)]
                ok = out.endswith(version) and not re.match(rb"(ERROR|CLIENT_ERROR|SERVER_ERROR)", body)
                if f.get("noreply") == "1":
                    ok = ok and body == b""
        elif kind == "incomplete":
            out, closed = talk(port, inp)
            ok = out == b"" and not closed
        if not ok and deviation:
            ok, note = True, "deviation: " + deviation
        if not ok:
            fails += 1
            print("FAIL", repr(inp[:80]), line[:120], "=>", repr(out[:120]), "closed" if closed else "")
        elif note:
            print("NOTE", note, repr(inp[:60]))
    print(f"{total} vectors, {fails} failures, {timing} timing-dependent")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
