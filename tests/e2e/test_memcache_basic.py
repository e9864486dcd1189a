"""memcached text protocol through the proxy, over three memcached backends."""

from __future__ import annotations

import os
import uuid

import pytest
from pymemcache.client.base import Client

from procs import HOST, RawConn, memcache_pool

ONE_MB = 1024 * 1024


@pytest.fixture(scope="module")
def backends(module_procs):
    return module_procs.memcacheds(3)


@pytest.fixture
def proxy(procs, proxy_kind, backends):
    return procs.proxy(proxy_kind, {"alpha": memcache_pool(backends)})


@pytest.fixture
def client(proxy):
    c = Client((HOST, proxy.port()), default_noreply=False, connect_timeout=5, timeout=10)
    yield c
    c.close()


def unique(prefix: str = "k") -> str:
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


def holders(backends, key: str) -> list[int]:
    """Indexes of the backends that hold ``key`` (asked directly)."""
    found = []
    for i, b in enumerate(backends):
        with RawConn(b.port) as c:
            if c.request(f"get {key}\r\n".encode(), b"END\r\n").startswith(b"VALUE"):
                found.append(i)
    return found


def test_set_get_delete(client):
    k = unique()
    assert client.set(k, b"hello") is True
    assert client.get(k) == b"hello"
    assert client.delete(k) is True
    assert client.get(k) is None
    assert client.delete(k) is False


def test_flags_are_kept(proxy):
    k = unique()
    with RawConn(proxy.port()) as c:
        assert c.request(f"set {k} 4242 0 3\r\nabc\r\n".encode()) == b"STORED\r\n"
        got = c.request(f"get {k}\r\n".encode(), b"END\r\n")
    assert got == f"VALUE {k} 4242 3\r\nabc\r\nEND\r\n".encode()


def test_add_replace(client):
    k = unique()
    assert client.replace(k, b"x") is False
    assert client.add(k, b"one") is True
    assert client.add(k, b"two") is False
    assert client.get(k) == b"one"
    assert client.replace(k, b"three") is True
    assert client.get(k) == b"three"


def test_append_prepend(client):
    k = unique()
    assert client.append(k, b"zz") is False
    client.set(k, b"mid")
    assert client.append(k, b"-end") is True
    assert client.prepend(k, b"start-") is True
    assert client.get(k) == b"start-mid-end"


def test_gets_cas(client):
    k = unique()
    client.set(k, b"v1")
    value, token = client.gets(k)
    assert value == b"v1" and token
    assert client.cas(k, b"v2", token) is True
    assert client.cas(k, b"v3", token) is False
    assert client.get(k) == b"v2"
    assert client.cas(unique(), b"v", token) is None


def test_incr_decr(client):
    k = unique()
    assert client.incr(k, 1) is None
    client.set(k, b"10")
    assert client.incr(k, 5) == 15
    assert client.decr(k, 20) == 0
    assert client.incr(k, 2**64 - 1) == 2**64 - 1


def test_touch(client):
    k = unique()
    assert client.touch(k, 100) is False
    client.set(k, b"v", expire=1)
    assert client.touch(k, 1000) is True
    assert client.get(k) == b"v"


def test_noreply(proxy, client):
    k = unique()
    with RawConn(proxy.port()) as c:
        c.send(f"set {k} 0 0 2 noreply\r\nv1\r\n".encode())
        c.send(f"add {k} 0 0 2 noreply\r\nxx\r\n".encode())
        c.send(f"append {k} 0 0 1 noreply\r\n!\r\n".encode())
        got = c.request(f"get {k}\r\n".encode(), b"END\r\n")
        assert got == f"VALUE {k} 0 3\r\nv1!\r\nEND\r\n".encode()
        c.send(f"delete {k} noreply\r\n".encode())
        assert c.request(f"get {k}\r\n".encode(), b"END\r\n") == b"END\r\n"
    assert client.set(unique(), b"v", noreply=True) is True


def multiget(proxy, backends, client, verb):
    """Store 2 of every 3 of 50 keys, multi-get all 50; (asked hits, returned keys)."""
    keys = [unique(f"m{i}") for i in range(50)]
    present = [k for i, k in enumerate(keys) if i % 3 != 1]
    assert client.set_many({k: f"val-{k}".encode() for k in present}) == []
    spread = {tuple(holders(backends, k)) for k in present}
    assert len(spread) >= 2, "test keys should land on several servers"
    with RawConn(proxy.port()) as c:
        reply = c.request(f"{verb} {' '.join(keys)}\r\n".encode(), b"END\r\n", timeout=10)
    lines = reply.split(b"\r\n")
    got = []
    i = 0
    while lines[i] != b"END":
        head = lines[i].split()
        assert head[0] == b"VALUE" and len(head) == (5 if verb == "gets" else 4), lines[i]
        got.append(head[1].decode())
        assert lines[i + 1] == f"val-{head[1].decode()}".encode()
        assert int(head[3]) == len(lines[i + 1])
        i += 2
    assert lines[i + 1:] == [b""]
    return present, got


