"""Key placement: the proxy under test and nutcracker, side by side.

Both proxies front the same four memcached servers (weights 1, 2, 1, 3). For
every hash x distribution x (named | unnamed servers) combination, each key is
stored through nutcracker, the backend holding it is found by asking every
backend directly, the key is deleted, then the same is done through the proxy
under test: the two backends must be the same for every key. When the proxy
under test is nutcracker itself, this checks the harness.
"""

from __future__ import annotations

import random

import pytest

from procs import RawConn

HASHES = [
    "one_at_a_time", "md5", "crc16", "crc32", "crc32a", "fnv1_64",
    "fnv1a_64", "fnv1_32", "fnv1a_32", "hsieh", "murmur", "jenkins",
]
DISTRIBUTIONS = ["ketama", "modula"]
WEIGHTS = [1, 2, 1, 3]
COMBOS = [(h, d, named) for h in HASHES for d in DISTRIBUTIONS for named in (False, True)]
CHUNK = 20


def combo_id(combo) -> str:
    h, d, named = combo
    return f"{h}-{d}-{'named' if named else 'unnamed'}"


def make_keys(n: int = 500, seed: int = 20240601) -> list[bytes]:
    """Deterministic keys: ASCII, bytes >= 0x80, hash-tag shapes, long keys."""
    rng = random.Random(seed)
    ascii_chars = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_-.|/"
    printable = bytes(range(0x21, 0x7F)) + bytes(range(0x80, 0x100))
    keys: dict[bytes, None] = {}

    def fill(count: int, make) -> None:
        target = len(keys) + count
        while len(keys) < target:
            keys.setdefault(make(), None)

    fill(20, lambda: str(len(keys)).encode())
    fill(130, lambda: bytes(rng.choice(ascii_chars) for _ in range(rng.randint(1, 60))))

    def high() -> bytes:
        body = bytes(rng.choice(printable) for _ in range(rng.randint(1, 40)))
        return b"\xc3\xa9" + body if rng.random() < 0.3 else body + bytes([rng.randint(0x80, 0xFF)])

    fill(120, high)
    tag_shapes = [
        b"user{%d}:profile", b"{%d}", b"x{%d}y{z}", b"pre{}post%d", b"open{%d",
        b"close}%d", b"}%d{", b"{%d}{other}", b"[%d]{tag}", b"a{b{%d}}c",
    ]
    for i in range(150):
        keys.setdefault(tag_shapes[i % len(tag_shapes)] % (i // len(tag_shapes)), None)
    fill(n - len(keys), lambda: bytes(rng.choice(ascii_chars) for _ in range(rng.randint(200, 250))))
    assert len(keys) == n
    return list(keys)


KEYS = make_keys()


def pool_name(combo) -> str:
    return combo_id(combo).replace("-", "_")


def pools_for(backends) -> dict:
    pools = {}
    for combo in COMBOS:
        h, d, named = combo
        servers = []
        for i, (b, w) in enumerate(zip(backends, WEIGHTS)):
            servers.append(f"{b.address}:{w} mc-{i}" if named else f"{b.address}:{w}")
        pool = {"hash": h, "distribution": d, "timeout": 3000, "servers": servers}
        if named:
            pool["hash_tag"] = "{}"
        pools[pool_name(combo)] = pool
    return pools


@pytest.fixture(scope="module")
def backends(module_procs):
    return module_procs.memcacheds(4)


@pytest.fixture(scope="module")
def pair(module_procs, proxy_kind, backends):
    pools = pools_for(backends)
    reference = module_procs.proxy("nutcracker", pools)
    subject = module_procs.proxy(proxy_kind, pools)
    return reference, subject


def store_all(port: int, keys: list[bytes]) -> None:
    with RawConn(port, timeout=10) as c:
        c.send(b"".join(b"set " + k + b" 0 0 1\r\nv\r\n" for k in keys))
        for k in keys:
            reply = c.read_line()
            assert reply == b"STORED\r\n", (k, reply)


def placement(backends, keys: list[bytes]) -> dict[bytes, int]:
    """Which backend holds each key; every key must be on exactly one."""
    where: dict[bytes, int] = {}
    for idx, b in enumerate(backends):
        with RawConn(b.port, timeout=10) as c:
            for start in range(0, len(keys), CHUNK):
                chunk = keys[start:start + CHUNK]
                c.send(b"get " + b" ".join(chunk) + b"\r\n")
                while True:
                    line = c.read_line()
                    if line == b"END\r\n":
                        break
                    head = line.split(b" ")
                    assert head[0] == b"VALUE", line
                    c.read_exactly(int(head[3]) + 2)
                    assert head[1] not in where, f"{head[1]!r} on backends {where[head[1]]} and {idx}"
                    where[head[1]] = idx
    missing = [k for k in keys if k not in where]
    assert not missing, f"{len(missing)} keys on no backend, e.g. {missing[:3]}"
    return where


def delete_all(backends, where: dict[bytes, int]) -> None:
    for idx, b in enumerate(backends):
        mine = [k for k, i in where.items() if i == idx]
        if not mine:
            continue
        with RawConn(b.port, timeout=10) as c:
            c.send(b"".join(b"delete " + k + b"\r\n" for k in mine))
            for k in mine:
                assert c.read_line() == b"DELETED\r\n", k


@pytest.mark.parametrize("combo", COMBOS, ids=combo_id)
def test_placement_matches_nutcracker(pair, backends, combo):
    reference, subject = pair
    name = pool_name(combo)

    store_all(reference.port(name), KEYS)
    expected = placement(backends, KEYS)
    delete_all(backends, expected)

    store_all(subject.port(name), KEYS)
    got = placement(backends, KEYS)
    delete_all(backends, got)

    if combo[0] not in ("crc16", "crc32"):  # 16- and 15-bit hashes cluster on a 32-bit ring
        assert len(set(expected.values())) >= 3, "keys should spread over the servers"
    differ = [(k, expected[k], got[k]) for k in KEYS if expected[k] != got[k]]
    assert not differ, f"{len(differ)}/{len(KEYS)} keys placed differently (key, nutcracker, proxy): {differ[:5]}"
