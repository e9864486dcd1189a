"""Keys moved in batches keep the newer value: a Redis pool grown from 2
servers to 3 where the new server already holds a newer value of some keys
that move to it (as if a client had written them there first). Whether the
old servers send the keys themselves (`MIGRATE ... KEYS`, refused with
`BUSYKEY` for those keys) or refuse `MIGRATE` (renamed away: the migrator
and the workers copy with `DUMP`/`RESTORE` instead), the newer values
stay, every other key arrives with its value and TTL, and no key is left
on a server that no longer owns it; keys read through walnut while the
migration runs (pulled) read the same."""

from __future__ import annotations

import signal

import pytest
import redis

from procmodel import wait_log, wait_workers
from procs import HOST, Proxy, free_port, redis_pool, to_yaml, wait_until
from test_migration_bg import key, state

N = 1200


def calls(r: redis.Redis, cmd: str) -> int:
    return int(r.info("commandstats").get(f"cmdstat_{cmd}", {}).get("calls", 0))


def loaded_walnut(procs, conf):
    """walnut (2 workers) serving ``conf(2)`` (a pool ``rd`` over the
    first 2 servers), with N keys written through it (every odd one with
    a TTL of 500 s): the proxy, its first generation's workers, and a
    client."""
    p = Proxy("walnut", procs.workdir, {}, extra_args=["--workers", "2"])
    p.conf_path.write_text(to_yaml(conf(2)))
    p.ports = {"rd": int(conf(2)["rd"]["listen"].rsplit(":", 1)[1])}
    procs.started.append(p)
    p.start()
    gen = wait_workers(p.pid, 2)
    r = redis.Redis(host=HOST, port=p.ports["rd"], protocol=2, socket_timeout=10)
    pipe = r.pipeline(transaction=False)
    for i in range(N):
        pipe.set(key(i), f"v{i}", ex=500 if i % 2 else None)
    pipe.execute()
    return p, gen, r


@pytest.mark.parametrize("server_move", [True, False], ids=["migrate", "dump-restore"])
def test_a_newer_value_on_the_new_owner_stays(procs, server_move):
    extra = [] if server_move else ["--rename-command", "MIGRATE", "walnut-test-migrate"]
    rds = [procs.redis(extra=extra) for _ in range(3)]
    port = free_port()

    def conf(n: int, listen: int = port, migration: bool = True) -> dict:
        pool = redis_pool(rds[:n], listen=f"{HOST}:{listen}")
        if migration:
            pool.update(migration=True, migration_rate=400)
        return {"rd": pool}

    p, gen, r = loaded_walnut(procs, conf)
    # Newer values on the new server, written before it joins the pool.
    direct = [redis.Redis(host=HOST, port=x.port) for x in rds]
    newer = {key(i) for i in range(0, N, 3)}
    for k in newer:
        direct[2].set(k, f"newer-{k}")
    p.conf_path.write_text(to_yaml(conf(3)))
    p.signal(signal.SIGHUP)
    wait_workers(p.pid, 2, exclude=gen.values())
    # From the placement switch on, every request is routed by the new
    # configuration (before it, the old generation may still read a key
    # on its old owner).
    wait_log(p.log_path, "placement switch: generation 1")
    # Reads while the migration runs: a GET is answered where the key is
    # (a value the new server held before it joined is not looked at
    # while an old owner still has the key: the old owner's is read).
    oracle_port = free_port()
    procs.proxy("nutcracker", conf(3, oracle_port, migration=False))
    oracle = redis.Redis(host=HOST, port=oracle_port, protocol=2, lib_name=None, lib_version=None)
    read_during = {key(i): r.get(key(i)) for i in range(0, N, 2)}
    wait_until(lambda: state(p.admin_port, "rd").get("state") == "done", 60,
               what="the migration to end")
    st = state(p.admin_port, "rd")
    assert st["failed"] == "0" and int(st["moved"]) > 0, st
    on_new = 0
    for i in range(N):
        k = key(i)
        holders = [j for j, d in enumerate(direct) if d.exists(k)]
        got = oracle.get(k)
        if k in newer and 2 in holders and got == f"newer-{k}".encode():
            # Owned by the new server: its newer value stayed, and the old
            # copy is gone.
            assert holders == [2], (k, holders)
            on_new += 1
        else:
            assert got == f"v{i}".encode(), (k, got)
            stray = [j for j in holders if j == 2 and k in newer]
            assert len(holders) - len(stray) == 1, (k, holders)
            if i % 2 and i < 100:
                assert 0 < oracle.ttl(k) <= 500, (k, oracle.ttl(k))
        if k in read_during:
            before = f"v{i}".encode()
            assert read_during[k] in ({got, before} if k in newer else {got}), (k, read_during[k], got)
    assert on_new > 50, on_new
    olds_migrate = sum(calls(d, "migrate") for d in direct[:2])
    if server_move:
        assert olds_migrate > 0
    else:
        assert olds_migrate == 0 and calls(direct[2], "restore") > 0



def test_migrate_only_towards_an_added_server(procs):
    """A modula pool grown from 2 servers to 3 moves keys to the added
    server and also both ways between the two it had. `MIGRATE` blocks
    its source until the target answers, so two of them in opposite
    directions (as two fleet members' migrators could send) would block
    both servers: the old servers send keys themselves only to the added
    one (no server ever sends to a server that sends), and keys moving
    between the two old ones are copied (`DUMP`/`RESTORE`/`DEL`). Every
    key ends on its owner with its value and TTL."""
    rds = [procs.redis() for _ in range(3)]
    port = free_port()

    def conf(n: int, listen: int = port, migration: bool = True) -> dict:
        pool = redis_pool(rds[:n], listen=f"{HOST}:{listen}", distribution="modula")
        if migration:
            pool.update(migration=True, migration_rate=400)
        return {"rd": pool}

    p, gen, _ = loaded_walnut(procs, conf)
    direct = [redis.Redis(host=HOST, port=x.port) for x in rds]
    keys = [key(i) for i in range(N)]
    before = [{k for k in keys if d.exists(k)} for d in direct]
    p.conf_path.write_text(to_yaml(conf(3)))
    p.signal(signal.SIGHUP)
    wait_workers(p.pid, 2, exclude=gen.values())
    wait_until(lambda: state(p.admin_port, "rd").get("state") == "done", 60,
               what="the migration to end")
    st = state(p.admin_port, "rd")
    assert st["failed"] == "0" and int(st["moved"]) > 0, dict(st)
    oracle_port = free_port()
    procs.proxy("nutcracker", conf(3, oracle_port, migration=False))
    oracle = redis.Redis(host=HOST, port=oracle_port, protocol=2, lib_name=None, lib_version=None)
    after = [{k for k in keys if d.exists(k)} for d in direct]
    for i, k in enumerate(keys):
        holders = [j for j in range(3) if k in after[j]]
        assert len(holders) == 1, (k, holders)
        assert oracle.get(k) == f"v{i}".encode(), k
        if i % 2 and i < 100:
            assert 0 < oracle.ttl(k) <= 500, (k, oracle.ttl(k))
    # Keys went both ways between the old servers, and to the new one.
    assert before[0] & after[1] and before[1] & after[0], "keys did not move both ways"
    assert after[2]
    # Sent by MIGRATE to the added server, and copied between the old
    # ones (read with DUMP on each, written with RESTORE on each).
    assert sum(calls(d, "migrate") for d in direct[:2]) > 0
    assert calls(direct[0], "dump") > 0 and calls(direct[1], "dump") > 0
    assert calls(direct[0], "restore") > 0 and calls(direct[1], "restore") > 0
