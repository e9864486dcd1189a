"""Open N client connections, send one request on each, read the reply, idle.

One process of the idle-connection scenario (bench/idle.py starts several,
each under the per-process descriptor limit). Every connection is bound to
one loopback source address (--source) so that several processes together
go past the ~28k ephemeral ports of a single source address.

At most --window connections are between connect() and their reply at any
time, so the proxy's listen backlog is not flooded. When every connection
has its reply (or --timeout passes) one JSON line is printed:

    {"n": .., "replied": .., "failed": .., "bad_reply": .., "errors": {..}, "secs": ..}

Then the process holds the connections until a line arrives on stdin (or
stdin closes, or --hold seconds pass), closes them all, prints
{"closed": n} and exits.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import select
import socket
import sys
import time

IP_BIND_ADDRESS_NO_PORT = 24  # linux/in.h: pick the port at connect(), per 4-tuple


def request(proto: str, i: int) -> tuple[bytes, bytes]:
    """The request for connection i and the exact reply expected (a miss)."""
    key = f"walnut-idle:{os.getpid()}:{i}".encode()
    if proto == "redis":
        req = b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key)
        return req, b"$-1\r\n"
    return b"get %s\r\n" % key, b"END\r\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--addr", required=True, help="HOST:PORT of the proxy")
    ap.add_argument("--source", required=True, help="loopback source address, e.g. 127.0.0.2")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--proto", choices=["redis", "memcache"], default="redis")
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds to open all")
    ap.add_argument("--hold", type=float, default=900.0, help="max seconds to hold them")
    args = ap.parse_args()
    host, port = args.addr.rsplit(":", 1)
    dest = (host, int(port))

    ep = select.epoll()
    conns: dict[int, list] = {}  # fd -> [sock, request, expected, received]
    done: list[socket.socket] = []
    errors: dict[str, int] = {}
    bad = 0
    next_i = 0
    t0 = time.monotonic()
    deadline = t0 + args.timeout

    def fail(fd: int, what: str) -> None:
        errors[what] = errors.get(what, 0) + 1
        sock = conns.pop(fd)[0]
        try:
            ep.unregister(fd)
        except OSError:
            pass
        sock.close()

    while (next_i < args.n or conns) and time.monotonic() < deadline:
        while next_i < args.n and len(conns) < args.window:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            s.bind((args.source, 0))
            s.setblocking(False)
            req, want = request(args.proto, next_i)
            next_i += 1
            rc = s.connect_ex(dest)
            if rc not in (0, errno.EINPROGRESS):
                errors[errno.errorcode.get(rc, str(rc))] = \
                    errors.get(errno.errorcode.get(rc, str(rc)), 0) + 1
                s.close()
                continue
            conns[s.fileno()] = [s, req, want, b""]
            ep.register(s.fileno(), select.EPOLLOUT)
        for fd, ev in ep.poll(0.5):
            c = conns.get(fd)
            if c is None:
                continue
            sock = c[0]
            if c[1]:  # connecting: writable = connected (or failed)
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    fail(fd, errno.errorcode.get(err, str(err)))
                    continue
                try:
                    sent = sock.send(c[1])
                except OSError as e:
                    fail(fd, errno.errorcode.get(e.errno or 0, "send"))
                    continue
                c[1] = c[1][sent:]
                if not c[1]:
                    ep.modify(fd, select.EPOLLIN)
                continue
            try:
                data = sock.recv(4096)
            except BlockingIOError:
                continue
            except OSError as e:
                fail(fd, errno.errorcode.get(e.errno or 0, "recv"))
                continue
            if not data:
                fail(fd, "eof")
                continue
            c[3] += data
            if len(c[3]) >= len(c[2]):
                if c[3] != c[2]:
                    bad += 1
                ep.unregister(fd)
                done.append(sock)
                del conns[fd]
    for fd in list(conns):
        fail(fd, "timeout")
    unopened = args.n - next_i
    if unopened:
        errors["not_started"] = unopened
    result = {"n": args.n, "replied": len(done) - bad, "failed": args.n - len(done) + bad,
              "bad_reply": bad, "errors": errors, "secs": round(time.monotonic() - t0, 3)}
    print(json.dumps(result), flush=True)

    # Hold until told to close (a line or EOF on stdin), bounded by --hold.
    r, _, _ = select.select([sys.stdin], [], [], args.hold)
    if r:
        sys.stdin.readline()
    for s in done:
        s.close()
    print(json.dumps({"closed": len(done)}), flush=True)


if __name__ == "__main__":
    main()
