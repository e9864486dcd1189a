"""TLS and Redis ACL through walnut, against real servers.

Certificates are made with ``openssl`` per module: a CA, a server
certificate for localhost/127.0.0.1, a client certificate, an expired
server certificate and a second ("rogue") CA. redis-server serves TLS on
``--tls-port`` and memcached with ``-Z``; clients are redis-py, pymemcache
and redis-cli with ``--tls``. ACL users are created on redis-server with
``ACL SETUSER`` and walnut's refusals are compared with redis-server's own.
"""

from __future__ import annotations

import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import redis
from pymemcache.client.base import Client as MemcacheClient
from redis.backoff import NoBackoff
from redis.retry import Retry

from procmodel import alive, log_has, start_walnut, wait_gone, wait_log, wait_workers
from procs import (HOST, MEMCACHED_BIN, REDIS_CLI_BIN, ManagedProcess, Redis, free_port,
                   memcache_pool, redis_pool, to_yaml, wait_until)


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_cert(d: Path, ca: str, name: str, cn: str, san: str, days: int = 30,
              expired: bool = False) -> None:
    """``name``.crt/.key signed by ``ca``; ``expired``: valid in 2020 only."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={cn}", cwd=d)
    (d / f"{name}.ext").write_text(
        f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n")
    if not expired:
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", str(days),
                "-extfile", f"{name}.ext", cwd=d)
        return
    # `openssl ca` takes explicit start and end dates.
    (d / "index.txt").write_text("")
    (d / "serial").write_text("1000\n")
    (d / "ca.cnf").write_text(
        "[ca]\ndefault_ca=d\n[d]\ndir=.\ndatabase=index.txt\nnew_certs_dir=.\n"
        f"certificate={ca}.crt\nprivate_key={ca}.key\nserial=serial\ndefault_md=sha256\n"
        "policy=p\ncopy_extensions=copy\nunique_subject=no\n[p]\ncommonName=supplied\n")
    openssl("ca", "-batch", "-config", "ca.cnf", "-in", f"{name}.csr", "-out", f"{name}.crt",
            "-startdate", "20200101000000Z", "-enddate", "20200201000000Z",
            "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    for ca in ("ca", "rogueca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key",
                "-out", f"{ca}.crt", "-days", "30", "-subj", f"/CN=walnut test {ca}", cwd=d)
    make_cert(d, "ca", "server", "localhost", "DNS:localhost,IP:127.0.0.1", days=20)
    make_cert(d, "ca", "server2", "localhost", "DNS:localhost,IP:127.0.0.1", days=5)
    make_cert(d, "ca", "client", "client", "DNS:client")
    make_cert(d, "rogueca", "rogue", "localhost", "DNS:localhost,IP:127.0.0.1")
    make_cert(d, "ca", "expired", "localhost", "DNS:localhost,IP:127.0.0.1", expired=True)
    return d


def tls_redis(procs, certs: Path, cert: str = "server", clients_need_cert: bool = False,
              extra=()) -> tuple[Redis, int]:
    """A redis-server with a TLS port beside its plain one; (server, tls port)."""
    tls_port = free_port()
    r = procs.redis(extra=[
        "--tls-port", str(tls_port), "--tls-cert-file", str(certs / f"{cert}.crt"),
        "--tls-key-file", str(certs / f"{cert}.key"), "--tls-ca-cert-file", str(certs / "ca.crt"),
        "--tls-auth-clients", "yes" if clients_need_cert else "no", *extra])
    return r, tls_port


def tls_client(port: int, certs: Path, client_cert: bool = False, **kw) -> redis.Redis:
    extra = {"ssl_certfile": str(certs / "client.crt"), "ssl_keyfile": str(certs / "client.key")} \
        if client_cert else {}
    return redis.Redis(host=HOST, port=port, ssl=True, ssl_ca_certs=str(certs / "ca.crt"),
                       retry=Retry(NoBackoff(), 0), socket_timeout=10, **extra, **kw)


def plain_client(port: int, **kw) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, retry=Retry(NoBackoff(), 0), socket_timeout=10, **kw)


def listen_tls(certs: Path, **more) -> dict:
    return {"tls_cert": str(certs / "server.crt"), "tls_key": str(certs / "server.key"), **more}


def test_tls_listener_redis_py_and_redis_cli(procs, certs):
    backend = procs.redis()
    p = start_walnut(procs, {"rd": redis_pool([backend], **listen_tls(certs))}, args=["--workers", "1"])
    r = tls_client(p.port("rd"), certs)
    assert r.set("k", "v") and r.get("k") == b"v"
    pipe = r.pipeline(transaction=False)
    for i in range(200):
        pipe.set(f"p{i}", i)
    pipe.mget([f"p{i}" for i in range(200)])
    assert pipe.execute()[-1] == [str(i).encode() for i in range(200)]
    # A value larger than rustls's buffers both ways: partial TLS writes.
    big = bytes(range(256)) * 12_000
    assert r.set("big", big) and r.get("big") == big
    assert plain_client(backend.port).get("big") == big
    out = subprocess.run([REDIS_CLI_BIN, "-h", HOST, "-p", str(p.port("rd")), "--tls", "--cacert",
                          str(certs / "ca.crt"), "get", "k"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    assert out.strip() == "v"
    # The certificate's days left are on /metrics.
    with urllib.request.urlopen(f"http://{HOST}:{p.admin_port}/metrics", timeout=10) as resp:
        body = resp.read().decode()
    line = next(l for l in body.splitlines()
                if l.startswith('walnut_tls_certificate_days_left{pool="rd",side="listen"}'))
    assert int(line.split()[-1]) in (19, 20), line


def test_memcached_pool_behind_a_tls_listener(procs, certs):
    backends = [procs.memcached(), procs.memcached()]
    # murmur spreads k0..k59 over both backends (fnv1a_64 need not): the
    # multi-get is split and merged.
    p = start_walnut(procs, {"mc": memcache_pool(backends, hash="murmur", **listen_tls(certs))},
                     args=["--workers", "1"])
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    m = MemcacheClient((HOST, p.port("mc")), tls_context=ctx, timeout=10)
    for i in range(60):
        assert m.set(f"k{i}", f"v{i}".encode())
    assert m.get("k7") == b"v7"
    keys = [f"k{i}" for i in range(60)]
    assert m.get_many(keys + ["missing"]) == {k: f"v{k[1:]}".encode() for k in keys}
    # A value larger than rustls's buffers: partial TLS writes both ways.
    big = bytes(range(256)) * 3000
    assert m.set("big", big) and m.get("big") == big
    # Stored on the plain backends, each key on one of them.
    direct = [MemcacheClient((HOST, b.port), timeout=10) for b in backends]
    found = [sum(1 for d in direct if d.get(k) is not None) for k in keys]
    assert found == [1] * len(keys)
    assert all(d.get_many(keys) for d in direct), "spread over both backends"


def test_tls_to_redis_and_memcached_servers(procs, certs):
    rd, rd_tls = tls_redis(procs, certs)
    mc_plain, mc_tls = free_port(), free_port()
    # A plain port beside the TLS one: the readiness check connects there
    # (memcached 1.6.18 stops accepting after a bare TCP connect to a TLS
    # port is closed before its handshake).
    mc = ManagedProcess(f"memcached-{mc_tls}", [
        MEMCACHED_BIN, "-u", "root", "-U", "0", "-Z", "-o",
        f"ssl_chain_cert={certs / 'server.crt'},ssl_key={certs / 'server.key'}",
        "-l", f"notls:{HOST}:{mc_plain},{HOST}:{mc_tls}"],
        procs.workdir / f"memcached-{mc_tls}", procs.workdir / f"memcached-{mc_tls}.log")
    procs.started.append(mc)
    mc.start()
    mc.wait_ready([mc_plain])
    server_tls = {"server_tls": True, "server_tls_ca": str(certs / "ca.crt")}
    p = start_walnut(procs, {
        "rd": redis_pool([], **server_tls) | {"servers": [f"{HOST}:{rd_tls}:1"]},
        "mc": memcache_pool([], servers=[f"{HOST}:{mc_tls}:1"], **server_tls),
    })
    r = plain_client(p.port("rd"))
    for i in range(100):
        r.set(f"k{i}", f"v{i}")
    assert r.mget([f"k{i}" for i in range(100)]) == [f"v{i}".encode() for i in range(100)]
    big = b"x" * 3_000_000
    assert r.set("big", big) and r.get("big") == big
    assert plain_client(rd.port).get("k7") == b"v7", "stored on the server through TLS"
    m = MemcacheClient((HOST, p.port("mc")), timeout=10)
    m.set("a", b"1")
    m.set("big", b"y" * 500_000)
    assert m.get("a") == b"1" and m.get("big") == b"y" * 500_000
    direct = MemcacheClient((HOST, mc_plain), timeout=10)
    assert direct.get("a") == b"1", "stored on memcached through TLS"


def test_mutual_tls_both_sides(procs, certs):
    rd, rd_tls = tls_redis(procs, certs, clients_need_cert=True)
    pool = redis_pool([], servers=[f"{HOST}:{rd_tls}:1"], server_tls=True,
                      server_tls_ca=str(certs / "ca.crt"),
                      server_tls_cert=str(certs / "client.crt"),
                      server_tls_key=str(certs / "client.key"),
                      **listen_tls(certs, tls_client_ca=str(certs / "ca.crt")))
    p = start_walnut(procs, {"rd": pool}, args=["--workers", "1"])
    r = tls_client(p.port("rd"), certs, client_cert=True)
    assert r.set("m", "1") and r.get("m") == b"1"
    # No client certificate: refused in the handshake, and logged.
    with pytest.raises((redis.ConnectionError, ssl.SSLError, OSError)):
        tls_client(p.port("rd"), certs).get("m")
    wait_log(p.log_path, "TLS handshake failed")
    # An expired client certificate: refused, and the log says why.
    with pytest.raises((redis.ConnectionError, ssl.SSLError, OSError)):
        redis.Redis(host=HOST, port=p.port("rd"), ssl=True, ssl_ca_certs=str(certs / "ca.crt"),
                    ssl_certfile=str(certs / "expired.crt"), ssl_keyfile=str(certs / "expired.key"),
                    retry=Retry(NoBackoff(), 0), socket_timeout=10).get("m")
    wait_log(p.log_path, "certificate expired")
    # A certificate signed by another CA: refused, and the log says why.
    with pytest.raises((redis.ConnectionError, ssl.SSLError, OSError)):
        redis.Redis(host=HOST, port=p.port("rd"), ssl=True, ssl_ca_certs=str(certs / "ca.crt"),
                    ssl_certfile=str(certs / "rogue.crt"), ssl_keyfile=str(certs / "rogue.key"),
                    retry=Retry(NoBackoff(), 0), socket_timeout=10).get("m")
    wait_log(p.log_path, "UnknownIssuer")
    assert r.get("m") == b"1", "the other client is not affected"
    # Both certificates' days left are on /metrics: the listener's and the
    # one walnut presents to servers (client.crt, 30 days).
    with urllib.request.urlopen(f"http://{HOST}:{p.admin_port}/metrics", timeout=10) as resp:
        body = resp.read().decode()
    days = {l.split("{")[1].split("}")[0]: int(l.split()[-1]) for l in body.splitlines()
            if l.startswith("walnut_tls_certificate_days_left{")}
    assert days.get('pool="rd",side="listen"') in (19, 20), days
    assert days.get('pool="rd",side="server"') in (29, 30), days


def test_server_certificate_that_fails_verification(procs, certs):
    _, rogue_port = tls_redis(procs, certs, cert="rogue")
    _, expired_port = tls_redis(procs, certs, cert="expired")
    good, good_port = tls_redis(procs, certs)
    tls = {"server_tls": True, "server_tls_ca": str(certs / "ca.crt")}
    p = start_walnut(procs, {
        "rogue": redis_pool([], servers=[f"{HOST}:{rogue_port}:1"], **tls),
        "expired": redis_pool([], servers=[f"{HOST}:{expired_port}:1"], **tls),
        "named": redis_pool([], servers=[f"{HOST}:{good_port}:1"], server_tls_name="cache.example",
                            **tls),
        "good": redis_pool([], servers=[f"{HOST}:{good_port}:1"], **tls),
    }, args=["--workers", "1"])
    for pool, why in [("rogue", "UnknownIssuer"), ("expired", "certificate expired"),
                      ("named", "not valid for name")]:
        with pytest.raises(redis.ResponseError) as e:
            plain_client(p.port(pool)).get("k")
        assert "TLS handshake failed" in str(e.value) and why in str(e.value), str(e.value)
        wait_log(p.log_path, why)
    assert plain_client(p.port("good")).set("k", "ok")
    assert plain_client(good.port).get("k") == b"ok"


def test_tls_redis_cluster(procs, certs):
    """A Redis Cluster whose nodes speak TLS (clients, bus, replication):
    walnut follows the slot map the cluster gives a TLS connection (TLS
    ports) and verifies each node's certificate by its IP."""
    from procs import cluster_info, cluster_node_args, free_cluster_port

    nodes = []
    for _ in range(3):
        plain = free_cluster_port()
        # With --tls-cluster the bus port is the TLS port + 10000.
        tls_port = free_cluster_port()
        extra = cluster_node_args(procs.workdir, plain) + [
            "--tls-port", str(tls_port), "--tls-cluster", "yes", "--tls-replication", "yes",
            "--tls-cert-file", str(certs / "server.crt"), "--tls-key-file", str(certs / "server.key"),
            "--tls-ca-cert-file", str(certs / "ca.crt"), "--tls-auth-clients", "no"]
        nodes.append((procs.redis(port=plain, extra=extra), tls_port))
    subprocess.run([REDIS_CLI_BIN, "--tls", "--cacert", str(certs / "ca.crt"), "--cluster",
                    "create", *[f"{HOST}:{t}" for _, t in nodes], "--cluster-yes"],
                   capture_output=True, text=True, timeout=60, check=True)
    wait_until(lambda: all(cluster_info(n.port).get("cluster_state") == "ok"
                           and cluster_info(n.port).get("cluster_known_nodes") == "3"
                           for n, _ in nodes), 60, what="the TLS cluster formed")
    pool = redis_pool([], servers=[f"{HOST}:{nodes[0][1]}:1"], redis_cluster=True,
                      server_tls=True, server_tls_ca=str(certs / "ca.crt"))
    p = start_walnut(procs, {"rc": pool}, args=["--workers", "1"])
    r = plain_client(p.port("rc"))
    for i in range(300):
        assert r.set(f"key:{i}", i)
    assert r.mget([f"key:{i}" for i in range(300)]) == [str(i).encode() for i in range(300)]
    sizes = [plain_client(n.port).dbsize() for n, _ in nodes]
    assert sum(sizes) == 300 and all(sizes), sizes


