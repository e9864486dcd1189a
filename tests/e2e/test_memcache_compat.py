"""memcached behaviours checked side by side with a real memcached 1.6:
a too-large set removes the old item (text, meta, binary), an HTTP-looking
request closes the connection without a reply, `stats` carries memcached's
common fields summed over workers and its groups always get a complete
reply, and `flush_all` is refused unless the pool opts in (`allow_flush`)
with the reply memcached started with `-F` gives."""

from __future__ import annotations

import struct
import uuid

import pytest

from procmodel import mc_stats
from procs import RawConn, memcache_pool

BIG = 1049600  # over memcached's 1 MiB item and walnut's default max_value_size


def unique(prefix: str = "k") -> bytes:
    return f"{prefix}{uuid.uuid4().hex[:10]}".encode()


def transcript(port: int, steps: list[tuple[bytes, bytes]]) -> list[bytes]:
    """Send each request and read its reply up to its terminator."""
    out = []
    with RawConn(port, timeout=10) as c:
        for req, term in steps:
            out.append(c.request(req, term))
    return out


def too_large_steps(key: bytes, verb: bytes) -> list[tuple[bytes, bytes]]:
    return [
        (b"set %s 0 0 3\r\nMOO\r\n" % key, b"\r\n"),
        (b"%s %s 0 0 %d\r\n%s\r\n" % (verb, key, BIG, b"x" * BIG), b"\r\n"),
        (b"get %s\r\n" % key, b"END\r\n"),
    ]


@pytest.fixture
def pair(procs):
    """A memcached, and walnut (two workers) in front of another one."""
    direct = procs.memcached()
    backend = procs.memcached()
    proxy = procs.proxy("walnut", {"mc": memcache_pool([backend])}, extra_args=["--workers", "2"])
    return direct, backend, proxy


@pytest.mark.parametrize("verb", [b"set", b"add", b"replace", b"append", b"prepend"])
def test_too_large_store_as_memcached(pair, verb):
    direct, _, proxy = pair
    key = unique()
    want = transcript(direct.port, too_large_steps(key, verb))
    got = transcript(proxy.port(), too_large_steps(key, verb))
    assert got == want
    assert want[1] == b"SERVER_ERROR object too large for cache\r\n"
    # memcached unlinks the old item for set only.
    assert (want[2] == b"END\r\n") == (verb == b"set")


def test_too_large_set_noreply_and_meta_as_memcached(pair):
    direct, backend, proxy = pair
    for port in (direct.port, proxy.port()):
        k1, k2 = unique("n"), unique("m")
        steps = [
            (b"set %s 0 0 3\r\nMOO\r\nset %s 0 0 3\r\nMOO\r\n" % (k1, k2), b"STORED\r\nSTORED\r\n"),
            (b"set %s 0 0 %d noreply\r\n%s\r\nget %s\r\n" % (k1, BIG, b"x" * BIG, k1), b"END\r\n"),
            (b"ms %s %d T0 q\r\n%s\r\n" % (k2, BIG, b"y" * BIG), b"\r\n"),
            (b"get %s\r\n" % k2, b"END\r\n"),
        ]
        assert transcript(port, steps)[1:] == [
            b"END\r\n", b"SERVER_ERROR object too large for cache\r\n", b"END\r\n",
        ], port
    # The delete reached the backend: the old values are gone there too.
    with RawConn(backend.port) as c:
        assert c.request(b"get %s %s\r\n" % (k1, k2), b"END\r\n") == b"END\r\n"


def bin_packet(op: int, key: bytes, value: bytes = b"", extras: bytes = b"", opaque: int = 0) -> bytes:
    body = len(extras) + len(key) + len(value)
    return struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(extras), 0, 0, body, opaque, 0) + extras + key + value


def bin_replies(port: int, packets: list[bytes], n: int) -> list[tuple[int, int, int, bytes]]:
    """(opcode, status, opaque, value) of the first ``n`` replies."""
    out = []
    with RawConn(port, timeout=10) as c:
        c.send(b"".join(packets))
        for _ in range(n):
            head = c.read_exactly(24)
            _, op, klen, elen, _, status, body, opaque, _ = struct.unpack(">BBHBBHIIQ", head)
            data = c.read_exactly(body)
            out.append((op, status, opaque, data[elen + klen:]))
    return out


@pytest.mark.parametrize("op", [0x01, 0x11, 0x02])  # SET, SETQ, ADD
def test_binary_too_large_store_as_memcached(pair, op):
    direct, _, proxy = pair
    got = {}
    for port in (direct.port, proxy.port()):
        key = b"bin-%d" % op
        packets = [
            bin_packet(0x01, key, b"MOO", b"\0" * 8, opaque=1),
            bin_packet(op, key, b"x" * BIG, b"\0" * 8, opaque=2),
            bin_packet(0x00, key, opaque=3),
        ]
        got[port] = bin_replies(port, packets, 3)
    want, through = got[direct.port], got[proxy.port()]
    assert through == want
    assert want[1] == (op, 0x0003, 2, b"Too large.")
    assert (want[2][1] == 0x0001) == (op != 0x02), "SET/SETQ delete the old item, ADD does not"


