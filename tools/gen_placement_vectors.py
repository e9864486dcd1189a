#!/usr/bin/env python3
"""Record key -> server placement vectors from a real nutcracker (twemproxy).

For every hash (12) x distribution {ketama, modula} x {named servers,
unnamed servers} x {hash_tag "{}", no hash tag}, one pool is configured in a
single nutcracker instance in front of real backends. About 200 keys are
stored through each pool, every backend is then asked directly which keys it
holds, and the answer is written as JSON under tests/vectors/placement/:

  memcache.json  pools of memcached backends
  redis.json     pools (redis: true) of redis-server backends

Each file holds the key list once (hex encoded) and, per pool, the server
list (name or null, host, port, weight, in configuration order) and the index
of the server each key landed on.

Unnamed servers: ketama hashes "host:port", or just "host" when the port is
11211. When 127.0.0.1:11211 is free at generation time the second memcached
backend runs there so the unnamed pools exercise both forms; when it is busy
the rule is not exercised and the file says so ("port_11211": false). Redis
backends never use 11211.

Ejection pools per backend kind ({ketama, modula} x {named, unnamed} x one
or two dead servers): auto_eject_hosts with server_failure_limit 1, dead
servers point at a port nothing listens on, and traffic is sent until they
are ejected before recording; such servers carry "live": false.

Extra pools per backend kind: one ketama pool whose server name is 270
bytes long, so its "NAME-i" strings cross twemproxy's 272-byte cut, and a
few ketama/modula pools with equal, skewed or single weights.

Server names and ports are deliberately not listed in twemproxy's internal
server order (sorted by name: shorter first, then bytewise); indexes in the
vectors are positions in the configured list.

Usage: tools/gen_placement_vectors.py [--out DIR] [--nutcracker PATH]
                                      [--memcached PATH] [--redis-server PATH]
                                      [--skip-redis]
Python 3 standard library only. Every process started is stopped by pid.
"""

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

HASHES = [
    "one_at_a_time", "md5", "crc16", "crc32", "crc32a", "fnv1_64",
    "fnv1a_64", "fnv1_32", "fnv1a_32", "hsieh", "murmur", "jenkins",
]
DISTS = ["ketama", "modula"]
WEIGHTS_3 = [1, 2, 3]
WEIGHTS_4 = [2, 1, 5, 3]
# Not in twemproxy's server order (by name length, then bytes), so the
# vectors show that nutcracker sorts a pool's servers by name.
NAMES = ["gamma_2", "alpha", "delta.3", "beta-1"]
# Extra ketama pools: equal weights (float rounding of pct) and odd weights.
EXTRA_WEIGHTS = [[1, 1, 1], [1, 1, 1, 1], [3, 7, 11, 13], [100, 1, 1], [1]]
LONG_NAME = "n" * 270
HOST = "127.0.0.1"


def make_keys():
    """About 200 keys: plain, hash-tagged, high bytes, every tail length, long."""
    rng = random.Random(20240601)
    keys = [b"key:%d" % i for i in range(60)]
    keys += [b"user{%d}:x" % i for i in range(20)]
    keys += [b"{%d}" % i for i in range(5)]
    keys += [b"a{}b", b"{}", b"}{", b"x{y", b"x}y{z}", b"{a}{b}", b"{{a}}",
             b"pre{tag}", b"{tag}post", b"u{\x80\xff}v", b"{\xc3\xa9t\xc3\xa9}:1",
             b"a{b{c}d}e", b"no-tag-at-all"]
    keys += [b"abcdefghijklmnopqrstuvwx"[:n] for n in range(1, 25)]
    keys += [bytes([b]) for b in (0x80, 0x81, 0x9f, 0xa0, 0xc3, 0xe9, 0xfe, 0xff)]
    keys += [b"k\x80", b"k\xff\xff", b"\xff\xfe\xfd", b"caf\xc3\xa9"]
    keys += [b"session:%08x" % rng.getrandbits(32) for _ in range(20)]
    alphabet = list(range(0x21, 0x7f)) + list(range(0x80, 0x100))
    for _ in range(40):
        n = rng.randint(1, 40)
        keys.append(bytes(rng.choice(alphabet) for _ in range(n)))
    for n in (64, 100, 128, 200, 249, 250):
        keys.append(bytes(rng.choice(alphabet) for _ in range(n)))
    seen, out = set(), []
    for k in keys:
        if k not in seen:
            seen.add(k)
            out.append(k)
    return out


