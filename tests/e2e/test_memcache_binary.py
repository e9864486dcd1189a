"""memcached binary protocol through the proxy: memccapable -b, pipelines of
quiet requests across servers, CAS, counters, libmemcached tools in binary
mode, and malformed input."""

from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess

import pytest

from procs import HOST, RawConn, memcache_pool

MEMCCAPABLE = shutil.which("memccapable") or shutil.which("memcapable")
HDR = struct.Struct(">BBHBBHIIQ")

GET, SET, DELETE, INCR, NOOP, GETKQ, GETK, SETQ, VERSION, GETQ = 0x00, 0x01, 0x04, 0x05, 0x0A, 0x0D, 0x0C, 0x11, 0x0B, 0x09


def req(op: int, key: bytes = b"", extras: bytes = b"", value: bytes = b"", opaque: int = 0, cas: int = 0) -> bytes:
    body = len(extras) + len(key) + len(value)
    return HDR.pack(0x80, op, len(key), len(extras), 0, 0, body, opaque, cas) + extras + key + value


def read_packet(c: RawConn) -> tuple[int, int, int, int, bytes, bytes, bytes]:
    """(opcode, status, opaque, cas, extras, key, value) of one response."""
    h = c.read_exactly(24)
    magic, op, klen, elen, _dt, status, blen, opaque, cas = HDR.unpack(h)
    assert magic == 0x81, h
    body = c.read_exactly(blen) if blen else b""
    return op, status, opaque, cas, body[:elen], body[elen : elen + klen], body[elen + klen :]


def set_req(key: bytes, value: bytes, opaque: int = 0, op: int = SET, cas: int = 0) -> bytes:
    return req(op, key, struct.pack(">II", 0, 0), value, opaque, cas)


@pytest.fixture
def three(procs, proxy_kind):
    if proxy_kind != "walnut":
        pytest.skip("binary protocol tests target walnut")
    backends = procs.memcacheds(3)
    proxy = procs.proxy(proxy_kind, {"alpha": memcache_pool(backends)})
    return backends, proxy


def owner(backends, key: bytes) -> int:
    """Index of the backend that holds ``key`` (asked in text protocol)."""
    for i, b in enumerate(backends):
        with RawConn(b.port) as c:
            if c.request(b"get " + key + b"\r\n", b"END\r\n") != b"END\r\n":
                return i
    return -1


def test_set_get_and_quiet_pipeline_across_servers(three):
    backends, proxy = three
    keys = [hashlib.sha1(b"%d" % i).hexdigest().encode() for i in range(12)]
    with RawConn(proxy.port()) as c:
        for i, k in enumerate(keys):
            c.send(set_req(k, b"v" + k, opaque=i))
            op, status, opaque, cas, *_ = read_packet(c)
            assert (op, status, opaque) == (SET, 0, i) and cas != 0
        assert len({owner(backends, k) for k in keys}) >= 2
        # GETKQ for hits and misses interleaved, then NOOP: hits in order, misses silent.
        batch = b""
        expect = []
        for i, k in enumerate(keys):
            batch += req(GETKQ, k, opaque=100 + i)
            batch += req(GETKQ, b"missing" + k, opaque=200 + i)
            expect.append((GETKQ, 0, 100 + i, k, b"v" + k))
        batch += req(NOOP, opaque=999)
        c.send(batch)
        got = []
        while True:
            op, status, opaque, _cas, extras, key, value = read_packet(c)
            if op == NOOP:
                assert opaque == 999
                break
            assert len(extras) == 4
            got.append((op, status, opaque, key, value))
        assert got == expect


def test_quiet_set_errors_kept_success_silent(three):
    _, proxy = three
    with RawConn(proxy.port()) as c:
        c.send(set_req(b"qa", b"1", 1, SETQ) + set_req(b"qb", b"2", 2, SETQ) + req(GETQ, b"qa", opaque=3) + req(NOOP, opaque=4))
        op, status, opaque, _, _, _, value = read_packet(c)
        assert (op, status, opaque, value) == (GETQ, 0, 3, b"1")
        assert read_packet(c)[:3] == (NOOP, 0, 4)
        # ADDQ of an existing key fails: the error comes back.
        c.send(set_req(b"qa", b"x", 5, 0x12) + req(NOOP, opaque=6))
        assert read_packet(c)[:3] == (0x12, 2, 5)
        assert read_packet(c)[:3] == (NOOP, 0, 6)