def test_plain_text_and_stalled_handshakes(procs, certs):
    backend = procs.redis()
    p = start_walnut(procs, {"rd": redis_pool([backend], **listen_tls(
        certs, tls_handshake_timeout=400))}, args=["--workers", "1"])
    good = tls_client(p.port("rd"), certs)
    assert good.set("k", "v")
    # Plain text to the TLS port: an alert and a closed connection.
    with socket.create_connection((HOST, p.port("rd")), timeout=5) as s:
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        got = b""
        while chunk := s.recv(4096):
            got += chunk
        assert not got.startswith(b"+PONG") and got[:1] == b"\x15", got  # a TLS alert record
    wait_log(p.log_path, "is the peer speaking plain text?")
    # A handshake that never starts is closed after tls_handshake_timeout.
    with socket.create_connection((HOST, p.port("rd")), timeout=10) as s:
        t0 = time.monotonic()
        assert s.recv(1) == b""
        waited = time.monotonic() - t0
    assert 0.3 < waited < 5, waited
    wait_log(p.log_path, "TLS handshake not finished after 400 ms")
    assert good.get("k") == b"v"


def test_stalled_handshake_towards_a_server(procs, certs):
    """A server port that accepts and never answers the TLS handshake, in a
    pool without `timeout`: the request queued behind the handshake fails
    after server_tls_handshake_timeout with a clear error, the log names
    the server, and the client's connection goes on (routed to another
    pool, and later requests)."""
    good, good_tls = tls_redis(procs, certs)
    stall = socket.create_server((HOST, 0))
    stall.settimeout(0.2)
    stall_port = stall.getsockname()[1]
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_say_nothing() -> None:
        while not stop.is_set():
            try:
                accepted.append(stall.accept()[0])
            except (socket.timeout, OSError):
                continue

    acceptor = threading.Thread(target=accept_and_say_nothing, daemon=True)
    acceptor.start()
    # A route pool's connections to its targets' servers are made with its
    # own settings: TLS, the handshake timeout, and no `timeout`, so
    # nothing but the handshake timeout bounds the stall.
    tls = {"server_tls": True, "server_tls_ca": str(certs / "ca.crt")}
    try:
        p = start_walnut(procs, {
            "stalled": redis_pool([], servers=[f"{HOST}:{stall_port}:1"], **tls),
            "good": redis_pool([], servers=[f"{HOST}:{good_tls}:1"], **tls),
            "front": {"redis": True, "routes": ["stall: stalled", "* good"],
                      "server_tls_handshake_timeout": 800, **tls},
        }, args=["--workers", "1"])
        r, other = plain_client(p.port("front")), plain_client(p.port("front"))
        assert r.set("k", "v")
        outcome: dict = {}

        def stalled_get() -> None:
            t0 = time.monotonic()
            try:
                outcome["reply"] = r.get("stall:k")
            except redis.RedisError as e:
                outcome["error"] = e
            outcome["took"] = time.monotonic() - t0

        t = threading.Thread(target=stalled_get)
        t.start()
        wait_until(lambda: accepted, 10, what="walnut connected to the stalled server")
        # Meanwhile the other pool answers, on another connection.
        assert other.set("k2", "v2") and other.get("k") == b"v"
        assert t.is_alive(), "the stalled request is still waiting"
        t.join(10)
        assert "reply" not in outcome, outcome
        assert isinstance(outcome["error"], redis.ResponseError), outcome
        assert "TLS handshake not finished after 800 ms" in str(outcome["error"]), outcome
        assert 0.7 < outcome["took"] < 5, outcome
        wait_log(p.log_path,
                 f"server '{HOST}:{stall_port}' closed: TLS handshake not finished after 800 ms")
        # The same connection goes on: replies in order, the stalled
        # server's request failing (again) without holding up the others.
        pipe = r.pipeline(transaction=False)
        pipe.set("k3", "v3").get("stall:k").get("k3")
        got = pipe.execute(raise_on_error=False)
        assert got[0] is True and got[2] == b"v3", got
        assert isinstance(got[1], redis.ResponseError) and "TLS handshake" in str(got[1]), got
        assert plain_client(good.port).get("k3") == b"v3"
        assert r.get("k3") == b"v3"
    finally:
        stop.set()
        acceptor.join(5)
        stall.close()
        for c in accepted:
            c.close()


