"""Redis pub/sub through walnut over three servers: a channel lives on the
server its name hashes to (PUBLISH and SUBSCRIBE agree), a pattern listens
on every server and is confirmed once, the subscriber sees one connection's
counts; RESP2's subscribed-mode rules and RESP3 pushes; leaving closes the
server connections; a subscriber that does not read is bounded by
client_output_limit; a server lost under a subscriber closes it."""

from __future__ import annotations

import hashlib
import socket
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from procs import HOST, redis_pool, wait_until


def client(port: int, protocol: int = 2) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, protocol=protocol, retry=Retry(NoBackoff(), 0),
                       socket_timeout=10)


def chan(i: int) -> str:
    return "ch" + hashlib.sha1(str(i).encode()).hexdigest()[:8]


@pytest.fixture
def three(procs):
    servers = [procs.redis() for _ in range(3)]
    p = procs.proxy("walnut", {"rd": redis_pool(servers, client_output_limit="1m")},
                    extra_args=["--workers", "1"])
    return p, servers


def messages(ps, n: int, timeout: float = 10) -> list[dict]:
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        m = ps.get_message(timeout=0.2)
        if m is not None:
            out.append(m)
    return out


def connected(direct) -> int:
    """Clients connected to the servers, asked over one held connection
    each (a connection opened per count would linger until collected)."""
    return sum(d.info("clients")["connected_clients"] for d in direct)


@pytest.mark.parametrize("protocol", [2, 3])
def test_channels_over_servers_and_patterns(three, protocol):
    p, servers = three
    sub, pub = client(p.port("rd"), protocol), client(p.port("rd"))
    channels = [chan(i) for i in range(12)]
    # They live on several servers, as keys of those names would.
    direct = [redis.Redis(host=HOST, port=s.port) for s in servers]
    for c in channels:
        pub.set(c, 1)
    assert sum(1 for d in direct if d.dbsize() > 0) >= 2
    # Every name this test publishes to is published once first, so the
    # pool's connection to each server it needs is open before the count:
    # the 12 channels alone may leave one of the three servers untouched.
    for name in channels + [f"news.{chan(i)}" for i in range(8)]:
        assert pub.publish(name, "warm") == 0
    base = connected(direct)
    ps = sub.pubsub()
    ps.subscribe(*channels)
    got = messages(ps, len(channels))
    assert [m["type"] for m in got] == ["subscribe"] * len(channels)
    # One connection's counts: 1, 2, ... 12.
    assert [m["data"] for m in got] == list(range(1, len(channels) + 1))
    assert sorted(m["channel"].decode() for m in got) == sorted(channels)
    for i, c in enumerate(channels):
        assert pub.publish(c, f"m{i}") == 1  # the one server that has the channel
    got = messages(ps, len(channels))
    assert sorted((m["channel"].decode(), m["data"].decode()) for m in got) == sorted(
        (c, f"m{i}") for i, c in enumerate(channels))
    # A pattern: on every server, confirmed once.
    ps.psubscribe("news.*")
    got = messages(ps, 1)
    assert got[0]["type"] == "psubscribe" and got[0]["data"] == len(channels) + 1
    assert messages(ps, 1, timeout=0.5) == []
    for i in range(8):
        pub.publish(f"news.{chan(i)}", str(i))
    got = messages(ps, 8)
    assert sorted(m["data"].decode() for m in got) == [str(i) for i in range(8)]
    assert all(m["type"] == "pmessage" for m in got)
    # Leaving: the counts come down, and the server connections close.
    ps.unsubscribe()
    ps.punsubscribe()
    got = messages(ps, len(channels) + 1)
    assert got[-1]["data"] == 0
    wait_until(lambda: connected(direct) == base, 10, what="the subscriber's connections closed")