def free_ports(n):
    """n distinct free TCP ports on HOST (held open until all are chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_free(port):
    s = socket.socket()
    try:
        s.bind((HOST, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def wait_listening(ports, proc, timeout=15.0):
    deadline = time.monotonic() + timeout
    pending = list(ports)
    while pending:
        if proc.poll() is not None:
            raise RuntimeError("process %d exited with %s" % (proc.pid, proc.returncode))
        port = pending[0]
        try:
            with socket.create_connection((HOST, port), timeout=1.0):
                pending.pop(0)
                continue
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("port %d never started listening" % port)
        time.sleep(0.02)


class Conn:
    """A tiny line/RESP client over one TCP connection."""

    def __init__(self, port):
        self.sock = socket.create_connection((HOST, port), timeout=10.0)
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed")
        self.buf += chunk

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    # memcached text protocol
    def mc_set(self, key, value):
        self.send(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))
        return self.line()

    def mc_has(self, key):
        self.send(b"get %s\r\n" % key)
        found = False
        while True:
            line = self.line()
            if line == b"END":
                return found
            if not line.startswith(b"VALUE "):
                raise RuntimeError("unexpected reply %r" % line)
            size = int(line.rsplit(b" ", 1)[1])
            self.exact(size + 2)
            found = True

    def mc_delete(self, key):
        self.send(b"delete %s\r\n" % key)
        return self.line()

    # redis RESP
    def redis(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.send(out)
        line = self.line()
        if line[:1] == b"$" and int(line[1:]) >= 0:
            return self.exact(int(line[1:]) + 2)[:-2]
        return line


def start(cmd, log):
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pool_specs(kind, backend_ports, dead_ports):
    """The pools to configure: list of dicts (without listen ports)."""
    specs = []
    n = 0
    for hi, h in enumerate(HASHES):
        for d in DISTS:
            for named in (True, False):
                for tag in ("{}", None):
                    # Every (dist, named, tag) gets both 3 and 4 servers.
                    four = (hi + named + (tag is None)) % 2 == 0
                    weights = WEIGHTS_4 if four else WEIGHTS_3
                    servers = []
                    for i, w in enumerate(weights):
                        servers.append({
                            "name": NAMES[i] if named else None,
                            "host": HOST, "port": backend_ports[i], "weight": w,
                        })
                    specs.append({"pool": "%s_%03d" % (kind, n), "hash": h,
                                  "distribution": d, "hash_tag": tag,
                                  "named": named, "servers": servers})
                    n += 1
    servers = [{"name": LONG_NAME if i == 1 else NAMES[i], "host": HOST,
                "port": backend_ports[i], "weight": w}
               for i, w in enumerate(WEIGHTS_3)]
    specs.append({"pool": "%s_longname" % kind, "hash": "fnv1a_64",
                  "distribution": "ketama", "hash_tag": None, "named": True,
                  "servers": servers})
    for d in DISTS:
        for named in (True, False):
            for dead in ([2], [1, 3]):
                servers = [{"name": NAMES[j] if named else None, "host": HOST,
                            "port": dead_ports[j] if j in dead else backend_ports[j],
                            "weight": w, "live": j not in dead}
                           for j, w in enumerate(WEIGHTS_4)]
                specs.append({"pool": "%s_eject_%s_%s_%s" % (
                    kind, d, "named" if named else "unnamed",
                    "".join(map(str, dead))), "hash": "fnv1a_64",
                    "distribution": d, "hash_tag": None, "named": named,
                    "servers": servers})
    for i, weights in enumerate(EXTRA_WEIGHTS):
        for d in DISTS:
            named = i % 2 == 0
            servers = [{"name": NAMES[j] if named else None, "host": HOST,
                        "port": backend_ports[j], "weight": w}
                       for j, w in enumerate(weights)]
            specs.append({"pool": "%s_w%d_%s" % (kind, i, d), "hash": "md5",
                          "distribution": d, "hash_tag": "{}", "named": named,
                          "servers": servers})
    return specs


def write_conf(path, specs, redis):
    lines = []
    for s in specs:
        lines.append("%s:" % s["pool"])
        lines.append("  listen: %s:%d" % (HOST, s["listen"]))
        lines.append("  hash: %s" % s["hash"])
        lines.append("  distribution: %s" % s["distribution"])
        if s["hash_tag"] is not None:
            lines.append('  hash_tag: "%s"' % s["hash_tag"])
        lines.append("  redis: %s" % ("true" if redis else "false"))
        lines.append("  timeout: 5000")
        if any(not srv.get("live", True) for srv in s["servers"]):
            lines.append("  auto_eject_hosts: true")
            lines.append("  server_failure_limit: 1")
            lines.append("  server_retry_timeout: 600000")
        else:
            lines.append("  auto_eject_hosts: false")
        lines.append("  servers:")
        for srv in s["servers"]:
            entry = "%s:%d:%d" % (srv["host"], srv["port"], srv["weight"])
            if srv["name"] is not None:
                entry += " " + srv["name"]
            lines.append("   - %s" % entry)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def store_all(kind, port, keys, value):
    """Stores every key through a pool; False if any store failed."""
    try:
        front = Conn(port)
    except OSError:
        return False
    ok = True
    try:
        for k in keys:
            reply = (front.mc_set(k, value) if kind == "memcache"
                     else front.redis(b"SET", k, value))
            if reply not in (b"STORED", b"+OK"):
                ok = False
    except (OSError, RuntimeError):
        ok = False
    finally:
        front.close()
    return ok


def eject(kind, spec, keys, backends):
    """Sends traffic until nutcracker has ejected the pool's dead servers
    (a pass with no failed store), then removes what that traffic stored."""
    for _ in range(20):
        if store_all(kind, spec["listen"], keys, b"warmup"):
            break
    else:
        raise RuntimeError("%s: dead servers never ejected" % spec["pool"])
    for i, b in enumerate(backends[:len(spec["servers"])]):
        if spec["servers"][i].get("live", True):
            for k in keys:
                if kind == "memcache":
                    b.mc_delete(k)
                else:
                    b.redis(b"DEL", k)


def record(kind, specs, keys, backend_ports):
    """Store every key through each pool, then locate it on the backends."""
    backends = [Conn(p) for p in backend_ports]
    try:
        for s in specs:
            if any(not srv.get("live", True) for srv in s["servers"]):
                eject(kind, s, keys, backends)
            front = Conn(s["listen"])
            try:
                value = s["pool"].encode()
                for k in keys:
                    reply = (front.mc_set(k, value) if kind == "memcache"
                             else front.redis(b"SET", k, value))
                    if reply not in (b"STORED", b"+OK"):
                        raise RuntimeError("%s: store %r -> %r" % (s["pool"], k, reply))
            finally:
                front.close()
            where = []
            for k in keys:
                hits = []
                for i, b in enumerate(backends[:len(s["servers"])]):
                    if not s["servers"][i].get("live", True):
                        continue
                    has = (b.mc_has(k) if kind == "memcache"
                           else b.redis(b"EXISTS", k) == b":1")
                    if has:
                        hits.append(i)
                        if kind == "memcache":
                            b.mc_delete(k)
                        else:
                            b.redis(b"DEL", k)
                if len(hits) != 1:
                    raise RuntimeError("%s: key %r on backends %r" % (s["pool"], k, hits))
                where.append(hits[0])
            s["servers_for_keys"] = where
    finally:
        for b in backends:
            b.close()


def run_kind(kind, args, keys, tmp):
    procs = []
    logs = []
    try:
        nports = 4
        use_11211 = kind == "memcache" and port_free(11211)
        ports = free_ports(nports + 1 + 200)
        backend_ports = ports[:nports]
        if use_11211:
            # Second in config order but first in twemproxy's name order.
            backend_ports[1] = 11211
        stats_port = ports[nports]
        # Ports nothing listens on, one per server position.
        dead_ports = ports[-nports:]
        specs = pool_specs(kind, backend_ports, dead_ports)
        assert len(specs) <= 200 - nports
        for s, p in zip(specs, ports[nports + 1:]):
            s["listen"] = p
        log = open(os.path.join(tmp, "%s-backends.log" % kind), "w")
        logs.append(log)
        for p in backend_ports:
            if kind == "memcache":
                cmd = [args.memcached, "-l", HOST, "-p", str(p), "-U", "0", "-m", "16"]
                if os.geteuid() == 0:
                    cmd += ["-u", "root"]
            else:
                cmd = [args.redis_server, "--bind", HOST, "--port", str(p),
                       "--save", "", "--appendonly", "no"]
            procs.append(start(cmd, log))
        for proc, p in zip(procs, backend_ports):
            wait_listening([p], proc)
        conf = os.path.join(tmp, "%s.yml" % kind)
        write_conf(conf, specs, kind == "redis")
        nlog = os.path.join(tmp, "%s-nutcracker.log" % kind)
        nc = start([args.nutcracker, "-c", conf, "-s", str(stats_port), "-a", HOST,
                    "-o", nlog, "-p", os.path.join(tmp, "%s.pid" % kind)], log)
        procs.append(nc)
        wait_listening([stats_port] + [s["listen"] for s in specs], nc)
        record(kind, specs, keys, backend_ports)
        for s in specs:
            del s["listen"]
        return {"backend": kind, "port_11211": use_11211, "specs": specs}
    finally:
        for proc in reversed(procs):
            stop(proc)
        for log in logs:
            log.close()


def write_vectors(path, version, result, keys):
    out = ['{']
    out.append('  "generator": "tools/gen_placement_vectors.py",')
    out.append('  "nutcracker": %s,' % json.dumps(version))
    out.append('  "backend": %s,' % json.dumps(result["backend"]))
    out.append('  "port_11211": %s,' % json.dumps(result["port_11211"]))
    out.append('  "keys_hex": %s,' % json.dumps([k.hex() for k in keys]))
    out.append('  "pools": [')
    rows = [json.dumps(s, separators=(",", ":")) for s in result["specs"]]
    out.append(",\n".join("    " + r for r in rows))
    out.append('  ]')
    out.append('}')
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "vectors", "placement"))
    ap.add_argument("--nutcracker", default="/usr/sbin/nutcracker")
    ap.add_argument("--memcached", default="/usr/bin/memcached")
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--skip-redis", action="store_true")
    args = ap.parse_args()

    version = subprocess.run([args.nutcracker, "-V"], capture_output=True,
                             text=True).stderr.strip().splitlines()
    version = version[0] if version else "unknown"
    keys = make_keys()
    os.makedirs(args.out, exist_ok=True)
    kinds = ["memcache"] + ([] if args.skip_redis else ["redis"])
    with tempfile.TemporaryDirectory(prefix="placement-vectors-") as tmp:
        for kind in kinds:
            t0 = time.monotonic()
            result = run_kind(kind, args, keys, tmp)
            path = os.path.join(args.out, "%s.json" % kind)
            write_vectors(path, version, result, keys)
            print("%s: %d pools x %d keys -> %s (%.1fs, port 11211 %s)" % (
                kind, len(result["specs"]), len(keys), os.path.normpath(path),
                time.monotonic() - t0, "used" if result["port_11211"] else "not used"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
