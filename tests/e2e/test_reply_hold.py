"""Replies of a pipelined batch held for the rest of the batch
(`_walnut: reply_hold`, src/worker/reply_hold.rs): a reply that is ready
while a later reply of the same batch is still owed waits, at most the
bound, so that the batch goes out in one write. These tests stop one of two
backends so that a batch's second reply cannot come, and check that the
first waits for the bound and no longer (the loop wakes for it by itself),
that nothing waits with `reply_hold: 0` or for a lone request, that a
blocking command is never waited for, and that busy pipelining clients get
every reply in order."""

from __future__ import annotations

import signal
import threading
import time
import uuid

import pytest
from pymemcache.client.base import Client as McClient

from procs import HOST, RawConn, free_port, memcache_pool, redis_pool
from test_admin_port import admin
from procs import wait_until
from test_limits import server_stat, start_walnut, stop_process

HOLD_MS = 300


def keys_on_each(proxy_port: int, backends) -> list[str]:
    """One key stored through the proxy on each backend, in backend order."""
    mc = McClient((HOST, proxy_port), timeout=5)
    found: dict[int, str] = {}
    while len(found) < len(backends):
        k = f"rh:{uuid.uuid4().hex[:12]}"
        mc.set(k, k.encode())
        for i, b in enumerate(backends):
            if i not in found and McClient((HOST, b.port), timeout=5).get(k) == k.encode():
                found[i] = k
    mc.close()
    return [found[i] for i in range(len(backends))]


def value_reply(key: str) -> bytes:
    return f"VALUE {key} 0 {len(key)}\r\n{key}\r\nEND\r\n".encode()


@pytest.fixture
def two_memcached(procs):
    return procs.memcached(), procs.memcached()


def walnut_with_hold(procs, backends, hold: str | None, args=()):
    process = {"reply_hold": hold} if hold is not None else None
    pool = memcache_pool(list(backends), timeout=20000)
    return start_walnut(procs, {"mc": pool}, process=process,
                        extra_args=["--workers", "1", *args])


def first_reply_wait(proxy, backends) -> tuple[float, bytes, RawConn, list[str]]:
    """Pipeline `get a` (first backend) and `get b` (second backend, stopped)
    in one write: how long the first reply took, what had arrived by then."""
    a, b = keys_on_each(proxy.port(), backends)
    stop_process(backends[1])
    conn = RawConn(proxy.port(), timeout=10)
    t0 = time.monotonic()
    conn.send(f"get {a}\r\nget {b}\r\n".encode())
    first = conn.read_until(b"END\r\n")
    return time.monotonic() - t0, first, conn, [a, b]


def finish(conn: RawConn, backend, key: str) -> None:
    """Let the stopped backend go on: the batch's second reply arrives."""
    backend.signal(signal.SIGCONT)
    assert conn.read_until(b"END\r\n") == value_reply(key)
    assert conn.buf == b""
    conn.close()


def test_first_reply_waits_for_the_bound(procs, two_memcached):
    proxy = walnut_with_hold(procs, two_memcached, f"{HOLD_MS}ms")
    waited, first, conn, (a, b) = first_reply_wait(proxy, two_memcached)
    # Held: not written when it arrived (a few ms), but once the bound
    # passed; and no later than the bound plus epoll's rounding, well before
    # the loop's once-a-second wakeup, although nothing else wakes it.
    assert waited >= HOLD_MS / 1000 * 0.95, f"first reply after {waited * 1000:.0f} ms"
    assert waited < 0.9, f"first reply after {waited * 1000:.0f} ms"
    assert first == value_reply(a)
    assert conn.buf == b"", "the stopped backend's reply cannot have come"
    finish(conn, two_memcached[1], b)


@pytest.mark.parametrize("hold", ["0", None], ids=["off", "default"])
def test_no_long_wait_when_off_or_by_default(procs, two_memcached, hold):
    proxy = walnut_with_hold(procs, two_memcached, hold)
    waited, first, conn, (a, b) = first_reply_wait(proxy, two_memcached)
    # Off: written at once; by default (200 µs) the wait ends within epoll's
    # millisecond, far under the 300 ms a hold of that length would take.
    assert waited < HOLD_MS / 1000 * 0.5, f"first reply after {waited * 1000:.0f} ms"
    assert first == value_reply(a)
    finish(conn, two_memcached[1], b)