@pytest.mark.parametrize("verb", ["get", "gets"])
def test_multiget_across_servers_returns_every_hit_once(proxy, backends, client, verb):
    present, got = multiget(proxy, backends, client, verb)
    assert sorted(got) == sorted(present)


@pytest.mark.parametrize("verb", ["get", "gets"])
def test_multiget_across_servers_keeps_key_order(proxy, backends, client, verb, xfail):
    xfail("nutcracker", "concatenates per-server fragments, so hits come back grouped by server")
    present, got = multiget(proxy, backends, client, verb)
    assert got == present


def test_value_near_one_megabyte_round_trips(proxy, client):
    k = unique()
    value = os.urandom(ONE_MB - 512)
    assert client.set(k, value) is True
    assert client.get(k) == value
    with RawConn(proxy.port(), timeout=15) as c:
        c.send(f"get {k}\r\n".encode())
        head = c.read_line()
        assert head == f"VALUE {k} 0 {len(value)}\r\n".encode()
        assert c.read_exactly(len(value)) == value
        assert c.read_exactly(7) == b"\r\nEND\r\n"


def test_value_over_one_megabyte_is_rejected_and_connection_survives(proxy):
    k = unique()
    value = b"x" * (ONE_MB + 1)
    with RawConn(proxy.port(), timeout=15) as c:
        reply = c.request(f"set {k} 0 0 {len(value)}\r\n".encode() + value + b"\r\n")
        assert reply.startswith(b"SERVER_ERROR"), reply
        assert c.request(f"get {k}\r\n".encode(), b"END\r\n") == b"END\r\n"
        assert c.request(f"set {k} 0 0 2\r\nok\r\n".encode()) == b"STORED\r\n"
        assert c.request(f"get {k}\r\n".encode(), b"END\r\n") == f"VALUE {k} 0 2\r\nok\r\nEND\r\n".encode()


def test_unknown_command_replies_error_and_keeps_connection(proxy, xfail):
    xfail("nutcracker", "closes the connection on an unknown command (twemproxy #113, #460)")
    with RawConn(proxy.port()) as c:
        assert c.request(b"frobnicate a b\r\n") == b"ERROR\r\n"
        assert c.request(b"version\r\n").startswith(b"VERSION ")
        k = unique()
        assert c.request(f"set {k} 0 0 1\r\nx\r\n".encode()) == b"STORED\r\n"


def test_key_too_long_replies_client_error_and_keeps_connection(proxy, xfail):
    xfail("nutcracker", "closes the connection on a key longer than 250 bytes")
    with RawConn(proxy.port()) as c:
        reply = c.request(b"get " + b"a" * 251 + b"\r\n")
        assert reply.startswith(b"CLIENT_ERROR"), reply
        k = unique()
        assert c.request(f"set {k} 0 0 1\r\nx\r\n".encode()) == b"STORED\r\n"
        assert c.request(f"get {k}\r\n".encode(), b"END\r\n") == f"VALUE {k} 0 1\r\nx\r\nEND\r\n".encode()


@pytest.mark.parametrize(
    "garbage",
    [
        b"frobnicate a b\r\n",
        b"get " + b"a" * 251 + b"\r\n",
        b"set k 0 0 notanumber\r\nxx\r\n",
        b"\x00\xff\xfe garbage\r\n",
        b"get\r\n",
    ],
    ids=["unknown", "long-key", "bad-length", "binary-junk", "get-no-key"],
)
def test_malformed_input_leaves_proxy_serving_new_connections(proxy, client, garbage):
    with RawConn(proxy.port()) as c:
        c.send(garbage)
        try:
            first = c.read_line(timeout=2)
        except (ConnectionError, TimeoutError):
            first = b""
        assert not first.startswith((b"STORED", b"VALUE")), first
    k = unique()
    assert client.set(k, b"still-here") is True
    assert client.get(k) == b"still-here"


def test_version(proxy):
    with RawConn(proxy.port()) as c:
        reply = c.request(b"version\r\n")
    assert reply.startswith(b"VERSION ") and reply.endswith(b"\r\n")


def test_quit_closes_connection(proxy):
    with RawConn(proxy.port()) as c:
        c.send(b"quit\r\n")
        assert c.is_closed(timeout=3)
