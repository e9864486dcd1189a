"""walnut's admin port, latency histograms, slow log and Prometheus metrics,
with two workers over real Redis backends (walnut only)."""

from __future__ import annotations

import math
import re
import socket
import subprocess
import time

import pytest

from procs import HOST, free_port, redis_pool, walnut_bin
from test_redis_basic import connect, unique

# A script that keeps Redis busy for ~20 ms (EVAL passes through walnut).
SLOW = (
    "local t=redis.call('TIME') local s=t[1]*1000000+t[2] "
    "while true do local n=redis.call('TIME') "
    "if n[1]*1000000+n[2]-s >= tonumber(ARGV[1]) then break end end return 1"
)


def admin(port: int, line: str, timeout: float = 5.0) -> str:
    """Send an inline admin command; the reply up to END (or one line)."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(line.encode() + b"\r\n")
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            if buf.endswith(b"END\r\n") or (buf.count(b"\r\n") == 1 and re.match(rb"^(OK|ERR)", buf)):
                break
    return buf.decode()


def http_get(port: int, path: str) -> tuple[str, str]:
    with socket.create_connection((HOST, port), timeout=5) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        buf = b""
        while chunk := s.recv(65536):
            buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    return head.decode(), body.decode()


@pytest.fixture(scope="module")
def backends(module_procs):
    return [module_procs.redis() for _ in range(2)]


@pytest.fixture
def walnut(procs, backends):
    port = free_port()
    p = procs.proxy(
        "walnut",
        {"beta": redis_pool(backends, hash_tag="{}")},
        extra_args=["--workers", "2", "--admin", f"{HOST}:{port}"],
    )
    p.admin_port = port
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            if "PONG" in admin(port, "ping"):
                break
        except OSError:
            time.sleep(0.05)
    return p


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[max(0, math.ceil(q * len(v)) - 1)]


def kv(line: str) -> dict[str, str]:
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


def test_status_and_protocols(walnut):
    st = admin(walnut.admin_port, "status")
    assert "master_pid: " in st and "generation: 1" in st
    assert len(re.findall(r"worker \d: pid=\d+ state=running", st)) == 2
    assert re.search(r"config_checksum: fnv1a64:[0-9a-f]{16}", st)
    # RESP framing, as redis-cli sends it.
    with socket.create_connection((HOST, walnut.admin_port), timeout=5) as s:
        s.sendall(b"*1\r\n$4\r\nping\r\n*2\r\n$7\r\nslowlog\r\n$3\r\nlen\r\n")
        time.sleep(0.3)
        got = s.recv(65536)
    assert got.startswith(b"$4\r\nPONG\r\n$"), got
    assert admin(walnut.admin_port, "bogus").startswith("ERR ")
    head, body = http_get(walnut.admin_port, "/stats")
    assert head.startswith("HTTP/1.1 200") and '"service":"nutcracker"' in body
    assert http_get(walnut.admin_port, "/nope")[0].startswith("HTTP/1.1 404")


def test_requests_sum_over_workers(walnut):
    n = 0
    clients = [connect(walnut.port()) for _ in range(8)]
    for i, c in enumerate(clients):
        for j in range(25):
            c.set(unique(), "v")
            n += 1
    for c in clients:
        c.close()
    stats = walnut.stats()
    total = sum(s["requests"] for k, s in stats["beta"].items() if isinstance(s, dict))
    assert total == n
    for f in ["service", "source", "version", "uptime", "timestamp", "total_connections", "curr_connections"]:
        assert f in stats
    # twemproxy's identity for dashboards that match on it; walnut's beside it.
    assert (stats["service"], stats["version"]) == ("nutcracker", "0.5.0")
    walnut_version = subprocess.run([walnut_bin(), "-V"], capture_output=True, text=True).stdout.strip()
    assert walnut_version == f"This is walnut-{stats['walnut_version']}"
    for f in ["client_eof", "client_err", "client_connections", "server_ejects", "forward_error", "fragments"]:
        assert f in stats["beta"]
    lines = [l for l in admin(walnut.admin_port, "pools").splitlines() if "class=write" in l]
    assert kv(lines[0])["count"] == str(n)


def parse_prometheus(text: str) -> dict[str, list[tuple[dict, float]]]:
    """A strict parser of the text format subset walnut emits."""
    families: dict[str, str] = {}
    samples: dict[str, list[tuple[dict, float]]] = {}
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
    label = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in families, f"duplicate family {name}"
            assert kind in ("counter", "gauge", "histogram")
            families[name] = kind
            continue
        m = sample.match(line)
        assert m, f"bad line {line!r}"
        name, labels_s, value = m.group(1), m.group(3) or "", float(m.group(4))
        labels = {}
        pos = 0
        while pos < len(labels_s):
            lm = label.match(labels_s, pos)
            assert lm, f"bad labels {labels_s!r}"
            labels[lm.group(1)] = lm.group(2)
            pos = lm.end()
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in families or base in families, f"sample {name} without TYPE"
        samples.setdefault(name, []).append((labels, value))
    return samples


# 90 ms per request: long enough that the few milliseconds a loaded machine
# can add on the client's side stay well under the 10 % being checked.
N_SLOW = 30


def test_metrics_and_p99_of_slow_backend(walnut):
    c = connect(walnut.port())
    measured = []
    for i in range(N_SLOW):
        t = time.perf_counter()
        assert c.eval(SLOW, 1, f"{{k}}{i}", 90000) == 1
        measured.append((time.perf_counter() - t) * 1e6)
    c.close()
    other = [kv(l) for l in admin(walnut.admin_port, "pools").splitlines() if "class=other" in l][0]
    assert int(other["count"]) == N_SLOW
    for q, key in [(0.99, "p99_us"), (0.5, "p50_us")]:
        want = pct(measured, q)
        got = int(other[key])
        assert abs(got - want) / want < 0.10, (key, got, want)
    head, body = http_get(walnut.admin_port, "/metrics")
    assert head.startswith("HTTP/1.1 200")
    s = parse_prometheus(body)
    count = [v for l, v in s["walnut_request_duration_seconds_count"] if l["class"] == "other"]
    assert count == [N_SLOW]
    buckets = [(l["le"], v) for l, v in s["walnut_request_duration_seconds_bucket"] if l["class"] == "other"]
    assert dict(buckets)["0.05"] == 0 and dict(buckets)["0.25"] == N_SLOW and dict(buckets)["+Inf"] == N_SLOW
    assert len(s["walnut_worker_resident_memory_bytes"]) == 2
    assert all(v > 0 for _, v in s["walnut_worker_resident_memory_bytes"])
    assert len(s["walnut_worker_cpu_seconds_total"]) == 2
    assert "walnut_worker_accept_eagain_total" in s and "walnut_worker_respawns_total" in s
    assert sum(v for _, v in s["walnut_server_requests_total"]) == N_SLOW
    check_metric_names(body)
    assert [v for _, v in s["walnut_build_info"]] == [1]


def check_metric_names(body: str) -> None:
    """Every family has HELP and TYPE; counters end in _total and nothing
    else does; no name says a word twice (`walnut_server_server_eof_total`)."""
    helps = dict(re.findall(r"^# HELP (\S+) (.+)$", body, re.M))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", body, re.M))
    assert helps.keys() == types.keys()
    samples = {re.match(r"[a-z_]+", l).group(0) for l in body.splitlines() if l and not l.startswith("#")}
    for name in samples:
        family = re.sub(r"_(bucket|sum|count)$", "", name) if types.get(name) is None else name
        assert family in types, f"{name} has no # TYPE"
        assert helps[family].strip(), family
    for family, kind in types.items():
        assert (kind == "counter") == family.endswith("_total"), (family, kind)
        words = family.split("_")
        assert len(words) == len(set(words)), f"{family} repeats a word"
    for expected in ("walnut_server_eof_total", "walnut_server_timeouts_total", "walnut_pool_client_connections",
                     "walnut_worker_accepted_connections_total", "walnut_worker_open_connections",
                     "walnut_accepted_connections_total", "walnut_open_connections",
                     "walnut_server_ejected_timestamp_seconds", "walnut_server_response_bytes_total"):
        assert expected in types, expected


def slow_burst(port: int, n: int, us: int) -> None:
    clients = [connect(port) for _ in range(n)]
    for i, c in enumerate(clients):
        c.eval(SLOW, 1, f"{{s}}{i}", us)
    for c in clients:
        c.close()


def test_slowlog_and_config_set(walnut):
    port = walnut.admin_port
    slow_burst(walnut.port(), 16, 15000)
    log = admin(port, "slowlog get 100")
    entries = [kv(l) for l in log.splitlines() if l.startswith("id=")]
    assert len(entries) == 16
    assert all(e["cmd"] == "EVAL" and e["key"].startswith('"{s}') for e in entries)
    assert {e["id"].split(".")[0] for e in entries} == {"0", "1"}, "both workers logged"
    assert admin(port, "slowlog len").startswith("16")
    assert admin(port, "slowlog reset").startswith("OK")
    assert admin(port, "slowlog len").startswith("0")
    # Raise the threshold at run time: the same requests are no longer slow.
    assert admin(port, "config set slowlog_threshold 50ms").startswith("OK")
    slow_burst(walnut.port(), 16, 15000)
    assert admin(port, "slowlog len").startswith("0")
    assert "runtime_set: slowlog_threshold=50ms" in admin(port, "status")
    # Server timeout per pool: 5 ms makes a 30 ms script fail on every worker.
    assert admin(port, "config set pool.beta.timeout 5").startswith("OK")
    errors = 0
    for i in range(8):
        c = connect(walnut.port())
        try:
            c.eval(SLOW, 1, f"{{t}}{i}", 30000)
        except Exception:  # noqa: BLE001 - the timeout error reply
            errors += 1
        c.close()
    assert errors == 8
    assert admin(port, "config set pool.beta.timeout 0").startswith("OK")
    time.sleep(0.1)
    c = connect(walnut.port())
    assert c.eval(SLOW, 1, "{t}x", 30000) == 1
    c.close()
    assert admin(port, "config set pool.nope.timeout 5").startswith("ERR")
    assert admin(port, "config set nope 1").startswith("ERR")
    assert admin(port, "config get pool.beta.timeout").splitlines()[0] == "0"
    assert "slowlog_threshold: 50000us" in admin(port, "config show")


def test_top_shows_pools(walnut):
    p = subprocess.Popen([walnut_bin(), "--top", f"{HOST}:{walnut.admin_port}"], stdout=subprocess.PIPE)
    time.sleep(1.5)
    p.terminate()
    out, _ = p.communicate(timeout=5)
    assert b"beta" in out and b"REQ/S" in out


def test_top_into_head_exits_quietly(walnut):
    """`walnut --top | head -n 3`: head closes the pipe; --top ends with
    status 0 and prints nothing on stderr (no panic), and writes no terminal
    escapes into a pipe."""
    top = subprocess.Popen(
        [walnut_bin(), "--top", f"{HOST}:{walnut.admin_port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    head = subprocess.Popen(["head", "-n", "3"], stdin=top.stdout, stdout=subprocess.PIPE)
    top.stdout.close()
    out, _ = head.communicate(timeout=10)
    try:
        code = top.wait(timeout=10)
    finally:
        if top.poll() is None:
            top.kill()
            top.wait()
    err = top.stderr.read()
    top.stderr.close()
    assert code == 0, err
    assert err == b"", err
    lines = out.decode().splitlines()
    assert len(lines) == 3 and lines[0].startswith("walnut top") and "\x1b" not in out.decode(), out


def test_top_small_and_resized_terminal(walnut):
    """In a terminal too small for the view --top says so; once the window
    grows (no restart) the view is drawn, cut to the window's width."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import termios

    def set_size(fd: int, cols: int, rows: int) -> None:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    master, slave = pty.openpty()
    set_size(slave, 30, 10)
    top = subprocess.Popen(
        [walnut_bin(), "--top", f"{HOST}:{walnut.admin_port}"], stdout=slave, stderr=subprocess.DEVNULL
    )
    os.close(slave)
    screen = b""

    def read_until(pred, timeout: float = 10.0) -> bytes:
        nonlocal screen
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not pred(screen):
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                screen += os.read(master, 65536)
        assert pred(screen), screen
        return screen

    try:
        read_until(lambda b: b"terminal 30x10, needs 40x4" in b)
        set_size(master, 44, 20)
        screen = b""
        out = read_until(lambda b: b"beta" in b and b"REQ/S" in b)
        last = out.rsplit(b"\x1b[2J", 1)[-1].decode()
        assert all(len(line) <= 44 for line in last.replace("\r", "").split("\n")), last
    finally:
        top.terminate()
        top.wait(timeout=5)
        os.close(master)