def test_resp2_subscribed_mode_rules(three):
    p, _ = three
    with socket.create_connection((HOST, p.port("rd"))) as s:
        s.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n")
        buf = b""
        while not buf.endswith(b":1\r\n"):
            buf += s.recv(4096)
        assert buf == b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"
        s.sendall(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n")
        # redis-server 7's text without RESET, which walnut refuses.
        want = (b"-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
                b"QUIT are allowed in this context\r\n*2\r\n$4\r\npong\r\n$0\r\n\r\n")
        buf = b""
        while len(buf) < len(want):
            buf += s.recv(4096)
        assert buf == want
        # RESET is refused, as the text says, and the client stays
        # subscribed: a PUBLISH still reaches it.
        s.sendall(b"*1\r\n$5\r\nRESET\r\n")
        buf = b""
        while not buf.endswith(b"\r\n"):
            buf += s.recv(4096)
        assert buf.startswith(b"-ERR ") and b"RESET" in buf.upper(), buf
        assert client(p.port("rd")).publish("a", "still") == 1
        want = b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$5\r\nstill\r\n"
        buf = b""
        while len(buf) < len(want):
            buf += s.recv(4096)
        assert buf == want


def test_unsubscribe_from_channels_never_subscribed(three):
    """redis-server answers each name with a confirmation and the count
    unchanged; nothing reaches a server (it holds nothing of the client)."""
    p, servers = three
    with socket.create_connection((HOST, p.port("rd")), timeout=10) as s:
        s.sendall(b"*4\r\n$11\r\nUNSUBSCRIBE\r\n$3\r\nfoo\r\n$3\r\nbar\r\n$4\r\nquux\r\n"
                  b"*2\r\n$12\r\nPUNSUBSCRIBE\r\n$2\r\np*\r\n*1\r\n$4\r\nPING\r\n")
        want = (b"*3\r\n$11\r\nunsubscribe\r\n$3\r\nfoo\r\n:0\r\n"
                b"*3\r\n$11\r\nunsubscribe\r\n$3\r\nbar\r\n:0\r\n"
                b"*3\r\n$11\r\nunsubscribe\r\n$4\r\nquux\r\n:0\r\n"
                b"*3\r\n$12\r\npunsubscribe\r\n$2\r\np*\r\n:0\r\n"
                b"+PONG\r\n")
        buf = b""
        while len(buf) < len(want):
            chunk = s.recv(4096)
            assert chunk, buf
            buf += chunk
        assert buf == want
    # Subscribed to one channel, unsubscribing from it and another: the
    # other is answered here with the count as it stands.
    r = client(p.port("rd"))
    ps = r.pubsub()
    ps.subscribe("held")
    assert messages(ps, 1)[0]["type"] == "subscribe"
    ps.unsubscribe("never", "held")
    got = messages(ps, 2)
    assert sorted((m["channel"], m["data"]) for m in got) == [(b"held", 0), (b"never", 1)], got


def test_counts_and_ping_as_one_redis_server(three):
    """A channel subscribed twice counts once, a pattern (held by every
    server) once, and a subscribed-mode PING carries its message back."""
    p, _ = three

    def read(s: socket.socket, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(4096)
            assert chunk, buf
            buf += chunk
        return buf

    with socket.create_connection((HOST, p.port("rd")), timeout=10) as s:
        s.sendall(b"*4\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n$1\r\na\r\n$1\r\nb\r\n")
        # a and b may live on two servers, each confirming on its own:
        # the counts are those of one connection whatever the order.
        got = read(s, 3 * len(b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"))
        assert sorted(got.split(b"*")[1:]) == sorted([
            b"3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n",
            b"3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n",
            b"3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n",
        ]) or sorted(got.split(b"*")[1:]) == sorted([
            b"3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:1\r\n",
            b"3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:2\r\n",
            b"3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:2\r\n",
        ]), got
        s.sendall(b"*2\r\n$10\r\nPSUBSCRIBE\r\n$2\r\np*\r\n")
        want = b"*3\r\n$10\r\npsubscribe\r\n$2\r\np*\r\n:3\r\n"
        assert read(s, len(want)) == want
        s.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\nb\r\n")
        want = b"*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:3\r\n"
        assert read(s, len(want)) == want
        s.sendall(b"*2\r\n$4\r\nPING\r\n$5\r\nhello\r\n")
        want = b"*2\r\n$4\r\npong\r\n$5\r\nhello\r\n"
        assert read(s, len(want)) == want


def test_resp3_subscriber_runs_commands_too(three):
    p, _ = three
    r = client(p.port("rd"), 3)
    ps = r.pubsub()
    ps.subscribe("r3")
    assert messages(ps, 1)[0]["type"] == "subscribe"
    r.set("plain", "v")
    assert r.get("plain") == b"v"
    assert client(p.port("rd")).publish("r3", "hello") == 1
    got = messages(ps, 1)
    assert got[0]["type"] == "message" and got[0]["data"] == b"hello"


def test_a_subscriber_that_does_not_read_is_closed(three):
    p, _ = three
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((HOST, p.port("rd")))
    s.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$4\r\nslow\r\n")
    time.sleep(0.2)
    pub = client(p.port("rd"))
    payload = "x" * 65536
    # Far more than client_output_limit (1 MB) published, never read.
    for _ in range(400):
        pub.publish("slow", payload)
    assert pub.ping() is True  # the others go on

    def closed() -> bool:
        s.setblocking(False)
        try:
            while True:
                data = s.recv(1 << 20)
                if not data:
                    return True
        except BlockingIOError:
            return False
        except ConnectionResetError:
            return True
    wait_until(closed, 20, what="the slow subscriber closed")
    s.close()


def test_a_server_lost_under_a_subscriber_closes_it(three):
    p, servers = three
    sub = client(p.port("rd"))
    ps = sub.pubsub()
    ps.psubscribe("any.*")  # on every server
    assert messages(ps, 1)[0]["type"] == "psubscribe"
    servers[1].kill()
    with pytest.raises(redis.ConnectionError):
        for _ in range(50):
            ps.get_message(timeout=0.2)


def test_pubsub_introspection_over_servers(three):
    """PUBSUB CHANNELS / NUMSUB / NUMPAT answered for the whole pool, as
    one redis-server would; SPUBLISH routed by its channel."""
    p, servers = three
    sub, pub = client(p.port("rd")), client(p.port("rd"))
    channels = [chan(i) for i in range(8)]
    ps = sub.pubsub()
    ps.subscribe(*channels)
    ps.psubscribe("news.*", "alerts.*")
    assert len(messages(ps, 10)) == 10  # the confirmations
    # The channels live on several servers.
    on = [set(x.decode() for x in redis.Redis(host=HOST, port=s.port).pubsub_channels())
          for s in servers]
    assert sum(1 for s in on if s) >= 2, on
    assert sorted(c.decode() for c in pub.pubsub_channels()) == sorted(channels)
    assert sorted(c.decode() for c in pub.pubsub_channels("ch*")) == sorted(channels)
    numsub = pub.pubsub_numsub(channels[0], channels[5], "nobody")
    assert numsub == [(channels[0].encode(), 1), (channels[5].encode(), 1), (b"nobody", 0)]
    assert pub.pubsub_numpat() == 2
    # SPUBLISH reaches the channel's server (its shard subscribers; plain
    # subscribers are not among them, as on redis-server).
    assert pub.execute_command("SPUBLISH", channels[3], "hi") == 0
    assert pub.publish(channels[3], "hi") == 1
    got = messages(ps, 1)
    assert got and got[0]["data"] == b"hi" and got[0]["channel"] == channels[3].encode()
    ps.close()


def test_a_subscriber_crosses_a_reload_once_it_leaves_subscribed_mode(procs):
    """A subscriber's server connections belong to its worker: across a
    reload it stays there, past graceful_timeout, still getting messages
    published through the new generation; once it unsubscribes it is
    handed over on the same connection, and the old worker leaves."""
    import signal

    from procmodel import alive, children, cmdline, start_walnut, wait_gone, wait_workers

    servers = [procs.redis() for _ in range(2)]
    p = start_walnut(procs, {"rd": redis_pool(servers)}, process={"graceful_timeout": "1s"},
                     args=["--workers", "1"])
    gen1 = wait_workers(p.pid, 1)
    sub = client(p.port("rd"))
    ps = sub.pubsub()
    ps.subscribe("news")
    assert len(messages(ps, 1)) == 1
    p.conf_path.write_text(p.conf_path.read_text().replace("timeout: 2000", "timeout: 2500"))
    p.signal(signal.SIGHUP)
    # (The old worker stays: count the new one by its pid.)
    new = wait_until(lambda: [w for w in children(p.pid)
                              if w not in gen1.values() and "worker" in cmdline(w)], 10,
                     what="the new generation's worker")
    pub = client(p.port("rd"))  # a new connection: the new generation
    old = next(iter(gen1.values()))
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # well past graceful_timeout
        assert pub.publish("news", "x") == 1
        got = messages(ps, 1)
        assert got and got[0]["data"] == b"x"
    assert alive(old), "the old worker keeps its subscriber"
    ps.unsubscribe("news")
    assert messages(ps, 1)[0]["type"] == "unsubscribe"
    wait_gone(old, timeout=10)
    # The same connection, now served by the new generation.
    conn = ps.connection
    conn.send_command("SET", "after", "1")
    assert conn.read_response() == b"OK"
    assert pub.get("after") == b"1"
    assert all(alive(w) for w in new)


@pytest.mark.parametrize("protocol", [2, 3])
def test_sharded_channels(three, protocol):
    """SSUBSCRIBE / SPUBLISH / SUNSUBSCRIBE: a sharded channel lives on its
    server; its confirmations are counted apart from classic ones, as
    redis-server counts them; leaving both kinds leaves subscribed mode."""
    p, servers = three
    channels = [chan(100 + i) for i in range(6)]
    s = socket.create_connection((HOST, p.port("rd")))
    s.settimeout(10)
    f = s.makefile("rb")

    def frame() -> list:
        head = f.readline()
        assert head[:1] in (b"*", b">"), head
        out = []
        for _ in range(int(head[1:])):
            line = f.readline()
            if line[:1] == b"$":
                out.append(f.read(int(line[1:]) + 2)[:-2])
            else:
                out.append(int(line[1:]))
        return out

    if protocol == 3:
        s.sendall(b"HELLO 3\r\n")
        head = f.readline()
        for _ in range(int(head[1:]) * 2):
            line = f.readline()
            if line[:1] == b"$":
                f.read(int(line[1:]) + 2)
            elif line[:1] == b"*":
                for _ in range(int(line[1:])):
                    f.readline()
    s.sendall(b"SUBSCRIBE classic\r\n")
    assert frame() == [b"subscribe", b"classic", 1]
    s.sendall(("SSUBSCRIBE " + " ".join(channels) + "\r\n").encode())
    got = [frame() for _ in channels]
    assert sorted(g[1].decode() for g in got) == sorted(channels)
    assert [g[0] for g in got] == [b"ssubscribe"] * len(channels)
    assert [g[2] for g in got] == list(range(1, len(channels) + 1))
    # Each sharded channel is on the server its name hashes to.
    held = [set(c.decode() for c in redis.Redis(host=HOST, port=sv.port).execute_command(
        "PUBSUB", "SHARDCHANNELS")) for sv in servers]
    assert sum(1 for h in held if h) >= 2, held
    assert set().union(*held) == set(channels)
    pub = client(p.port("rd"))
    for i, c in enumerate(channels):
        assert pub.execute_command("SPUBLISH", c, f"m{i}") == 1
    got = [frame() for _ in channels]
    assert sorted((g[0], g[1].decode(), g[2].decode()) for g in got) == sorted(
        (b"smessage", c, f"m{i}") for i, c in enumerate(channels))
    s.sendall(b"SUNSUBSCRIBE\r\n")
    got = [frame() for _ in channels]
    assert sorted(g[2] for g in got) == list(range(len(channels)))
    s.sendall(b"UNSUBSCRIBE\r\n")
    assert frame() == [b"unsubscribe", b"classic", 0]
    # Out of subscribed mode: an ordinary command works again.
    s.sendall(b"PING\r\n")
    assert f.readline() == b"+PONG\r\n"
    s.close()


def test_pubsub_in_a_cluster_pool(procs):
    """A Redis Cluster pool: classic channels and patterns are heard on one
    node (the cluster bus carries every PUBLISH to all), sharded channels
    on their slot's node; SPUBLISH follows the slot."""
    nodes = procs.redis_cluster(masters=3)
    p = procs.proxy("walnut", {"cl": {"redis": True, "redis_cluster": True, "timeout": 5000,
                                      "servers": [f"{nodes[0].address}:1"]}},
                    extra_args=["--workers", "1"])
    sub, pub = client(p.port("cl")), client(p.port("cl"))
    channels = [chan(200 + i) for i in range(6)]
    ps = sub.pubsub()
    ps.subscribe(*channels)
    ps.psubscribe("news.*")
    got = messages(ps, len(channels) + 1)
    assert [m["data"] for m in got] == list(range(1, len(channels) + 2))
    for i, c in enumerate(channels):
        # The count is of the receiving node's own subscribers, as in any
        # cluster: 0 where the channel's slot is not the subscriber's node.
        pub.publish(c, f"m{i}")
    pub.publish("news.today", "n")
    got = messages(ps, len(channels) + 2)
    pairs = sorted((m["channel"].decode(), m["data"].decode()) for m in got)
    assert pairs == sorted([(c, f"m{i}") for i, c in enumerate(channels)] + [("news.today", "n")]
                           ), pairs
    assert [m["type"] for m in got].count("pmessage") == 1
    ps.close()
    # Sharded: each channel on its slot's node, SPUBLISH reaches it.
    ps = sub.pubsub()
    ps.ssubscribe(*channels)
    got = messages(ps, len(channels))
    assert sorted(m["channel"].decode() for m in got) == sorted(channels)
    for i, c in enumerate(channels):
        assert pub.execute_command("SPUBLISH", c, f"s{i}") == 1
    got = messages(ps, len(channels))
    assert sorted((m["channel"].decode(), m["data"].decode()) for m in got) == sorted(
        (c, f"s{i}") for i, c in enumerate(channels))
    held = [redis.Redis(host=HOST, port=n.port).execute_command("PUBSUB", "SHARDCHANNELS")
            for n in nodes]
    assert sum(1 for h in held if h) >= 2, held
    ps.close()