HTTP_LINES = [b"GET / HTTP/1.0\r\n\r\n", b"POST /x HTTP/1.1\r\nHost: a\r\n\r\n", b"HEAD / HTTP/1.1\r\n"]
NOT_HTTP = [b"GET / http/1.0\r\n", b"GET foo\r\n", b"x HTTP/1.0\r\n"]


def test_http_request_closes_without_reply_as_memcached(pair):
    direct, _, proxy = pair
    for port in (direct.port, proxy.port()):
        for line in HTTP_LINES:
            with RawConn(port) as c:
                c.send(line)
                assert c.is_closed(), (port, line)
                assert c.buf == b""
        for line in NOT_HTTP:
            with RawConn(port) as c:
                assert c.request(line) == b"ERROR\r\n", (port, line)
                assert c.request(b"get nothere\r\n", b"END\r\n") == b"END\r\n"


def test_stats_fields_summed_over_workers(pair):
    _, _, proxy = pair
    # Connections until both workers hold some: the kernel spreads them
    # (8 connections all on one worker happened once in a full run).
    conns: list = []
    pids = set()
    try:
        while len(conns) < 8 or (len(pids) < 2 and len(conns) < 200):
            c = RawConn(proxy.port())
            conns.append(c)
            pids.add(int(mc_stats(c)["pid"]))
        assert len(pids) == 2, "connections reached both workers"
        key = unique("s")
        for i, c in enumerate(conns[:8]):
            assert c.request(b"set %s%d 0 0 1\r\nv\r\n" % (key, i)) == b"STORED\r\n"
            # one hit, one miss each
            assert c.request(b"get %s%d %s-miss%d\r\n" % (key, i, key, i), b"END\r\n").count(b"VALUE") == 1
        # Asked on every connection, so of both workers.
        for c in conns:
            st = mc_stats(c)
            for f in ("pid", "uptime", "time", "version", "curr_connections", "total_connections",
                      "cmd_get", "cmd_set", "get_hits", "get_misses"):
                assert f in st, f
            # The same instance-wide numbers whichever worker answers.
            assert int(st["cmd_get"]) == 16 and int(st["get_hits"]) == 8 and int(st["get_misses"]) == 8
            assert int(st["cmd_set"]) == 8
            assert int(st["curr_connections"]) >= 8 and int(st["total_connections"]) >= 8
            assert st["version"].startswith("1.6")
    finally:
        for c in conns:
            c.close()


def test_stats_groups_get_a_complete_reply(pair):
    _, _, proxy = pair
    with RawConn(proxy.port()) as c:
        settings = c.request(b"stats settings\r\n", b"END\r\n")
        assert b"STAT item_size_max 1048576\r\n" in settings
        assert b"STAT flush_enabled no\r\n" in settings
        for group in (b"slabs", b"items", b"sizes", b"conns"):
            line = c.request(b"stats %s\r\n" % group)
            assert line.startswith(b"CLIENT_ERROR stats %s " % group), line
        assert c.request(b"stats nosuchgroup\r\n") == b"ERROR\r\n"
        assert c.request(b"stats reset\r\n") == b"RESET\r\n"
        assert c.request(b"version\r\n").startswith(b"VERSION ")


def test_flush_all_refused_unless_allowed_as_memcached_dash_f(procs):
    refusing = procs.memcached(extra=["-F"])
    backend = procs.memcached()
    default = procs.proxy("walnut", {"mc": memcache_pool([backend])})
    key = unique("f")
    with RawConn(default.port()) as c:
        assert c.request(b"set %s 0 0 1\r\nv\r\n" % key) == b"STORED\r\n"
        refused = c.request(b"flush_all\r\n")
        assert c.request(b"flush_all noreply\r\nget %s\r\n" % key, b"END\r\n").startswith(b"VALUE")
    with RawConn(refusing.port) as c:
        assert c.request(b"flush_all\r\n") == refused == b"CLIENT_ERROR flush_all not allowed\r\n"
    # Binary FLUSH: memcached -F answers status 0x20; so does walnut.
    want = bin_replies(refusing.port, [bin_packet(0x08, b"", opaque=5)], 1)[0]
    got = bin_replies(default.port(), [bin_packet(0x08, b"", opaque=5)], 1)[0]
    assert (got[0], got[1], got[2]) == (want[0], want[1], want[2]) == (0x08, 0x20, 5)
    with RawConn(backend.port) as c:
        assert c.request(b"get %s\r\n" % key, b"END\r\n").startswith(b"VALUE"), "nothing flushed"
    allowed = procs.proxy("walnut", {"mc": memcache_pool([backend], allow_flush=True)})
    with RawConn(allowed.port()) as c:
        assert c.request(b"flush_all\r\n") == b"OK\r\n"
        assert c.request(b"get %s\r\n" % key, b"END\r\n") == b"END\r\n"
