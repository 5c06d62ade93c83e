"""ssh:// engines reached through the system's OpenSSH client, the way the docker CLI reaches them.

The docker SDK's own ssh transport needs paramiko, and even with its
``use_ssh_client`` it rewrites ``ssh://alias`` to ``ssh://alias:22`` and
passes ``-p 22``, which overrides the port an alias has in ``~/.ssh/config``.
Here each HTTP connection to the engine is one ``ssh ... -- HOST docker system
dial-stdio`` process whose stdin and stdout are one end of a socket pair: the
SDK talks HTTP over the other end as over a unix socket, and ssh itself reads
``~/.ssh/config`` (aliases, ports, keys, ProxyJump), the agent and
``known_hosts``. Only a port or user written in the URL is passed on.

ssh runs with ``BatchMode=yes``: nothing may ask for a password or a host key
on a terminal the harness does not have. When ssh fails, what it said on stderr
(a host key it does not know, a refused connection, a key not accepted) is kept
and :func:`explain` turns it into the one-line message with the fix.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import urllib.parse
from dataclasses import dataclass

CONNECT_TIMEOUT_S = 30  # as the docker CLI's ssh helper


@dataclass(frozen=True)
class SSHEndpoint:
    """What an ssh:// address says: the host (or alias), and a user and port only where the URL gives them."""

    host: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, url: str) -> "SSHEndpoint":
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "ssh" or not parsed.hostname:
            raise ValueError(f"not an ssh:// address with a host: {url!r}")
        if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
            raise ValueError(f"an ssh:// engine address is ssh://[user@]host[:port], not {url!r}")
        try:
            port = parsed.port
        except ValueError:
            raise ValueError(f"bad port in {url!r}") from None
        return cls(parsed.hostname, urllib.parse.unquote(parsed.username) if parsed.username else None, port)

    def argv(self) -> list[str]:
        """The ssh command that connects to the engine's API, as `docker -H ssh://...` runs it."""
        args = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}", "-T"]
        if self.user:
            args += ["-l", self.user]
        if self.port:
            args += ["-p", str(self.port)]
        return [*args, "--", self.host, "docker", "system", "dial-stdio"]


class _Tunnel:
    """One ssh process speaking the engine's API on its stdin/stdout; its stderr kept for the error message."""

    def __init__(self, argv: list[str], on_exit):
        ours, theirs = socket.socketpair()
        try:
            # its own session: a Ctrl-C at the terminal reaches the harness, which closes the socket and so ends ssh
            self.proc = subprocess.Popen(argv, stdin=theirs, stdout=theirs, stderr=subprocess.PIPE,
                                         start_new_session=True)
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self._stderr = b""
        self._reader = threading.Thread(target=self._drain, args=(on_exit,), daemon=True)
        self._reader.start()

    def _drain(self, on_exit) -> None:
        self._stderr = self.proc.stderr.read(64 << 10)
        self.proc.stderr.close()
        code = self.proc.wait()
        on_exit(code, self._stderr.decode("utf-8", "replace"))

    def settle(self, timeout: float) -> None:
        """Wait (up to `timeout`) until an ssh that has exited has had its stderr read."""
        if self.proc.poll() is not None or timeout > 1:
            self._reader.join(timeout)

    def close(self) -> None:
        try:
            self.sock.close()
        finally:  # ssh sees EOF and exits; one that hangs is ended (it is ours)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self._reader.join(timeout=5)


