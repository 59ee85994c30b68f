"""The local schema registry's lifecycle: resolve the server, start it on loopback and wait
until its Confluent-compatible API answers, stop it by its recorded pid, report status."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from turnaudit.errors import LocalRegistryError
from turnaudit.local_broker import require_tool
from turnaudit.local_broker.nodes import alive, port_open
from turnaudit.local_registry.java import JavaRuntime, ensure_java, find_java
from turnaudit.local_registry.settings import CCOMPAT_PATH, LocalRegistrySettings

RESOLVED = ".resolved"  # in the server folder, once Maven unpacked it whole
# Every file it writes (the database holds the schemas, the log their subjects) is its
# owner's alone.
OWNER_ONLY_UMASK = 0o077


@dataclass(frozen=True)
class RegistryStatus:
    running: bool
    pid: int | None
    serving: bool
    url: str
    version: str | None = None  # the server's own word, once it serves
    rss_mb: float | None = None  # resident memory of its process

    def describe(self) -> str:
        if self.running and self.serving:
            memory = f", {self.rss_mb:.0f} MB resident" if self.rss_mb is not None else ""
            return (
                f"running (pid {self.pid}), serving {self.url} "
                f"(Apicurio Registry {self.version or '?'}{memory})"
            )
        if self.running:
            return f"process {self.pid} alive but not serving {self.url}"
        return "stopped"


class LocalSchemaRegistry:
    """Apicurio Registry from ``settings.server``, its H2 database under ``settings.home``."""

    def __init__(self, settings: LocalRegistrySettings) -> None:
        self.settings = settings
        self.home = settings.home.resolve()
        self.data_dir = self.home / "data"
        self.pid_file = self.home / "registry.pid"
        self.log_file = self.home / "registry.log"
        self.url = settings.url
        self.started_in_s: float | None = None  # launch to the API answering, this start

    # -- setup ---------------------------------------------------------------
    @property
    def jar(self) -> Path:
        return self.settings.server.resolve() / "quarkus-run.jar"

    def ensure_server(self) -> Path:
        """Unpack the server with Maven unless it is already there (``make registry``)."""
        server = self.settings.server.resolve()
        if (server / RESOLVED).exists() and self.jar.exists():
            return server
        mvn = require_tool("mvn", "Apache Maven (apt-get install maven)")
        pom = self.settings.pom.resolve()
        if not pom.exists():
            raise LocalRegistryError(
                f"no {pom}: run from the project folder or set TURNAUDIT_PROJECT_DIR"
            )
        result = subprocess.run(
            [mvn, "-q", "-B", "-f", str(pom), "dependency:unpack@unpack-server"],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 or not self.jar.exists():
            output = " ".join((result.stdout[-1500:] + result.stderr[-1500:]).split())
            raise LocalRegistryError(f"mvn could not unpack the registry server: {output}")
        (server / RESOLVED).touch()
        return server

    def resolve(self) -> JavaRuntime:
        """The server and a Java 21+ runtime (fetched into the ignored folder if none)."""
        self.ensure_server()
        return ensure_java(self.settings.java_dir)

    def command(self, java: JavaRuntime) -> list[str]:
        """The server's command line: loopback only, both ports from the settings (unset,
        the management interface binds 9000 on every interface), H2 in a file here."""
        settings = self.settings
        database = self.data_dir / "registry"
        return [
            str(java.java),
            "-Xms64m",
            f"-Xmx{settings.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # starts in half the time; the API is light work
            "-Djava.awt.headless=true",
            "-Dquarkus.http.host=127.0.0.1",
            f"-Dquarkus.http.port={settings.port}",
            "-Dquarkus.management.host=127.0.0.1",
            f"-Dquarkus.management.port={settings.management_port}",
            "-Dapicurio.storage.kind=sql",
            "-Dapicurio.storage.sql.kind=h2",
            f"-Dapicurio.datasource.url=jdbc:h2:file:{database}",
            "-Dapicurio.datasource.jdbc.initial-size=2",
            "-Dapicurio.datasource.jdbc.min-size=2",
            "-Dapicurio.datasource.jdbc.max-size=10",
            "-jar",
            str(self.jar),
        ]

    # -- lifecycle -----------------------------------------------------------
    def start(self, timeout: float = 120.0) -> RegistryStatus:
        status = self.status()
        if status.running:
            return status if status.serving else self._await_serving(None, timeout)
        java = find_java(self.settings.java_dir)
        for port in (self.settings.port, self.settings.management_port):
            if port_open(port):
                raise LocalRegistryError(
                    f"port {port} on 127.0.0.1 is taken by another program: set "
                    "TURNAUDIT_REGISTRY_PORT and TURNAUDIT_REGISTRY_MANAGEMENT_PORT to free ports"
                )
        self.ensure_server()
        for folder in (self.home, self.data_dir):
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o700)
        fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        launched = time.monotonic()
        with os.fdopen(fd, "ab") as log:
            proc = subprocess.Popen(
                self.command(java),
                cwd=self.home,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # outlives the CLI that started it
                umask=OWNER_ONLY_UMASK,
            )
        self.pid_file.write_text(str(proc.pid))
        status = self._await_serving(proc, timeout)
        self.started_in_s = time.monotonic() - launched
        return status

    def _await_serving(
        self, proc: subprocess.Popen[bytes] | None, timeout: float
    ) -> RegistryStatus:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise LocalRegistryError(
                    f"the schema registry exited with code {proc.returncode}; see "
                    f"{self.log_file}: {self.log_tail(3)}"
                )
            if self.serves():
                return self.status()
            time.sleep(0.1)
        self.stop()
        raise LocalRegistryError(
            f"the schema registry did not serve within {timeout:.0f}s; see {self.log_file}"
        )

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM by the recorded pid, SIGKILL at ``timeout``; a stale pid file is removed."""
        self._signal(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL (a crash, for fault tests)."""
        self._signal(signal.SIGKILL, 10.0)

    def _signal(self, sig: signal.Signals, timeout: float) -> None:
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and alive(pid):
            time.sleep(0.05)
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while alive(pid):
                time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)

    # -- status --------------------------------------------------------------
    def pid(self) -> int | None:
        """The server's pid, if the pid file names a live registry of this folder (a
        stale file whose pid was reused by another program is ignored)."""
        try:
            pid = int(self.pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ValueError):
            return None
        database = f"-Dapicurio.datasource.url=jdbc:h2:file:{self.data_dir / 'registry'}"
        return pid if database.encode() in cmdline and alive(pid) else None

    def serves(self) -> bool:
        """Ready by its health check, and the Confluent-compatible API answers."""
        return (
            _get_json(self.settings.health_url) is not None
            and _get_json(f"http://127.0.0.1:{self.settings.port}{CCOMPAT_PATH}/config") is not None
        )

    def status(self) -> RegistryStatus:
        pid = self.pid()
        if pid is None:
            return RegistryStatus(False, None, False, self.url)
        serving = self.serves()
        info = _get_json(f"http://127.0.0.1:{self.settings.port}/apis/registry/v3/system/info")
        version = str(info.get("version")) if isinstance(info, dict) else None
        return RegistryStatus(True, pid, serving, self.url, version, resident_mb(pid))

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def _get_json(url: str) -> object | None:
    """The JSON a 200 answer carries; None for anything else (refused, an error, a timeout)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 - loopback http
            return json.loads(answer.read() or b"null") if answer.status == 200 else None
    except (OSError, ValueError):
        return None


def resident_mb(pid: int) -> float | None:
    """The process's resident set size (``VmRSS``) in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
