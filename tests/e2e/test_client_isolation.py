"""No client held back by another, none left hanging by a drain.

A client that pipelines reads of large values and reads nothing of the
replies sits beside a busy victim whose requests share the same server
connection (one worker, one connection per server). The victim's worst
latency is measured while the attacker sits there: a server connection
held back for the attacker would show as a victim request waiting
seconds (until the attacker is closed), past the pool's timeout. Redis
RESP2 and RESP3, memcached, and across a reload.

A draining generation (after HUP, or after USR2 + QUIT) leaves as soon
as its last lingering client closes: a client blocked in `BLPOP k 0`, or
one owed replies, which then closes normally (a FIN, not a reset), does
not keep its old worker until `graceful_timeout`.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest
import redis
from pymemcache.client.base import Client as MemcacheClient
from redis.backoff import NoBackoff
from redis.retry import Retry

from procmodel import alive, children, wait_gone, wait_log, wait_workers, workers_of
from procs import HOST, Proxy, free_port, memcache_pool, redis_pool, to_yaml, wait_until

#: The victim's worst request must stay under this (the pool's timeout is
#: 2 s; a server connection held for the attacker cost ~10 s).
WORST = 1.0
#: How long the victim runs beside the attacker.
VICTIM_SECONDS = 3.0


class Victim:
    """Requests one after another from a thread; the latency of each."""

    def __init__(self, call):
        self.call = call
        self.lat: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                self.call()
            except Exception as e:  # noqa: BLE001 - counted, the test fails on it
                self.errors.append(repr(e))
                return
            self.lat.append(time.perf_counter() - t0)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(timeout=30)

    def summary(self) -> str:
        s = sorted(self.lat)
        if not s:
            return "no requests"
        p99 = s[min(len(s) - 1, int(len(s) * 0.99))]
        return f"{len(s)} requests, p99 {p99 * 1000:.1f} ms, worst {s[-1] * 1000:.1f} ms"


def attacker(port: int, request: bytes) -> socket.socket:
    """A client that sends ``request`` and never reads (a small receive
    buffer, so the replies stay on the proxy's side)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    s.connect((HOST, port))
    s.sendall(request)
    return s


def run_victim(call, seconds: float = VICTIM_SECONDS) -> Victim:
    with Victim(call) as v:
        time.sleep(seconds)  # the measured window, not a synchronisation
    return v


def assert_unhindered(v: Victim, what: str) -> None:
    print(f"\n{what}: {v.summary()}")
    assert not v.errors, f"{what}: {v.errors[:3]}"
    assert len(v.lat) > 50, f"{what}: {v.summary()}"
    assert max(v.lat) < WORST, f"{what}: held back: {v.summary()}"

def reload(p: Proxy) -> None:
    """HUP with a changed pool key (an unchanged file is not reloaded)."""
    p.conf_path.write_text(p.conf_path.read_text().replace("timeout: 2000", "timeout: 2500"))
    p.signal(signal.SIGHUP)


def wait_new_worker(master: int, old) -> int:
    """A worker of the new generation (the old one may still drain)."""
    olds = set(old)
    return wait_until(
        lambda: next((w for w in workers_of(master).values() if w not in olds), None), 10,
        interval=0.01, what="a worker of the new generation")


def resp_command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


@pytest.mark.parametrize("resp", [2, 3])
def test_redis_non_reader_does_not_hold_back_others(procs, resp):
    backend = procs.redis()
    p = procs.proxy("walnut", {"rd": redis_pool([backend])}, extra_args=["--workers", "1"])
    big = os.urandom(2 * 1024 * 1024)
    setup = redis.Redis(host=HOST, port=p.port(), protocol=2)
    setup.set("g:big2m", big)
    setup.set("small", "s")
    victim = redis.Redis(host=HOST, port=p.port(), protocol=resp, retry=Retry(NoBackoff(), 0),
                         socket_timeout=10)
    assert victim.get("small") == b"s"
    base = run_victim(lambda: victim.get("small"), 1.0)
    hello = resp_command(b"HELLO", b"3") if resp == 3 else b""
    # More than the kernel's socket buffers take on both sides.
    a = attacker(p.port(), hello + resp_command(b"GET", b"g:big2m") * 4)
    try:
        v = run_victim(lambda: victim.get("small"))
        print(f"\nRESP{resp} without an attacker: {base.summary()}")
        assert_unhindered(v, f"RESP{resp} victim beside a non-reader")
        # The attacker still gets its replies, whole, once it reads.
        a.settimeout(10)
        got = b""
        while not (got.count(b"$2097152\r\n") == 4 and got.endswith(big + b"\r\n")):
            chunk = a.recv(1 << 20)
            if not chunk:
                break
            got += chunk
        assert got.endswith(b"$2097152\r\n" + big + b"\r\n"), len(got)
    finally:
        a.close()


def test_redis_non_reader_over_its_limit_is_closed_alone(procs):
    """Past `client_output_limit` the attacker alone is closed; the victim
    never waits."""
    backend = procs.redis()
    p = procs.proxy("walnut", {"rd": redis_pool([backend], client_output_limit=3 * 1024 * 1024)},
                    extra_args=["--workers", "1"])
    big = os.urandom(2 * 1024 * 1024)
    setup = redis.Redis(host=HOST, port=p.port(), protocol=2)
    setup.set("g:big2m", big)
    setup.set("small", "s")
    victim = redis.Redis(host=HOST, port=p.port(), protocol=2, retry=Retry(NoBackoff(), 0), socket_timeout=10)
    a = attacker(p.port(), resp_command(b"GET", b"g:big2m") * 4)
    try:
        v = run_victim(lambda: victim.get("small"))
        assert_unhindered(v, "victim beside a non-reader over its limit")
        wait_log(p.log_path, "over client_output_limit")
        a.settimeout(10)
        total = 0
        try:
            while chunk := a.recv(1 << 20):
                total += len(chunk)
        except ConnectionResetError:
            pass
        assert total < 4 * len(big), "the non-reader got every reply: it was not closed"
    finally:
        a.close()


def test_memcache_non_reader_does_not_hold_back_others(procs):
    backend = procs.memcached(extra=["-I", "2m"])
    p = procs.proxy("walnut", {"mc": memcache_pool([backend])}, extra_args=["--workers", "1"])
    setup = MemcacheClient((HOST, p.port()))
    big = os.urandom(1000 * 1000)
    setup.set("g:big", big, noreply=False)
    setup.set("small", b"s", noreply=False)
    victim = MemcacheClient((HOST, p.port()), timeout=10)
    assert victim.get("small") == b"s"
    a = attacker(p.port(), b"get g:big\r\n" * 60)
    try:
        v = run_victim(lambda: victim.get("small"))
        assert_unhindered(v, "memcached victim beside a non-reader")
    finally:
        a.close()


def test_redis_non_reader_across_a_reload(procs):
    """The attacker stays with its draining worker; the victim crosses to
    the new one and keeps its latency throughout."""
    backend = procs.redis()
    p = procs.proxy("walnut", {"rd": redis_pool([backend])}, extra_args=["--workers", "1"])
    big = os.urandom(2 * 1024 * 1024)
    setup = redis.Redis(host=HOST, port=p.port(), protocol=2)
    setup.set("g:big2m", big)
    setup.set("small", "s")
    victim = redis.Redis(host=HOST, port=p.port(), protocol=2, retry=Retry(NoBackoff(), 0), socket_timeout=10)
    assert victim.get("small") == b"s"
    gen1 = wait_workers(p.pid, 1)
    a = attacker(p.port(), resp_command(b"GET", b"g:big2m") * 4)
    try:
        with Victim(lambda: victim.get("small")) as v:
            time.sleep(1.0)  # the measured window before the reload
            reload(p)
            wait_new_worker(p.pid, gen1.values())
            time.sleep(1.5)  # and after it
        assert_unhindered(v, "victim beside a non-reader, across a reload")
    finally:
        a.close()


# ------------------------------------------------------------- draining ----



def blpop_client(port: int) -> socket.socket:
    s = socket.create_connection((HOST, port), timeout=5)
    s.sendall(resp_command(b"BLPOP", b"nokey:drain", b"0"))
    return s


def owed_client(port: int) -> socket.socket:
    """A client owed a reply the server has not sent yet (a BLPOP with a
    long timeout behind a GET it already read)."""
    s = socket.create_connection((HOST, port), timeout=5)
    s.sendall(resp_command(b"GET", b"small") + resp_command(b"BRPOP", b"nokey:owed", b"60"))
    buf = b""
    while not buf.endswith(b"s\r\n"):
        buf += s.recv(100)
    return s


def worker_count_blocked(port: int) -> None:
    r = redis.Redis(host=HOST, port=port)
    wait_until(lambda: r.info("clients")["blocked_clients"] >= 1, 10, what="the client blocked on the server")


@pytest.mark.parametrize("lingering", [blpop_client, owed_client], ids=["blpop-0", "owed-reply"])
def test_draining_worker_leaves_when_its_last_client_closes_after_hup(procs, lingering):
    backend = procs.redis()
    p = procs.proxy("walnut", {"rd": redis_pool([backend])}, extra_args=["--workers", "1"])
    redis.Redis(host=HOST, port=p.port()).set("small", "s")
    gen1 = wait_workers(p.pid, 1)
    c = lingering(p.port())
    worker_count_blocked(backend.port)
    reload(p)
    wait_new_worker(p.pid, gen1.values())
    old = next(iter(gen1.values()))
    # The client is owed a reply: its old worker keeps it, and stays.
    time.sleep(0.5)  # long enough that a worker which ignored it would be gone
    assert alive(old), "the old worker left while its client waited"
    closed = time.monotonic()
    c.close()
    wait_gone(old, timeout=10)
    took = time.monotonic() - closed
    print(f"\nold worker gone {took:.3f} s after its last client closed (graceful_timeout 30 s)")
    assert took < 2.0, f"the old worker stayed {took:.2f} s after its last client closed"


def test_old_master_leaves_when_its_last_client_closes_after_upgrade(procs):
    backend = procs.redis()
    port = free_port()
    p = Proxy("walnut", procs.workdir, {}, extra_args=["--workers", "1"])
    p.conf_path.write_text(to_yaml({"rd": redis_pool([backend], listen=f"{HOST}:{port}")}))
    p.ports = {"rd": port}
    procs.started.append(p)
    p.start()
    gen1 = wait_workers(p.pid, 1)
    c = blpop_client(port)
    worker_count_blocked(backend.port)
    new_master = None
    try:
        p.signal(signal.SIGUSR2)
        new_master = wait_until(
            lambda: next((x for x in children(p.pid) if x not in gen1.values()), None), 10,
            interval=0.01, what="new master")
        wait_workers(new_master, 1)
        wait_log(p.log_path, f"new master (pid {new_master}) is ready")
        p.signal(signal.SIGQUIT)
        time.sleep(0.5)  # long enough that a master which ignored it would be gone
        assert p.alive(), "the old master left while its client waited"
        closed = time.monotonic()
        c.close()
        p.proc.wait(timeout=10)
        took = time.monotonic() - closed
        print(f"\nold master gone {took:.3f} s after its last client closed")
        assert took < 2.0, f"the old master stayed {took:.2f} s after its last client closed"
    finally:
        if new_master is not None and alive(new_master):
            nw = list(workers_of(new_master).values())
            os.kill(new_master, signal.SIGTERM)
            wait_gone(new_master)
            for w in nw:
                wait_gone(w)