def make_client(url: str, timeout: int = 120, tls=False):
    """A docker SDK client whose every connection to the engine at `url` (ssh://...) is an OpenSSH process."""
    import docker
    import requests.adapters
    import urllib3
    import urllib3.connection
    import urllib3.connectionpool
    from docker import constants
    from docker.transport.basehttpadapter import BaseHTTPAdapter

    endpoint = SSHEndpoint.parse(url)
    argv = endpoint.argv()

    class Connection(urllib3.connection.HTTPConnection):
        def __init__(self, adapter, timeout):
            super().__init__("localhost", timeout=timeout)
            self.adapter = adapter
            self.tunnel: _Tunnel | None = None

        def connect(self):
            self.tunnel = self.adapter.latest = _Tunnel(argv, self.adapter.note_exit)
            self.tunnel.sock.settimeout(self.timeout)
            self.sock = self.tunnel.sock

        def close(self):
            super().close()
            if self.tunnel is not None:
                self.tunnel.close()
                self.tunnel = None

    class ConnectionPool(urllib3.connectionpool.HTTPConnectionPool):
        def __init__(self, adapter, timeout, maxsize):
            super().__init__("localhost", timeout=timeout, maxsize=maxsize)
            self.adapter = adapter

        def _new_conn(self):
            return Connection(self.adapter, self.timeout)

    class Adapter(BaseHTTPAdapter):
        __attrs__ = requests.adapters.HTTPAdapter.__attrs__ + ["pools", "timeout", "max_pool_size"]

        def __init__(self):
            self.timeout = timeout
            self.max_pool_size = constants.DEFAULT_MAX_POOL_SIZE
            self.pools = urllib3._collections.RecentlyUsedContainer(constants.DEFAULT_NUM_POOLS_SSH,
                                                                    dispose_func=lambda p: p.close())
            self.last_failure: str | None = None
            self.latest: _Tunnel | None = None
            super().__init__()

        def note_exit(self, code: int, stderr: str) -> None:
            if code != 0:
                self.last_failure = stderr.strip() or f"ssh exited with status {code}"

        def get_connection(self, url, proxies=None):
            with self.pools.lock:
                pool = self.pools.get(url)
                if pool is None:
                    pool = ConnectionPool(self, self.timeout, self.max_pool_size)
                    self.pools[url] = pool
                return pool

        def request_url(self, request, proxies):
            return request.path_url  # no proxies: the tunnel is the connection

    # Built on a placeholder address with a fixed API version (no request yet), then pointed at the tunnel.
    client = docker.DockerClient(base_url="unix:///ortbisect-ssh-placeholder.sock", version=constants.MINIMUM_DOCKER_API_VERSION,
                                 timeout=timeout, tls=tls)
    adapter = Adapter()
    api = client.api
    # not "http+docker://ssh": the SDK reads that as its paramiko channel when it attaches to a stream; ours is a
    # plain socket, as a unix socket's is
    api.mount("http+docker://over-ssh", adapter)
    api._custom_adapter = adapter
    api.base_url = "http+docker://over-ssh"
    api.ssh_endpoint = endpoint
    try:
        api._version = api._retrieve_server_version()
    except Exception as exc:
        said = failure(client)
        client.close()
        raise docker.errors.DockerException(explain(endpoint, said, exc)) from None
    return client


def failure(client) -> str | None:
    """What ssh last said when it failed for this client, or None (not an ssh client, or no failure)."""
    adapter = getattr(getattr(client, "api", None), "_custom_adapter", None)
    latest = getattr(adapter, "latest", None)
    if latest is not None:
        latest.settle(3)  # a request can fail a moment before ssh's exit is read
    return getattr(adapter, "last_failure", None)


def explain(endpoint: SSHEndpoint, said: str | None, exc: BaseException | None = None) -> str:
    """One line: what went wrong reaching the engine over ssh, in ssh's words, and what fixes it."""
    where = endpoint.host + (f" port {endpoint.port}" if endpoint.port else "")
    if not said:
        return f"ssh to {where} connected but the engine did not answer: {type(exc).__name__}: {exc}".splitlines()[0]
    lines = [line for line in said.splitlines() if line.strip() and not line.startswith("Warning: Permanently added")]
    text = lines[-1] if lines else said.strip()
    low = said.lower()
    port = f"-p {endpoint.port} " if endpoint.port else ""
    if "remote host identification has changed" in low:
        text = "the host key has changed since known_hosts recorded it (Host key verification failed)"
        fix = (f"if {where} was reinstalled, check its new fingerprint, `ssh-keygen -R` its old entry and connect "
               f"once with `ssh {port}{endpoint.host}`; if not, someone may be in the middle")
    elif "host key verification failed" in low:
        fix = (f"the host key of {where} is not in known_hosts: check its fingerprint, then connect once with "
               f"`ssh {port}{endpoint.host}` or add it with `ssh-keyscan {port}{endpoint.host} >> ~/.ssh/known_hosts`")
    elif "connection refused" in low:
        fix = f"nothing listens for ssh at {where}: is sshd running, and is the port the one in the URL or ~/.ssh/config?"
    elif "permission denied" in low:
        fix = f"{where} did not accept a key (password logins are off in batch mode): `ssh-copy-id` or ssh-agent"
    elif "could not resolve hostname" in low:
        fix = "the host is neither resolvable nor an alias in ~/.ssh/config"
    elif "command not found" in low or "docker: not found" in low or "unknown command" in low:
        fix = f"{where} needs the docker CLI (18.09 or newer) on its PATH: `docker system dial-stdio` reaches its engine"
    elif "connection timed out" in low or "operation timed out" in low:
        fix = f"{where} did not answer within {CONNECT_TIMEOUT_S} s"
    else:
        fix = "run the same `ssh` by hand to see why"
    return f"ssh to {where} failed: {text} ({fix})"
