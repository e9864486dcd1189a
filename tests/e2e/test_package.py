"""The Debian package and `make install`: what an operator installs.

`make deb` builds the package with cargo-deb; it is unpacked into a
temporary root (`dpkg -x`, so the machine's own /usr and /etc stay as they
are) and the installed binary runs the installed example configuration with
real memcached and redis-server behind it. The man page and the systemd unit
are checked with the tools that read them (groff, systemd-analyze).

Locally the module is skipped when cargo-deb or dpkg-deb is missing; in CI
(CI set) it must run, and .ci/run installs cargo-deb.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import redis
from pymemcache.client.base import Client as MemcacheClient
from redis.backoff import NoBackoff
from redis.retry import Retry

from procs import HOST, REPO_ROOT, ManagedProcess, free_port, read_stats

# Minutes of work in all: left out of `make quick`.
pytestmark = pytest.mark.slow

CI = bool(os.environ.get("CI"))

# The operator's name for the package's Maintainer field (a quote in it, as
# in many names, must reach the field unchanged).
MAINTAINER = "Package O'Builder <packages@walnut.invalid>"


def _have(tool: str) -> bool:
    if tool == "cargo-deb":
        return subprocess.run(["cargo", "deb", "--version"], capture_output=True).returncode == 0
    return shutil.which(tool) is not None


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package `make deb` builds."""
    missing = [t for t in ("cargo", "cargo-deb", "dpkg-deb", "make") if not _have(t)]
    if missing:
        if CI:
            pytest.fail(f"CI must build the Debian package but {missing} are missing (.ci/run installs them)")
        pytest.skip(f"{', '.join(missing)} not installed")
    out = subprocess.run(
        ["make", "deb", f"MAINTAINER={MAINTAINER}"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # The path cargo-deb prints (under `make test`, make's own "Entering
    # directory" lines surround it).
    debs = [line.strip() for line in out.stdout.splitlines() if line.strip().endswith(".deb")]
    path = Path(debs[-1] if debs else "")
    assert path.suffix == ".deb" and path.is_file(), out.stdout
    return path


@pytest.fixture(scope="module")
def root(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package unpacked into a temporary root."""
    root = tmp_path_factory.mktemp("root")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return root


def test_package_holds_binary_man_page_unit_and_config(deb: Path) -> None:
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    for path in (
        "./usr/sbin/walnut",
        "./usr/share/man/man8/walnut.8.gz",
        "./lib/systemd/system/walnut.service",
        "./etc/walnut/nutcracker.yml",
        "./etc/logrotate.d/walnut",
        "./usr/share/doc/walnut/copyright",
    ):
        assert re.search(rf" {re.escape(path)}$", listing, re.M), f"{path} missing:\n{listing}"
    assert re.search(r"^-rwxr-xr-x .* \./usr/sbin/walnut$", listing, re.M)
    # Stripped: no debug sections (the release build keeps line tables).
    size = int(re.search(r"^\S+ \S+\s+(\d+) .* \./usr/sbin/walnut$", listing, re.M).group(1))
    assert size < 10_000_000, size
    conffiles = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Package", "Version", "Depends"], capture_output=True, text=True, check=True
    ).stdout
    assert "Package: walnut" in conffiles
    # The Maintainer is the one `make deb MAINTAINER=...` was given, not
    # Cargo.toml's placeholder.
    maintainer = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Maintainer"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert maintainer == MAINTAINER, maintainer
    # The configuration is a conffile: an upgrade keeps the operator's edits.
    ctl = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(deb)], capture_output=True, check=True).stdout
    assert b"/etc/walnut/nutcracker.yml" in ctl and b"/etc/logrotate.d/walnut" in ctl
    # The copyright names the licence Cargo.toml declares, in full.
    copyright_text = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True
    ).stdout
    assert b"Apache License" in copyright_text


def test_installed_binary_checks_the_example_config(root: Path) -> None:
    walnut = root / "usr/sbin/walnut"
    conf = root / "etc/walnut/nutcracker.yml"
    out = subprocess.run([str(walnut), "-V"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and out.stdout.startswith("This is walnut-"), out
    out = subprocess.run([str(walnut), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().endswith("syntax is ok"), out.stderr
    # Plain `walnut -t`, in a directory holding conf/nutcracker.yml, reads
    # that file (twemproxy's default path).
    cwd = root / "run"
    (cwd / "conf").mkdir(parents=True)
    shutil.copy(conf, cwd / "conf/nutcracker.yml")
    out = subprocess.run([str(walnut), "-t"], cwd=cwd, capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    assert "'conf/nutcracker.yml' syntax is ok" in out.stderr
    # Without it, the installed /etc/walnut/nutcracker.yml when there is one
    # on this machine, else the error names both paths tried.
    empty = root / "empty"
    empty.mkdir()
    out = subprocess.run([str(walnut), "-t"], cwd=empty, capture_output=True, text=True, timeout=10)
    if Path("/etc/walnut/nutcracker.yml").exists():
        assert "'/etc/walnut/nutcracker.yml'" in out.stderr, out.stderr
    else:
        assert out.returncode == 1 and "conf/nutcracker.yml" in out.stderr, out.stderr
        assert "/etc/walnut/nutcracker.yml" in out.stderr, out.stderr


def test_installed_man_page_documents_every_flag(root: Path) -> None:
    page = gzip.decompress((root / "usr/share/man/man8/walnut.8.gz").read_bytes()).decode()
    assert page.startswith(".TH WALNUT 8 ")
    helptext = subprocess.run(
        [str(root / "usr/sbin/walnut"), "--help"], capture_output=True, text=True, timeout=10
    ).stdout
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", helptext))
    assert len(flags) >= 18, helptext
    for flag in flags:
        assert flag.replace("-", "\\-") in page, f"{flag} is in --help but not in walnut.8"
    assert "--man" not in flags and "\\-\\-man" not in page
    if shutil.which("groff"):
        # -ww: every warning; -z: no output. A clean page prints nothing.
        out = subprocess.run(
            ["groff", "-man", "-Tutf8", "-ww", "-z"], input=page, capture_output=True, text=True, timeout=30
        )
        assert out.returncode == 0 and out.stderr == "", out.stderr


def test_installed_unit(root: Path, tmp_path: Path) -> None:
    unit = (root / "lib/systemd/system/walnut.service").read_text()
    assert not re.search(r"@[A-Z]+@", unit), "unfilled placeholder"
    assert "ExecStart=/usr/sbin/walnut -d -c /etc/walnut/nutcracker.yml -p /run/walnut/walnut.pid" in unit
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit
    assert "PIDFile=/run/walnut/walnut.pid" in unit
    for hardening in ("NoNewPrivileges=yes", "ProtectSystem=strict", "DynamicUser=yes", "PrivateDevices=yes"):
        assert hardening in unit
    if shutil.which("systemd-analyze"):
        # Point the unit at the unpacked binary, as if the package were
        # installed: systemd-analyze checks the commands exist and reports
        # every unknown key or bad value (it prints nothing for a good unit).
        local = tmp_path / "walnut.service"
        local.write_text(unit.replace("/usr/sbin/walnut", str(root / "usr/sbin/walnut")))
        out = subprocess.run(
            ["systemd-analyze", "verify", "--man=no", str(local)], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0 and (out.stdout + out.stderr).strip() == "", out.stdout + out.stderr


def test_installed_binary_serves_the_example_config(root: Path, tmp_path: Path) -> None:
    """The example config, its ports moved to free ones, run by the installed
    binary in front of a real memcached and redis-server."""
    from procs import Memcached, Redis

    mc = Memcached(tmp_path).start()
    rd = Redis(tmp_path).start()
    proxy = None
    try:
        ports = {"22121": free_port(), "22122": free_port(), "22223": free_port()}
        text = (root / "etc/walnut/nutcracker.yml").read_text()
        for old, new in ports.items():
            assert f"127.0.0.1:{old}" in text
            text = text.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")
        assert "127.0.0.1:11211:1" in text and "127.0.0.1:6379:1" in text
        text = text.replace("127.0.0.1:11211:1", f"127.0.0.1:{mc.port}:1")
        text = text.replace("127.0.0.1:6379:1", f"127.0.0.1:{rd.port}:1")
        conf = tmp_path / "nutcracker.yml"
        conf.write_text(text)
        stats_port = free_port()
        log = tmp_path / "walnut.log"
        argv = [str(root / "usr/sbin/walnut"), "-c", str(conf), "-s", str(stats_port), "-a", HOST, "-o", str(log)]
        proxy = ManagedProcess("installed-walnut", argv, tmp_path, log)
        proxy.start()
        proxy.wait_ready([ports["22121"], ports["22122"], ports["22223"], stats_port])

        mcc = MemcacheClient((HOST, ports["22121"]), timeout=5, connect_timeout=5)
        assert mcc.set("pkg-key", b"from the package", noreply=False)
        assert mcc.get("pkg-key") == b"from the package"
        mcc.close()
        r = redis.Redis(host=HOST, port=ports["22122"], retry=Retry(NoBackoff(), 0), socket_timeout=5)
        assert r.set("user:{7}:name", "ada")
        assert r.get("user:{7}:name") == b"ada"
        r.close()
        # Really through walnut to the real servers.
        assert redis.Redis(host=HOST, port=rd.port).get("user:{7}:name") == b"ada"
        stats = read_stats(stats_port)
        assert stats["cache"]["memcached-1"]["requests"] >= 2
        assert stats["sessions"]["redis-1"]["requests"] >= 2
    finally:
        if proxy is not None:
            proxy.stop()
        rd.stop()
        mc.stop()


def test_make_install_layout(tmp_path: Path) -> None:
    if not _have("make"):
        pytest.skip("make not installed")
    dest = tmp_path / "dest"
    out = subprocess.run(
        ["make", "--no-print-directory", "install", f"DESTDIR={dest}", "PREFIX=/opt/walnut"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    for path in ("opt/walnut/sbin/walnut", "opt/walnut/share/man/man8/walnut.8",
                 "lib/systemd/system/walnut.service", "etc/walnut/nutcracker.yml"):
        assert (dest / path).is_file(), path
    unit = (dest / "lib/systemd/system/walnut.service").read_text()
    assert "ExecStart=/opt/walnut/sbin/walnut -d -c /etc/walnut/nutcracker.yml" in unit
    # A second install keeps an edited configuration.
    (dest / "etc/walnut/nutcracker.yml").write_text("# edited\n")
    out = subprocess.run(
        ["make", "--no-print-directory", "install", f"DESTDIR={dest}", "PREFIX=/opt/walnut"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stderr
    assert (dest / "etc/walnut/nutcracker.yml").read_text() == "# edited\n"


def test_dpkg_installs_runs_and_purges_the_package(deb: Path) -> None:
    """The package installed as an operator installs it (`dpkg -i`, as root
    or through passwordless sudo), the installed binary checks the
    installed configuration, and a purge leaves nothing behind."""
    if not shutil.which("dpkg"):
        pytest.skip("dpkg not installed")
    sudo: list[str] = []
    if os.geteuid() != 0:
        if subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode != 0:
            pytest.skip("installing a package needs root or passwordless sudo")
        sudo = ["sudo", "-n"]
    already = subprocess.run(["dpkg", "-s", "walnut"], capture_output=True, text=True)
    if already.returncode == 0 and not CI:
        pytest.skip("a walnut package is installed on this machine already")
    out = subprocess.run([*sudo, "dpkg", "-i", str(deb)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    try:
        status = subprocess.run(["dpkg", "-s", "walnut"], capture_output=True, text=True, check=True).stdout
        assert "Status: install ok installed" in status, status
        out = subprocess.run(["/usr/sbin/walnut", "-t", "-c", "/etc/walnut/nutcracker.yml"],
                             capture_output=True, text=True, timeout=10)
        assert out.returncode == 0 and out.stderr.strip().endswith("syntax is ok"), out.stderr
        for path in ("/usr/share/man/man8/walnut.8.gz", "/lib/systemd/system/walnut.service"):
            assert Path(path).is_file(), path
        conffiles = subprocess.run(["dpkg-query", "--showformat=${Conffiles}", "--show", "walnut"],
                                   capture_output=True, text=True, check=True).stdout
        assert "/etc/walnut/nutcracker.yml" in conffiles, conffiles
    finally:
        purge = subprocess.run([*sudo, "dpkg", "--purge", "walnut"], capture_output=True, text=True,
                               timeout=120)
    assert purge.returncode == 0, purge.stdout + purge.stderr
    assert not Path("/usr/sbin/walnut").exists()
    assert not Path("/etc/walnut/nutcracker.yml").exists()
