"""ssh:// engines, as the README shows them: a real OpenSSH server on loopback in front of a real Docker engine.

The server (Debian's openssh-server, which .ci/run installs) listens on a free loopback port with its own host
key and a key login, and hands `docker system dial-stdio` the engine of DOCKER_HOST (sshd's SetEnv). The client
side is a config file as a user's ~/.ssh/config would be, with an alias that has that port and key; an `ssh` on
PATH runs the real OpenSSH client with `-F` that file, so nothing of the user's own ~/.ssh is read or written.
The server is started here and stopped by its PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from engines import root_and_dockerd

pytestmark = pytest.mark.docker

SSHD = "/usr/sbin/sshd"
ALIAS = "enginehost"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


class SSHWorld:
    """An sshd on loopback, a client config with an alias for it, and the PATH whose `ssh` reads that config."""

    def __init__(self, root: Path, engine: str):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        self.port = _free_port()
        _keygen(root / "host_key")
        _keygen(root / "client_key")
        shutil.copy(root / "client_key.pub", root / "authorized_keys")
        os.chmod(root / "authorized_keys", 0o600)
        (root / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {root / 'host_key'}\n"
            f"AuthorizedKeysFile {root / 'authorized_keys'}\nPidFile {root / 'sshd.pid'}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "PermitRootLogin prohibit-password\n"
            f"SetEnv DOCKER_HOST={engine}\n")
        self.known_hosts = root / "known_hosts"
        host_pub = (root / "host_key.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        self.config = root / "ssh_config"
        self.config.write_text(
            f"Host {ALIAS}\n    HostName 127.0.0.1\n    Port {self.port}\n    User root\n"
            f"    IdentityFile {root / 'client_key'}\n    IdentitiesOnly yes\n"
            f"    UserKnownHostsFile {self.known_hosts}\n    GlobalKnownHostsFile /dev/null\n"
            "Host *\n    IdentitiesOnly yes\n"
            f"    IdentityFile {root / 'client_key'}\n    UserKnownHostsFile {self.known_hosts}\n"
            "    GlobalKnownHostsFile /dev/null\n")
        bin_dir = root / "bin"
        bin_dir.mkdir()
        wrapper = bin_dir / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {self.config} "$@"\n')
        wrapper.chmod(0o755)
        self.env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(root / "sshd_config")],
                                     stdout=subprocess.DEVNULL, stderr=open(root / "sshd.log", "w"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"sshd did not start: {(root / 'sshd.log').read_text()[-500:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from harness.runners.docker.pool import engine_status

    ok, reason = engine_status()
    if not ok:
        pytest.skip(f"no docker engine: {reason}")
    why = root_and_dockerd()
    if why:
        pytest.skip(why)
    if not (os.path.exists(SSHD) and shutil.which("ssh")):
        pytest.skip("no OpenSSH server here (.ci/run installs Debian's openssh-server)")
    w = SSHWorld(tmp_path_factory.mktemp("ssh"), os.environ["DOCKER_HOST"])
    yield w
    w.stop()


def test_docker_cli_reaches_the_engine_through_the_alias(world):
    """The set-up itself, as the docker CLI sees it: the alias's port comes from the config."""
    if not shutil.which("docker"):
        pytest.skip("no docker CLI")
    proc = subprocess.run(["docker", "-H", f"ssh://{ALIAS}", "info", "--format", "{{.ID}}"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **world.env})
    assert proc.returncode == 0, proc.stderr


def test_doctor_answers_through_an_ssh_alias_with_its_own_port(bisect, world):
    r = bisect("doctor", "--docker-host", f"ssh://{ALIAS}", env=world.env)
    line = next(x for x in r.stdout.splitlines() if f"docker engine ssh://{ALIAS}" in x)
    assert "docker engine" in line and "API" in line and "Install paramiko" not in r.stdout, r.stdout
    assert f"ssh://{ALIAS} arch" in r.stdout and "x86_64" in r.stdout, r.stdout


def test_a_two_release_run_over_ssh_gives_the_verdicts_and_records_the_engine(bisect, residual_norm, world, tmp_path):
    model, batch = residual_norm
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.20.0",
               "--arch", "x86_64", "--backend", "docker", "--docker-host", f"ssh://{ALIAS}", "--json",
               results=tmp_path / "res", env=world.env)
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_good"], doc["first_bad"]) == ("1.19.2", "1.20.0"), doc
    import json

    recs = [json.loads(x) for x in (tmp_path / "res" / doc["run_id"] / "probes.jsonl").read_text().splitlines()]
    assert {rec["provenance"]["engine"]["name"] for rec in recs} == {f"ssh://{ALIAS}"}


def test_an_unknown_host_key_is_said_with_its_fix(bisect, world, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    config = tmp_path / "ssh_config"
    config.write_text(world.config.read_text().replace(str(world.known_hosts), str(empty)))
    wrapper = tmp_path / "bin" / "ssh"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {config} "$@"\n')
    wrapper.chmod(0o755)
    r = bisect("doctor", "--docker-host", f"ssh://{ALIAS}", env={"PATH": f"{wrapper.parent}:{os.environ['PATH']}"})
    line = next(x for x in r.stdout.splitlines() if f"docker engine ssh://{ALIAS}" in x)
    assert "Host key verification failed" in r.stdout and "known_hosts" in r.stdout, r.stdout
    assert "Broken pipe" not in line, line


def test_a_wrong_host_key_is_said_as_such(bisect, world, tmp_path):
    _keygen(tmp_path / "other")
    other = (tmp_path / "other.pub").read_text().split()
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:{world.port} {other[0]} {other[1]}\n")
    config = tmp_path / "ssh_config"
    config.write_text(world.config.read_text().replace(str(world.known_hosts), str(wrong)))
    wrapper = tmp_path / "bin" / "ssh"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {config} "$@"\n')
    wrapper.chmod(0o755)
    r = bisect("doctor", "--docker-host", f"ssh://{ALIAS}", env={"PATH": f"{wrapper.parent}:{os.environ['PATH']}"})
    assert "Host key verification failed" in r.stdout and "host key has changed" in r.stdout, r.stdout


def test_a_refused_connection_is_said_with_the_port(bisect, world):
    port = _free_port()
    r = bisect("run", "--model", "gemma-tiny-fused", "--from", "1.19.2", "--to", "1.20.0", "--arch", "x86_64",
               "--backend", "docker", "--docker-host", f"ssh://root@127.0.0.1:{port}", env=world.env)
    assert r.returncode == 2, (r.returncode, r.stderr)
    err = r.stderr.strip().splitlines()
    assert any("Connection refused" in x and f"port {port}" in x for x in err), r.stderr


def test_the_ssh_command_passes_on_only_what_the_url_says():
    """An alias's port and user come from ~/.ssh/config: the command adds -p and -l only for a URL's own."""
    from harness.runners.docker.ssh import SSHEndpoint

    assert SSHEndpoint.parse("ssh://enginehost").argv()[-5:] == ["--", "enginehost", "docker", "system", "dial-stdio"]
    assert "-p" not in SSHEndpoint.parse("ssh://enginehost").argv()
    argv = SSHEndpoint.parse("ssh://me@127.0.0.1:2222").argv()
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-l") + 1] == "me"
    assert "BatchMode=yes" in argv
    for bad in ("ssh://", "ssh://host/path", "ssh://host:port", "tcp://host:2375"):
        with pytest.raises(ValueError):
            SSHEndpoint.parse(bad)