def test_bad_tls_config_is_refused(procs, certs, tmp_path):
    conf = tmp_path / "bad.yml"
    conf.write_text(
        "rd:\n  listen: 127.0.0.1:1\n  redis: true\n"
        f"  tls_cert: {certs / 'server.crt'}\n  tls_key: {certs / 'client.key'}\n"
        "  servers:\n    - 127.0.0.1:6379:1\n"
        "mc:\n  listen: 127.0.0.1:2\n  server_tls_ca: /nonexistent.pem\n"
        "  servers:\n    - 127.0.0.1:11211:1\n")
    from procs import walnut_bin
    out = subprocess.run([walnut_bin(), "-t", "-c", str(conf)], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "bad.yml:4" in text and "do not fit" in text, text
    assert "bad.yml:10" in text and "'server_tls_ca' needs 'server_tls: true'" in text, text


def test_x509_v1_certificate_says_what_to_do(certs, tmp_path):
    """A certificate signed without extensions is X.509 v1, which rustls
    refuses: the error says so and how to make a v3 one, not "do not fit"."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "v1.key", "-out", "v1.csr",
            "-subj", "/CN=localhost", cwd=tmp_path)
    openssl("x509", "-req", "-in", "v1.csr", "-CA", str(certs / "ca.crt"), "-CAkey",
            str(certs / "ca.key"), "-out", "v1.crt", "-days", "2", cwd=tmp_path)
    conf = tmp_path / "v1.yml"
    conf.write_text(
        "rd:\n  listen: 127.0.0.1:1\n  redis: true\n"
        f"  tls_cert: {tmp_path / 'v1.crt'}\n  tls_key: {tmp_path / 'v1.key'}\n"
        "  servers:\n    - 127.0.0.1:6379:1\n")
    from procs import walnut_bin
    out = subprocess.run([walnut_bin(), "-t", "-c", str(conf)], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode != 0
    assert "is X.509 version 1" in out.stderr and "-extfile" in out.stderr, out.stderr
    assert "do not fit" not in out.stderr


class Load:
    """Busy persistent TLS clients with no retry; counts rounds and errors."""

    def __init__(self, port: int, certs: Path, n: int = 4):
        self.clients = [tls_client(port, certs) for _ in range(n)]
        self.rounds = 0
        self.errors: list[str] = []
        self.stop_flag = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(n)]

    def run(self, i: int) -> None:
        r = self.clients[i]
        j = 0
        deadline = time.monotonic() + 90
        while not self.stop_flag.is_set() and time.monotonic() < deadline:
            j += 1
            try:
                pipe = r.pipeline(transaction=False)
                pipe.set(f"l{i}:{j}", j).get(f"l{i}:{j}")
                assert pipe.execute() == [True, str(j).encode()]
                self.rounds += 1
            except Exception as e:  # noqa: BLE001 - every failure counts
                self.errors.append(repr(e))
                return

    def start(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def progress(self, n: int = 100) -> None:
        base = self.rounds
        wait_until(lambda: self.rounds >= base + n or self.errors, 30, what="load to go on")
        assert not self.errors, self.errors

    def stop(self) -> None:
        self.stop_flag.set()
        for t in self.threads:
            t.join(30)


def served_serial(port: int, certs: Path) -> int:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    with socket.create_connection((HOST, port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            return int(s.getpeercert()["serialNumber"], 16)


def cert_serial(path: Path) -> int:
    out = subprocess.run(["openssl", "x509", "-in", str(path), "-noout", "-serial"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip().split("=")[1], 16)


def test_reload_with_new_certificates_under_load(procs, certs, tmp_path):
    backend = procs.redis()
    live = tmp_path / "live"
    live.mkdir()
    for f in ("server.crt", "server.key"):
        (live / f).write_bytes((certs / f).read_bytes())
    pool = redis_pool([backend], tls_cert=str(live / "server.crt"), tls_key=str(live / "server.key"))
    p = start_walnut(procs, {"rd": pool}, args=["--workers", "2"])
    gen1 = wait_workers(p.pid, 2)
    assert served_serial(p.port("rd"), certs) == cert_serial(certs / "server.crt")
    load = Load(p.port("rd"), certs).start()
    try:
        load.progress()
        for f in ("server.crt", "server.key"):
            (live / f).write_bytes((certs / f.replace("server", "server2")).read_bytes())
        p.signal(signal.SIGHUP)
        wait_workers(p.pid, 2, exclude=gen1.values())
        load.progress(200)
        # New connections get the new certificate.
        wait_until(lambda: served_serial(p.port("rd"), certs) == cert_serial(certs / "server2.crt"),
                   10, what="the new certificate served")
        load.progress(200)
        # The old workers relay the TLS sessions they hold (relay.rs)...
        assert any(alive(w) for w in gen1.values())
    finally:
        load.stop()
    assert not load.errors, load.errors
    assert load.rounds > 500
    # ...and exit once those clients are gone.
    for c in load.clients:
        c.close()
    for w in gen1.values():
        wait_gone(w, timeout=10)
    with urllib.request.urlopen(f"http://{HOST}:{p.admin_port}/metrics", timeout=10) as resp:
        body = resp.read().decode()
    assert 'walnut_tls_certificate_days_left{pool="rd",side="listen"} 4' in body


# ------------------------------------------------------------------ ACL ---


def acl_server(procs) -> Redis:
    r = procs.redis()
    admin = plain_client(r.port)
    admin.execute_command("ACL", "SETUSER", "walnut", "on", ">walnutpw", "~*", "+@all")
    admin.execute_command("ACL", "SETUSER", "default", "off")
    # The same users on the server as in walnut's pool: the oracle for
    # error texts.
    admin.execute_command("ACL", "SETUSER", "ro", "on", ">ropw", "~*", "+@read", "+@connection")
    admin.execute_command("ACL", "SETUSER", "app", "on", ">apppw", "~app:*", "+@all")
    return r


def test_acl_users_to_servers_and_from_clients(procs):
    srv = acl_server(procs)
    pool = redis_pool([srv], redis_auth="walnutpw", redis_auth_user="walnut", users=[
        "ro ropw readonly", "app apppw ~app:*"])
    p = start_walnut(procs, {"rd": pool}, args=["--workers", "1"])
    port = p.port("rd")

    def both(user: str, pw: str, *cmd):
        """The reply (or error text) of walnut and of redis-server itself."""
        out = []
        for target in (port, srv.port):
            c = plain_client(target, username=user, password=pw)
            try:
                out.append(c.execute_command(*cmd))
            except redis.ResponseError as e:
                out.append(f"ERR: {e}")
            finally:
                c.close()
        return out

    # walnut logs in to the server as `walnut`.
    assert plain_client(port, password="walnutpw").set("app:1", "x")
    ro_set = both("ro", "ropw", "SET", "k", "v")
    assert ro_set[0] == ro_set[1] == "ERR: this user has no permissions to run the 'set' command"
    assert both("ro", "ropw", "GET", "app:1") == [b"x", b"x"]
    key_err = both("app", "apppw", "GET", "other")
    assert key_err[0] == key_err[1] == \
        "ERR: this user has no permissions to access one of the keys used as arguments"
    assert both("app", "apppw", "MGET", "app:1", "other")[0] == key_err[0]
    assert both("app", "apppw", "SET", "app:2", "y") == [True, True]
    # Wrong credentials: Redis's exact text, AUTH and HELLO alike.
    for target in (port, srv.port):
        with pytest.raises(redis.AuthenticationError) as e:
            plain_client(target, username="app", password="nope").ping()
        assert "invalid username-password pair or user is disabled" in str(e.value)
    with pytest.raises(redis.AuthenticationError):
        plain_client(port, username="app", password="nope", protocol=3).ping()
    r3 = plain_client(port, username="app", password="apppw", protocol=3)
    assert r3.get("app:1") == b"x"
    # Not logged in at all.
    with pytest.raises(redis.AuthenticationError):
        plain_client(port).get("app:1")
    # redis-cli with --user.
    out = subprocess.run([REDIS_CLI_BIN, "-h", HOST, "-p", str(port), "--user", "ro", "--pass",
                          "ropw", "--no-auth-warning", "get", "app:1"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert out.strip() == "x"


def test_acl_user_survives_a_reload_and_a_removed_user_is_logged_out(procs):
    srv = procs.redis()
    pool = redis_pool([srv], users=["app apppw ~app:*", "tmp tmppw"])
    p = start_walnut(procs, {"rd": pool}, args=["--workers", "1"])
    gen1 = wait_workers(p.pid, 1)
    app = plain_client(p.port("rd"), username="app", password="apppw")
    tmp = plain_client(p.port("rd"), username="tmp", password="tmppw")
    assert app.set("app:k", "1") and tmp.set("any", "1")
    p.conf_path.write_text(to_yaml({"rd": {**p.pools["rd"], "users": ["app apppw ~app:*"]}}))
    p.signal(signal.SIGHUP)
    wait_workers(p.pid, 1, exclude=gen1.values())
    for w in gen1.values():
        wait_gone(w, timeout=10)
    assert app.get("app:k") == b"1", "same connection, same user"
    with pytest.raises(redis.ResponseError) as e:
        app.get("other")
    assert "keys used as arguments" in str(e.value)
    with pytest.raises(redis.AuthenticationError):
        tmp.get("any")
    assert log_has(p.log_path, "handing clients over")


def test_hot_upgrade_keeps_busy_tls_clients(procs, certs):
    """USR2 + QUIT under TLS load with graceful_timeout 1s: the old binary's
    workers relay their TLS clients past that timeout, as long as the
    clients stay, and its master waits for them."""
    import os
    from procmodel import children, workers_of

    backend = procs.redis()
    p = start_walnut(procs, {"rd": redis_pool([backend], **listen_tls(certs))},
                     process={"graceful_timeout": "1s"}, args=["--workers", "1"])
    gen1 = wait_workers(p.pid, 1)
    load = Load(p.port("rd"), certs, n=3).start()
    new_master = None
    try:
        load.progress()
        p.signal(signal.SIGUSR2)
        new_master = wait_until(
            lambda: next((c for c in children(p.pid) if c not in gen1.values()), None), 10,
            interval=0.01, what="new master")
        wait_workers(new_master, 1)
        wait_log(p.log_path, f"new master (pid {new_master}) is ready")
        p.signal(signal.SIGQUIT)
        wait_log(p.log_path, "still relays TLS clients or serves subscribers")
        # Well past graceful_timeout: the clients are still served.
        time.sleep(2.5)
        load.progress(300)
        assert alive(p.pid), "the old master waits for its relaying worker"
    finally:
        load.stop()
        for c in load.clients:
            c.close()
    assert not load.errors, load.errors
    p.proc.wait(timeout=15)
    for w in gen1.values():
        wait_gone(w, timeout=5)
    assert tls_client(p.port("rd"), certs).ping()
    nw = list(workers_of(new_master).values())
    os.kill(new_master, signal.SIGTERM)
    wait_gone(new_master)
    for w in nw:
        wait_gone(w)