def test_cas_incr_delete(three):
    _, proxy = three
    with RawConn(proxy.port()) as c:
        c.send(set_req(b"casked", b"a", 1))
        _, status, _, cas, *_ = read_packet(c)
        assert status == 0
        c.send(set_req(b"casked", b"b", 2, cas=cas + 1))
        assert read_packet(c)[1] == 2  # exists
        c.send(set_req(b"casked", b"c", 3, cas=cas))
        assert read_packet(c)[1] == 0
        ctr = struct.pack(">QQI", 5, 10, 0)
        c.send(req(INCR, b"ctr", ctr, opaque=4) + req(INCR, b"ctr", ctr, opaque=5))
        assert read_packet(c)[6] == struct.pack(">Q", 10)
        assert read_packet(c)[6] == struct.pack(">Q", 15)
        c.send(req(DELETE, b"ctr", opaque=6) + req(GET, b"ctr", opaque=7))
        assert read_packet(c)[:3] == (DELETE, 0, 6)
        assert read_packet(c)[:3] == (GET, 1, 7)
        c.send(req(VERSION, opaque=8))
        op, status, opaque, *_rest, value = read_packet(c)
        assert (op, status, opaque) == (VERSION, 0, 8) and value.startswith(b"1.6")


def test_text_and_binary_clients_share_backends(three):
    _, proxy = three
    with RawConn(proxy.port()) as t, RawConn(proxy.port()) as b:
        assert t.request(b"set mixed 0 0 2\r\nhi\r\n") == b"STORED\r\n"
        b.send(req(GET, b"mixed", opaque=1))
        assert read_packet(b)[6] == b"hi"
        assert t.request(b"get mixed\r\n", b"END\r\n") == b"VALUE mixed 0 2\r\nhi\r\nEND\r\n"


def test_malformed_binary(three):
    _, proxy = three
    with RawConn(proxy.port()) as c:
        c.send(req(0x7F, opaque=3, value=b"xyz") + req(NOOP, opaque=4))
        assert read_packet(c)[:3] == (0x7F, 0x81, 3)
        assert read_packet(c)[:3] == (NOOP, 0, 4)
        c.send(req(GET, b"k" * 251, opaque=5))
        assert read_packet(c)[:3] == (GET, 4, 5)
        assert c.is_closed()
    with RawConn(proxy.port()) as c:
        c.send(req(GET, b"k", extras=b"1234", opaque=6))
        assert read_packet(c)[:3] == (GET, 4, 6)
        assert c.is_closed()
    with RawConn(proxy.port()) as c:
        c.send(req(NOOP, opaque=7))
        assert read_packet(c)[:3] == (NOOP, 0, 7)


def run_memccapable(port: int) -> tuple[int, int, str]:
    proc = subprocess.run(
        [MEMCCAPABLE, "-b", "-h", HOST, "-p", str(port), "-t", "3"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    return out.count("[pass]"), out.count("[FAIL]"), out


@pytest.mark.skipif(MEMCCAPABLE is None, reason="memccapable not installed")
def test_memccapable_binary(procs, proxy_kind):
    if proxy_kind != "walnut":
        pytest.skip("binary protocol tests target walnut")
    backend = procs.memcached()
    direct = run_memccapable(backend.port)
    # memccapable flushes between tests: the pool opts in to flush_all.
    proxy = procs.proxy(proxy_kind, {"alpha": memcache_pool([procs.memcached()], allow_flush=True)})
    through = run_memccapable(proxy.port())
    assert through[:2] == direct[:2], through[2]
    assert through[0] >= 27


@pytest.mark.skipif(shutil.which("memccp") is None, reason="libmemcached-tools not installed")
def test_libmemcached_tools_binary(three, tmp_path):
    _, proxy = three
    server = f"{HOST}:{proxy.port()}"
    files = []
    for i in range(6):
        f = tmp_path / f"file{i}.txt"
        f.write_bytes(b"content %d\n" % i * (i + 1))
        files.append(f)
    subprocess.run(["memccp", "--binary", f"--servers={server}", *map(str, files)], check=True, timeout=30, cwd=tmp_path)
    out = subprocess.run(
        ["memccat", "--binary", f"--servers={server}", *(f.name for f in files)],
        check=True, timeout=30, capture_output=True,
    ).stdout
    # memccat ends each value with a newline
    assert out == b"".join(f.read_bytes() + b"\n" for f in files)
