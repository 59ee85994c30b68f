"""A single-node KRaft Apache Kafka broker run from jars Maven resolved.

Used by ``make demo``, the tests and ``turnaudit broker``. Its data, config,
log and pid file live under one project-local folder; it binds 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from turnaudit.errors import BrokerError, MissingToolError
from turnaudit.kafka.topics import cluster_answers
from turnaudit.settings import LocalBrokerSettings

_SERVER_PROPERTIES = """\
# Written by turnaudit: single-node KRaft broker+controller on loopback.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={data_dir}
num.partitions=6
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=12
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.check.interval.ms=60000
"""

_LOG4J2 = """\
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        Pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
"""


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    pid: int | None
    serving: bool
    bootstrap_servers: str

    def describe(self) -> str:
        if self.running and self.serving:
            return f"running (pid {self.pid}), serving on {self.bootstrap_servers}"
        if self.running:
            return f"process {self.pid} alive but not serving on {self.bootstrap_servers}"
        return "stopped"


def require_tool(name: str, install_hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise MissingToolError(f"{name} not found: install {install_hint}")
    return path


class LocalKafkaBroker:
    """Formats storage once, starts, waits until it serves, stops by its own pid."""

    def __init__(self, settings: LocalBrokerSettings) -> None:
        self.settings = settings
        self.home = settings.home.resolve()
        self.data_dir = self.home / "data"
        self.config_file = self.home / "server.properties"
        self.log_config = self.home / "log4j2.yaml"
        self.pid_file = self.home / "broker.pid"
        self.log_file = self.home / "broker.log"

    @property
    def bootstrap_servers(self) -> str:
        return self.settings.bootstrap_servers

    # -- setup ---------------------------------------------------------------
    def ensure_jars(self) -> Path:
        """Resolve the broker jars with Maven unless they are already there."""
        jars = self.settings.jars_dir.resolve()
        if (jars / ".resolved").exists():
            return jars
        self._java()
        mvn = require_tool("mvn", "Apache Maven (apt-get install maven)")
        pom = self.settings.pom.resolve()
        if not pom.exists():
            raise BrokerError(f"no {pom}: run from the project folder or set TURNAUDIT_PROJECT_DIR")
        result = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(pom),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={jars}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            output = result.stdout[-2000:] + result.stderr[-2000:]
            raise BrokerError(f"mvn could not resolve the Kafka jars: {output}")
        (jars / ".resolved").touch()
        return jars

    def _java(self) -> str:
        return require_tool("java", "a Java 17+ runtime (apt-get install openjdk-17-jre-headless)")

    def _classpath(self) -> str:
        return str(self.ensure_jars() / "*")

    def _write_config(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(
            _SERVER_PROPERTIES.format(
                port=self.settings.port,
                controller_port=self.settings.controller_port,
                data_dir=self.data_dir,
            )
        )
        self.log_config.write_text(_LOG4J2)

    def _format_storage_once(self) -> None:
        if (self.data_dir / "meta.properties").exists():
            return
        cluster_id = "-"
        while cluster_id.startswith("-"):  # the storage tool would read it as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        result = subprocess.run(
            [
                self._java(),
                "-cp",
                self._classpath(),
                f"-Dlog4j2.configurationFile={self.log_config}",
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(self.config_file),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise BrokerError(f"formatting Kafka storage failed: {result.stdout}{result.stderr}")

    # -- lifecycle -----------------------------------------------------------
    def start(self, timeout: float = 90.0) -> BrokerStatus:
        status = self.status()
        if status.running and status.serving:
            return status
        if status.running:
            self.stop()
        for port in (self.settings.port, self.settings.controller_port):
            if _port_open(port):
                raise BrokerError(f"port {port} on 127.0.0.1 is taken by another program")
        self._write_config()
        self._format_storage_once()
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                [
                    self._java(),
                    f"-Xmx{self.settings.heap}",
                    f"-Xms{self.settings.heap}",
                    "-XX:+UseG1GC",
                    "-Djava.awt.headless=true",
                    f"-Dlog4j2.configurationFile={self.log_config}",
                    "-cp",
                    self._classpath(),
                    "kafka.Kafka",
                    str(self.config_file),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # outlives the CLI that started it
            )
        self.pid_file.write_text(str(proc.pid))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BrokerError(
                    f"the broker exited with code {proc.returncode}; see {self.log_file}:\n"
                    + self._log_tail()
                )
            if _port_open(self.settings.port) and self._serves():
                return self.status()
            time.sleep(0.25)
        self.stop()
        raise BrokerError(f"the broker did not serve within {timeout:.0f}s; see {self.log_file}")

    def stop(self, timeout: float = 30.0) -> None:
        pid = self._pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)  # none, or stale
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            self.pid_file.unlink(missing_ok=True)
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)

    def status(self) -> BrokerStatus:
        pid = self._pid()
        running = pid is not None and _alive(pid)
        serving = running and _port_open(self.settings.port) and self._serves()
        return BrokerStatus(running, pid if running else None, serving, self.bootstrap_servers)

    # -- helpers -------------------------------------------------------------
    def _pid(self) -> int | None:
        """The broker's pid, if the pid file names a live broker of this folder
        (a stale file whose pid was reused by another program is ignored)."""
        try:
            pid = int(self.pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ValueError):
            return None
        ours = b"kafka.Kafka" in cmdline and str(self.config_file).encode() in cmdline
        return pid if ours else None

    def _serves(self) -> bool:
        return cluster_answers(self.bootstrap_servers, timeout=2)

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return _not_zombie(pid)
    return done == 0


def _not_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (all held open until every one is chosen)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port() -> int:
    return free_ports(1)[0]