def test_config_show_round_trips_through_t(walnut, tmp_path):
    """`config show` is YAML that `walnut -t` accepts, with the values the
    running walnut uses; `config get` returns one of them."""
    port = walnut.admin_port
    assert admin(port, "config set pool.beta.timeout 750").startswith("OK")
    shown = admin(port, "config show")
    assert "Tcp {" not in shown and "N(" not in shown and "Fnv1a" not in shown and "Reuseport" not in shown
    path = tmp_path / "shown.yml"
    path.write_text(shown.replace("\r\n", "\n").removesuffix("END\n"))
    out = subprocess.run([walnut_bin(), "-t", "-c", str(path)], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and out.stderr.strip().endswith("syntax is ok"), out.stderr + shown
    # The file it shows starts the same pools: check it with the same keys.
    assert f"listen: 127.0.0.1:{walnut.port()}" in shown
    assert "\n  workers: 2\r\n" in shown
    assert "timeout: 750" in shown
    assert admin(port, "config get pool.beta.timeout").splitlines()[0] == "750"
    assert admin(port, "config get beta.hash").splitlines()[0] == "fnv1a_64"
    assert admin(port, "config get workers").splitlines()[0] == "2"
    servers = [l for l in admin(port, "config get pool.beta.servers").splitlines() if l != "END"]
    assert len(servers) == 2 and all(re.fullmatch(r"127\.0\.0\.1:\d+:1", s) for s in servers), servers
    assert admin(port, "config get pool.nope.hash").startswith("ERR no pool named 'nope'")
    assert admin(port, "config get beta.colour").startswith("ERR unknown parameter")
    assert admin(port, "config get").startswith("ERR usage: config get PARAM")


def test_slowlog_threshold_per_pool(procs, backends):
    """A pool's own `slowlog_threshold` overrides the global one."""
    port = free_port()
    p = procs.proxy(
        "walnut",
        {
            "quick": redis_pool(backends, hash_tag="{}", slowlog_threshold="2ms"),
            "lax": redis_pool(backends, hash_tag="{}", slowlog_threshold=0),
        },
        extra_args=["--admin", f"{HOST}:{port}"],
    )
    assert "PONG" in admin(port, "ping")
    admin(port, "slowlog reset")
    for pool in ("quick", "lax"):
        c = connect(p.port(pool))
        for i in range(3):
            assert c.eval(SLOW, 1, f"{{p}}{pool}{i}", 5000) == 1  # 5 ms: under the global 10 ms
        c.close()
    entries = [kv(l) for l in admin(port, "slowlog get 100").splitlines() if l.startswith("id=")]
    assert len(entries) == 3, entries
    assert all(e["pool"] == "quick" for e in entries), entries


def raw_admin(port: int, line: str) -> bytes:
    """A command's reply as sent, read until the server closes after `quit`."""
    with socket.create_connection((HOST, port), timeout=5) as s:
        s.sendall(line.encode() + b"\r\nquit\r\n")
        buf = b""
        while chunk := s.recv(65536):
            buf += chunk
    return buf.removesuffix(b"OK\r\nEND\r\n")


def test_every_reply_ends_with_end_and_config_saves_as_a_file(walnut, tmp_path):
    """`config set`, errors and text alike end with END on the line
    protocol; GET /config is the running configuration alone, a file that
    loads again."""
    port = walnut.admin_port
    assert raw_admin(port, "config set pool.beta.timeout 650") == b"OK\r\nEND\r\n"
    assert raw_admin(port, "config set nope 1").endswith(b"\r\nEND\r\n")
    assert raw_admin(port, "ping") == b"PONG\r\nEND\r\n"
    head, body = http_get(port, "/config")
    assert "200 OK" in head and "END" not in body and "timeout: 650" in body
    path = tmp_path / "saved.yml"
    path.write_text(body)
    out = subprocess.run([walnut_bin(), "-t", "-c", str(path)], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr


def test_status_checksum_is_the_running_configuration(walnut):
    """The checksum `status` reports is that of the configuration running;
    a file changed on disk since shows apart until it is reloaded."""
    port = walnut.admin_port

    def field(name: str) -> str | None:
        m = re.search(rf"^{name}: (.*)$", admin(port, "status"), re.M)
        return m.group(1).strip() if m else None

    running = field("config_checksum")
    assert running and running.startswith("fnv1a64:")
    assert field("config_file_checksum") is None
    conf = walnut.conf_path
    conf.write_text(conf.read_text() + "# edited\n")
    assert field("config_checksum") == running
    assert "reload to apply" in (field("config_file_checksum") or "")
    assert admin(port, "reload").startswith("OK")
    assert field("config_checksum") != running
    assert field("config_file_checksum") is None


def test_top_at_the_stats_port_says_so(walnut):
    out = subprocess.run([walnut_bin(), "--top", f"{HOST}:{walnut.stats_port}"],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 1
    assert "is a stats port" in out.stderr and "admin listening on" in out.stderr, out.stderr
