"""What an operator meets around reloads and upgrades: a daemon started
with relative paths upgrades; the admin port follows the new binary; a
taken address is refused at start (as nutcracker refuses it) and at
reload; the admin `reload` answers what changed or what is wrong, and the
log says what changed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

from procmodel import alive, wait_gone, wait_log, wait_workers, workers_of
from procs import HOST, Proxy, RawConn, free_port, memcache_pool, to_yaml, wait_until, walnut_bin


def admin(port: int, line: str) -> str:
    """An admin command's whole reply (the server closes after `quit`)."""
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(line.encode() + b"\r\nquit\r\n")
        buf = b""
        while chunk := s.recv(65536):
            buf += chunk
    return buf.decode()


def http_get(port: int, path: str) -> str:
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
        buf = b""
        while chunk := s.recv(65536):
            buf += chunk
    return buf.decode()


def stop_master(pid: int) -> None:
    kids = list(workers_of(pid).values())
    os.kill(pid, signal.SIGTERM)
    wait_gone(pid)
    for k in kids:
        wait_gone(k)


def test_daemon_with_relative_paths_upgrades_and_keeps_its_admin_port(tmp_path, procs):
    mc = procs.memcached()
    port, stats, admin_port = free_port(), free_port(), free_port()
    (tmp_path / "w.yml").write_text(to_yaml({"alpha": memcache_pool([mc], listen=f"{HOST}:{port}")}))
    rc = subprocess.run(
        [walnut_bin(), "-d", "-c", "w.yml", "-o", "w.log", "-p", "w.pid", "-s", str(stats), "-a", HOST,
         "--admin", f"{HOST}:{admin_port}", "--workers", "2"],
        cwd=tmp_path, timeout=10,
    ).returncode
    assert rc == 0
    pidfile, log = tmp_path / "w.pid", tmp_path / "w.log"
    old = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 10, what="pid file"))
    new = None
    try:
        wait_workers(old, 2)
        assert f"master_pid={old}" in admin(admin_port, "status").replace(": ", "=")
        os.kill(old, signal.SIGUSR2)
        # The new binary daemonizes too: it is found by the pid file.
        new = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() != str(old)
                             and pidfile.read_text().strip(), 10, what="new pid file"))
        assert (tmp_path / "w.pid.oldbin").read_text().strip() == str(old)
        wait_log(log, f"the new master (pid {new}) is ready")
        assert "(the new binary runs as a daemon)" in log.read_text()
        os.kill(old, signal.SIGQUIT)
        wait_gone(old, timeout=5)
        assert not (tmp_path / "w.pid.oldbin").exists()
        # The same files, the same ports, served by the new master.
        with RawConn(port) as c:
            assert c.request(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
        st = admin(admin_port, "status")
        assert str(new) in st and str(old) not in st, st
        assert "walnut_" in http_get(admin_port, "/metrics")
        assert "Address already in use" not in log.read_text()
        size = log.stat().st_size
        os.kill(new, signal.SIGHUP)
        wait_until(lambda: log.stat().st_size > size, 10, what="the new master writing the same log")
    finally:
        for pid in (new, old):
            if pid and alive(pid):
                stop_master(pid)


def test_a_taken_pool_address_is_refused_as_nutcracker_refuses_it(procs, tmp_path):
    mc = procs.memcached()
    port = free_port()
    first = Proxy("walnut", procs.workdir, {"alpha": memcache_pool([mc], listen=f"{HOST}:{port}")})
    procs.started.append(first)
    first.start()
    for kind in ("walnut", "nutcracker"):
        second = Proxy(kind, procs.workdir, {"alpha": memcache_pool([mc], listen=f"{HOST}:{port}")})
        r = subprocess.run(second.argv, capture_output=True, text=True, timeout=20)
        out = r.stdout + r.stderr + (second.log_path.read_text() if second.log_path.exists() else "")
        assert r.returncode != 0, (kind, out)
        assert "in use" in out, (kind, out)
    # The one listening there is untouched.
    with RawConn(port) as c:
        assert c.request(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
    # Two pools of one file over the same port: 0.0.0.0 and 127.0.0.1.
    other = free_port()
    both = Proxy("walnut", procs.workdir, {
        "a": memcache_pool([mc], listen=f"0.0.0.0:{other}"),
        "b": memcache_pool([mc], listen=f"127.0.0.1:{other}"),
    })
    r = subprocess.run(both.argv, capture_output=True, text=True, timeout=20)
    out = r.stdout + r.stderr + (both.log_path.read_text() if both.log_path.exists() else "")
    assert r.returncode != 0 and "in use" in out, out


def test_a_taken_stats_or_admin_port_is_a_start_up_error(procs):
    mc = procs.memcached()
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind((HOST, 0))
    holder.listen(1)
    taken = holder.getsockname()[1]
    try:
        for flag in (["-s", str(taken)], ["--admin", f"{HOST}:{taken}"]):
            p = Proxy("walnut", procs.workdir, {"alpha": memcache_pool([mc])})
            argv = list(p.argv)
            if flag[0] == "-s":
                argv[argv.index("-s") + 1] = str(taken)
            else:
                argv[argv.index("--admin") + 1] = flag[1]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=20)
            out = r.stdout + r.stderr + (p.log_path.read_text() if p.log_path.exists() else "")
            assert r.returncode != 0, out
            assert str(taken) in out and "in use" in out, out
    finally:
        holder.close()


def test_admin_reload_answers_what_changed_or_what_is_wrong(procs):
    mc1, mc2 = procs.memcacheds(2)
    port = free_port()
    p = Proxy("walnut", procs.workdir, {"alpha": memcache_pool([mc1], listen=f"{HOST}:{port}")},
              extra_args=["--workers", "2"])
    procs.started.append(p)
    p.start()
    gen1 = wait_workers(p.pid, 2)
    good = p.conf_path.read_text()
    assert admin(p.admin_port, "reload").startswith("OK")
    wait_log(p.log_path, "reload: configuration unchanged")
    # An invalid file: the error, as the log has it; nothing restarts.
    p.conf_path.write_text("alpha:\n  listen: 127.0.0.1:notaport\n  servers: [\n")
    reply = admin(p.admin_port, "reload")
    assert reply.startswith("ERR") and "keeping the running configuration" in reply, reply
    assert set(workers_of(p.pid).values()) == set(gen1.values())
    # A change: the reply and the log say what it is.
    p.conf_path.write_text(to_yaml({
        "alpha": memcache_pool([mc1, mc2], listen=f"{HOST}:{port}", timeout=750),
        "beta": memcache_pool([mc2], listen=f"{HOST}:{free_port()}"),
    }))
    reply = admin(p.admin_port, "reload")
    assert "pool 'beta' added" in reply, reply
    assert f"pool 'alpha': server '{HOST}:{mc2.port}' added" in reply, reply
    assert "pool 'alpha': timeout changed" in reply, reply
    wait_log(p.log_path, "reload: pool 'beta' added")
    wait_log(p.log_path, "pool 'alpha': timeout changed")
    wait_workers(p.pid, 2, exclude=gen1.values())
    # A reload onto a taken address is refused; the running one stays.
    holder = socket.socket()
    holder.bind((HOST, 0))
    holder.listen(1)
    try:
        p.conf_path.write_text(good.replace(f":{port}", f":{holder.getsockname()[1]}"))
        reply = admin(p.admin_port, "reload")
        assert reply.startswith("ERR") and "in use" in reply, reply
        with RawConn(port) as c:
            assert c.request(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
    finally:
        holder.close()
