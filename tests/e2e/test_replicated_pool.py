"""Replicated memcached pools (`replicas: R`): every key on R servers,
reads fail over to the next replica, writes survive a dead replica."""

from __future__ import annotations

import threading
import time
import uuid

from procs import RawConn, memcache_pool

N_KEYS = 200


def holders(backends, key: str) -> list[int]:
    found = []
    for i, b in enumerate(backends):
        if not b.alive():
            continue
        with RawConn(b.port) as c:
            if c.request(f"get {key}\r\n".encode(), b"END\r\n").startswith(b"VALUE"):
                found.append(i)
    return found


def test_every_key_on_two_servers_and_reads_survive_a_dead_one(procs):
    backends = procs.memcacheds(3)
    proxy = procs.proxy("walnut", {"rep": memcache_pool(backends, replicas=2, timeout=1000)})
    keys = [f"rp:{uuid.uuid4().hex}" for _ in range(N_KEYS)]
    with RawConn(proxy.port()) as c:
        for k in keys:
            assert c.request(f"set {k} 0 0 {len(k)}\r\n{k}\r\n".encode()) == b"STORED\r\n"
    copies = [holders(backends, k) for k in keys]
    assert all(len(h) == 2 for h in copies), copies[:5]
    # Every server holds a share.
    assert all(any(i in h for h in copies) for i in range(3))

    # Reads keep hitting while one server dies under a running load.
    errors: list[bytes] = []
    misses: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        with RawConn(proxy.port(), timeout=10) as c:
            while not stop.is_set():
                for k in keys[:50]:
                    r = c.request(f"get {k}\r\n".encode(), b"END\r\n")
                    if r.startswith(b"SERVER_ERROR"):
                        errors.append(r)
                    elif not r.startswith(b"VALUE"):
                        misses.append(k)

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.3)  # the load is running before the kill (not a synchronisation)
    backends[0].kill()
    time.sleep(0.5)
    stop.set()
    t.join(timeout=30)
    assert not misses, misses[:5]
    assert not errors, errors[:3]

    with RawConn(proxy.port()) as c:
        for k in keys:
            r = c.request(f"get {k}\r\n".encode(), b"END\r\n")
            assert r == f"VALUE {k} 0 {len(k)}\r\n{k}\r\nEND\r\n".encode(), (k, r)
        # A multi-get over every key still answers all of them, in order.
        r = c.request(("get " + " ".join(keys) + "\r\n").encode(), b"END\r\n", timeout=10)
        got = [line.split()[1].decode() for line in r.split(b"\r\n") if line.startswith(b"VALUE")]
        assert got == keys
        # Writes still succeed: the live replica answers.
        for k in keys[:50]:
            assert c.request(f"set {k} 0 0 1\r\nz\r\n".encode()) == b"STORED\r\n"


def test_replicas_config_is_validated(tmp_path):
    import subprocess

    from procs import walnut_bin

    conf = tmp_path / "bad.yml"
    conf.write_text(
        "rep:\n  listen: 127.0.0.1:22199\n  replicas: 3\n  servers:\n"
        "    - 127.0.0.1:11311:1\n    - 127.0.0.1:11312:1\n"
    )
    r = subprocess.run([walnut_bin(), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "replicas" in r.stderr and ":3:" in r.stderr, r.stderr


def test_binary_and_meta_clients_read_from_a_surviving_replica(procs):
    import struct

    backends = procs.memcacheds(3)
    proxy = procs.proxy("walnut", {"rep": memcache_pool(backends, replicas=2, timeout=1000)})
    keys = [f"rb:{uuid.uuid4().hex}" for _ in range(60)]
    with RawConn(proxy.port()) as c:
        for k in keys:
            assert c.request(f"set {k} 0 0 {len(k)}\r\n{k}\r\n".encode()) == b"STORED\r\n"
    backends[1].kill()
    with RawConn(proxy.port(), timeout=10) as c:
        for i, k in enumerate(keys):
            kb = k.encode()
            # binary GET (opcode 0x00), opaque echoed
            c.send(struct.pack(">BBHBBHIIQ", 0x80, 0x00, len(kb), 0, 0, 0, len(kb), i, 0) + kb)
            hdr = c.read_exactly(24)
            magic, op, _kl, el, _dt, status, blen, opaque, _cas = struct.unpack(">BBHBBHIIQ", hdr)
            body = c.read_exactly(blen)
            assert (magic, op, status, opaque) == (0x81, 0x00, 0, i), (k, status)
            assert body[el:] == kb
            # meta get with value
            r = c.request(f"mg {k} v\r\n".encode(), b"\r\n")
            if r.startswith(b"VA"):
                r += c.read_until(b"\r\n")
            assert r == f"VA {len(k)}\r\n{k}\r\n".encode(), (k, r)