def test_set_at_run_time(procs, two_memcached):
    port = free_port()
    proxy = walnut_with_hold(procs, two_memcached, "0", args=["--admin", f"{HOST}:{port}"])
    assert admin(port, f"config set reply_hold {HOLD_MS}ms").startswith("OK")
    assert f"reply_hold: {HOLD_MS * 1000}us" in admin(port, "config show")
    waited, first, conn, (a, b) = first_reply_wait(proxy, two_memcached)
    assert waited >= HOLD_MS / 1000 * 0.95, f"first reply after {waited * 1000:.0f} ms"
    assert first == value_reply(a)
    finish(conn, two_memcached[1], b)


def test_lone_request_is_not_held(procs, two_memcached):
    proxy = walnut_with_hold(procs, two_memcached, "5s")
    a, b = keys_on_each(proxy.port(), two_memcached)
    with RawConn(proxy.port()) as conn:
        for key in (a, b, a, b):
            t0 = time.monotonic()
            conn.send(f"get {key}\r\n".encode())
            assert conn.read_until(b"END\r\n") == value_reply(key)
            assert time.monotonic() - t0 < 2.5, "a batch of one request was held"


def test_earlier_batch_does_not_wait_for_a_later_one(procs, two_memcached):
    """Batch 1 (`get a`) and batch 2 (`get b`) both in flight, each on a
    stopped backend: once batch 1 is answered it is written at once, though
    batch 2 still owes its reply."""
    first, second = two_memcached
    proxy = walnut_with_hold(procs, two_memcached, "5s")
    a, b = keys_on_each(proxy.port(), two_memcached)
    sent_a = server_stat(proxy, "mc", "requests", first.port)
    sent_b = server_stat(proxy, "mc", "requests", second.port)
    stop_process(first)
    stop_process(second)
    with RawConn(proxy.port(), timeout=10) as conn:
        conn.send(f"get {a}\r\n".encode())
        wait_until(lambda: server_stat(proxy, "mc", "requests", first.port) > sent_a, 10,
                   what="batch 1 sent")
        conn.send(f"get {b}\r\n".encode())
        wait_until(lambda: server_stat(proxy, "mc", "requests", second.port) > sent_b, 10,
                   what="batch 2 sent")
        first.signal(signal.SIGCONT)
        t0 = time.monotonic()
        assert conn.read_until(b"END\r\n") == value_reply(a)
        assert time.monotonic() - t0 < 2.5, "batch 1 waited for batch 2"
        finish(conn, second, b)


def test_blocking_command_is_not_waited_for(procs):
    backend = procs.redis()
    proxy = start_walnut(procs, {"rd": redis_pool([backend], timeout=20000)},
                         process={"reply_hold": "5s"}, extra_args=["--workers", "1"])
    lst = f"rh:list:{uuid.uuid4().hex[:8]}"
    with RawConn(proxy.port(), timeout=10) as conn:
        t0 = time.monotonic()
        conn.send(f"GET {lst}:none\r\nBLPOP {lst} 0\r\n".encode())
        assert conn.read_line() == b"$-1\r\n"
        assert time.monotonic() - t0 < 2.5, "a reply waited for a blocking command"
        with RawConn(proxy.port()) as other:
            other.send(f"RPUSH {lst} x\r\n".encode())
            assert other.read_line() == b":1\r\n"
        assert conn.read_exactly(len(f"*2\r\n${len(lst)}\r\n{lst}\r\n$1\r\nx\r\n")) == \
            f"*2\r\n${len(lst)}\r\n{lst}\r\n$1\r\nx\r\n".encode()


def test_busy_pipelining_clients_get_every_reply_in_order(procs, two_memcached):
    """Persistent clients, no pause, each pipelining 16 gets over both
    backends (some keys missing), with the default hold."""
    proxy = walnut_with_hold(procs, two_memcached, None)
    keys = [f"rh:busy:{i}" for i in range(64)]
    mc = McClient((HOST, proxy.port()), timeout=5)
    for k in keys[::2]:
        mc.set(k, (k * 3).encode())
    mc.close()
    errors: list[str] = []

    def client(seed: int) -> None:
        try:
            with RawConn(proxy.port(), timeout=10) as conn:
                for it in range(150):
                    batch = [keys[(seed * 7 + it * 5 + j * 3) % len(keys)] for j in range(16)]
                    conn.send("".join(f"get {k}\r\n" for k in batch).encode())
                    for k in batch:
                        want = (f"VALUE {k} 0 {len(k) * 3}\r\n{k * 3}\r\nEND\r\n"
                                if int(k.rsplit(":", 1)[1]) % 2 == 0 else "END\r\n")
                        got = conn.read_until(b"END\r\n")
                        if got != want.encode():
                            errors.append(f"client {seed} batch {it}: {got!r} != {want!r}")
                            return
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"client {seed}: {e!r}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]
