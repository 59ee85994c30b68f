"""The project-local KRaft Apache Kafka cluster, run from jars Maven resolved.

Used by ``make demo``, the tests and ``turnaudit broker``. Its data, config,
logs and pid files live under one project-local folder; it binds 127.0.0.1
only. One node by default (its files right in the folder); three with
``nodes=3`` (``node-1/``, ``node-2/``, ``node-3/``, each a combined broker and
controller with its own ports, pid and log). With ``security="sasl_ssl"`` its
client listener speaks SASL/SCRAM-SHA-512 over TLS: a CA and a broker
certificate are made with the JDK's keytool at first start (``tls/``), every
principal's password is drawn then (``secrets/<user>.password``, mode 0600) and
added to the metadata at format time, and the KRaft StandardAuthorizer lets
only the ``admin`` super user do what no ACL allows.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from turnaudit.errors import BrokerError, ConfigurationError, MissingToolError
from turnaudit.kafka.acls import ADMIN_PRINCIPAL, principals
from turnaudit.kafka.topics import broker_ids, cluster_answers
from turnaudit.settings import KafkaCredentials, KafkaSecurity, LocalBrokerSettings, Secret

_SERVER_PROPERTIES = """\
# Written by turnaudit: KRaft broker+controller node {node_id} of {nodes} on loopback.
process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters}
controller.listener.names=CONTROLLER
log.dirs={data_dir}
num.partitions=6
auto.create.topics.enable=false
offsets.topic.replication.factor={internal_rf}
offsets.topic.num.partitions=12
transaction.state.log.replication.factor={internal_rf}
transaction.state.log.min.isr={internal_isr}
share.coordinator.state.topic.replication.factor={internal_rf}
share.coordinator.state.topic.min.isr={internal_isr}
group.initial.rebalance.delay.ms=0
log.retention.check.interval.ms=60000
"""

_PLAINTEXT_LISTENERS = """\
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
"""

# Clients and brokers: SASL/SCRAM-SHA-512 over TLS. Controllers: SASL/PLAIN over
# TLS with the admin alone (SCRAM needs the metadata the controllers serve).
_SECURED_LISTENERS = """\
listeners=SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=SASL_SSL://127.0.0.1:{port}
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL
inter.broker.listener.name=SASL_SSL
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
sasl.mechanism.controller.protocol=PLAIN
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=\
org.apache.kafka.common.security.scram.ScramLoginModule required \
username="{admin}" password="{admin_password}";
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=\
org.apache.kafka.common.security.plain.PlainLoginModule required \
username="{admin}" password="{admin_password}" user_{admin}="{admin_password}";
ssl.keystore.type=PKCS12
ssl.keystore.location={keystore}
ssl.keystore.password={store_password}
ssl.key.password={store_password}
ssl.truststore.type=PKCS12
ssl.truststore.location={truststore}
ssl.truststore.password={store_password}
ssl.client.auth=none
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:{admin}
allow.everyone.if.no.acl.found=false
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

LAYOUT_FILE = "layout.json"
# Principals of the local secured cluster besides the planned ones: one
# subscriber team, so the subscriber's path can be tried locally.
LOCAL_SUBSCRIBERS = ("demo",)


@dataclass(frozen=True)
class NodeStatus:
    node_id: int
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


@dataclass(frozen=True)
class BrokerStatus:
    running: bool  # every node
    pid: int | None  # node 1's
    serving: bool  # every node
    bootstrap_servers: str
    nodes: tuple[NodeStatus, ...] = ()
    security: str = "plaintext"

    def describe(self) -> str:
        secured = " (SASL_SSL)" if self.security == "sasl_ssl" else ""
        if len(self.nodes) <= 1:
            if self.running and self.serving:
                return (
                    f"running (pid {self.pid}), serving on {self.bootstrap_servers}{secured}"
                )
            if self.running:
                return f"process {self.pid} alive but not serving on {self.bootstrap_servers}"
            return "stopped"
        if not any(n.running for n in self.nodes):
            return f"stopped ({len(self.nodes)} nodes)"
        up = sum(n.serving for n in self.nodes)
        parts = "; ".join(f"node {n.node_id} {n.describe()}" for n in self.nodes)
        return f"{up} of {len(self.nodes)} nodes serving{secured}: {parts}"


def require_tool(name: str, install_hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise MissingToolError(f"{name} not found: install {install_hint}")
    return path


def saved_layout(settings: LocalBrokerSettings) -> LocalBrokerSettings:
    """The settings with the node count, security and ports the folder was
    started with (``stop`` and ``status`` address what runs, whatever the env says)."""
    try:
        saved = json.loads((settings.home / LAYOUT_FILE).read_text())
        return replace(
            settings,
            nodes=int(saved["nodes"]),
            security=str(saved["security"]),
            ports=tuple(int(p) for p in saved["ports"]),
            controller_ports=tuple(int(p) for p in saved["controller_ports"]),
            port=int(saved["ports"][0]),
            controller_port=int(saved["controller_ports"][0]),
        )
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return settings


class _Node:
    """One KRaft node's files and process."""

    def __init__(self, node_id: int, folder: Path, port: int, controller_port: int) -> None:
        self.node_id = node_id
        self.folder = folder
        self.port = port
        self.controller_port = controller_port
        self.data_dir = folder / "data"
        self.config_file = folder / "server.properties"
        self.pid_file = folder / "broker.pid"
        self.log_file = folder / "broker.log"

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pid(self) -> int | None:
        """The node's pid, if the pid file names a live broker of this folder
        (a stale file whose pid was reused by another program is ignored)."""
        try:
            pid = int(self.pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ValueError):
            return None
        ours = b"kafka.Kafka" in cmdline and str(self.config_file).encode() in cmdline
        return pid if ours else None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


class LocalKafkaBroker:
    """Formats storage once, starts, waits until it serves, stops by its own pids."""

    def __init__(self, settings: LocalBrokerSettings) -> None:
        self.settings = settings
        self.home = settings.home.resolve()
        single = settings.nodes == 1
        self._nodes = [
            _Node(i + 1, self.home if single else self.home / f"node-{i + 1}", port, cport)
            for i, (port, cport) in enumerate(settings.node_ports())
        ]
        first = self._nodes[0]
        self.data_dir = first.data_dir
        self.config_file = first.config_file
        self.pid_file = first.pid_file
        self.log_file = first.log_file
        self.log_config = self.home / "log4j2.yaml"
        self.tls_dir = self.home / "tls"
        self.secrets_dir = self.home / "secrets"
        self.ca_file = self.tls_dir / "ca.pem"

    @property
    def bootstrap_servers(self) -> str:
        return self.settings.bootstrap_servers

    @property
    def node_ids(self) -> list[int]:
        return [n.node_id for n in self._nodes]

    def node_bootstrap(self, node_id: int) -> str:
        return self._node(node_id).bootstrap_servers

    # -- credentials -----------------------------------------------------------
    def users(self) -> list[str]:
        """The SCRAM users of the secured cluster: the admin, then the planned principals."""
        return [ADMIN_PRINCIPAL, *principals(LOCAL_SUBSCRIBERS)]

    def password_file(self, user: str) -> Path:
        return self.secrets_dir / f"{user}.password"

    def security(self, user: str = ADMIN_PRINCIPAL) -> KafkaSecurity:
        """How a client of ``user`` reaches this cluster (plaintext: nothing to say)."""
        if not self.settings.secured:
            return KafkaSecurity()
        try:
            password = self.password_file(user).read_text().strip()
        except FileNotFoundError:
            raise ConfigurationError(
                f"no password for {user} under {self.secrets_dir}: "
                "start the secured broker first (turnaudit broker start)"
            ) from None
        return KafkaSecurity(
            "sasl_ssl", KafkaCredentials(user, Secret(password)), self.ca_file
        )

    def client_env(self, user: str) -> dict[str, str]:
        """The ``TURNAUDIT_KAFKA_*`` variables a process of ``user`` needs (no password
        itself: the file that holds it)."""
        env = {"KAFKA_BOOTSTRAP_SERVERS": self.bootstrap_servers}
        if self.settings.secured:
            env |= {
                "TURNAUDIT_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
                "TURNAUDIT_KAFKA_USERNAME": user,
                "TURNAUDIT_KAFKA_PASSWORD_FILE": str(self.password_file(user)),
                "TURNAUDIT_KAFKA_CA_FILE": str(self.ca_file),
            }
        return env

    def _admin_config(self) -> dict[str, str]:
        return self.security().client_options()

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

    def _check_layout(self) -> None:
        """A folder formatted for another layout is not silently reused."""
        layout = self.home / LAYOUT_FILE
        if not layout.exists():
            formatted = (self.home / "data" / "meta.properties").exists() or any(
                (self.home / f"node-{i}" / "data" / "meta.properties").exists()
                for i in (1, 2, 3)
            )
            if formatted and (self.settings.nodes != 1 or self.settings.secured):
                raise ConfigurationError(
                    f"{self.home} holds a single-node plaintext broker: use another "
                    "TURNAUDIT_BROKER_HOME for this layout"
                )
            return
        saved = saved_layout(replace(self.settings, home=self.home))
        if (saved.nodes, saved.security) != (self.settings.nodes, self.settings.security):
            raise ConfigurationError(
                f"{self.home} holds a {saved.nodes}-node {saved.security} cluster, not "
                f"{self.settings.nodes}-node {self.settings.security}: use another "
                "TURNAUDIT_BROKER_HOME, or the same TURNAUDIT_BROKER_NODES and "
                "TURNAUDIT_BROKER_SECURITY"
            )

    def _write_layout(self) -> None:
        ports = self.settings.node_ports()
        (self.home / LAYOUT_FILE).write_text(
            json.dumps({
                "nodes": self.settings.nodes,
                "security": self.settings.security,
                "ports": [p for p, _ in ports],
                "controller_ports": [c for _, c in ports],
            })
        )

    def _write_config(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self._nodes)
        count = len(self._nodes)
        for node in self._nodes:
            node.folder.mkdir(parents=True, exist_ok=True)
            text = _SERVER_PROPERTIES.format(
                node_id=node.node_id,
                nodes=count,
                voters=voters,
                data_dir=node.data_dir,
                internal_rf=min(3, count),
                internal_isr=2 if count >= 3 else 1,
            )
            if self.settings.secured:
                text += _SECURED_LISTENERS.format(
                    port=node.port,
                    controller_port=node.controller_port,
                    admin=ADMIN_PRINCIPAL,
                    admin_password=self._password(ADMIN_PRINCIPAL),
                    keystore=self.tls_dir / "broker.p12",
                    truststore=self.tls_dir / "truststore.p12",
                    store_password=self._password("keystore"),
                )
            else:
                text += _PLAINTEXT_LISTENERS.format(
                    port=node.port, controller_port=node.controller_port
                )
            node.config_file.write_text(text)
            if self.settings.secured:
                node.config_file.chmod(0o600)  # it holds the admin's password
        self.log_config.write_text(_LOG4J2)
        self._write_layout()

    def _password(self, user: str) -> str:
        """The user's password, drawn once and kept in a file only its owner reads."""
        path = self.password_file(user)
        if path.exists():
            return path.read_text().strip()
        self.secrets_dir.mkdir(parents=True, exist_ok=True)
        self.secrets_dir.chmod(0o700)
        value = secrets.token_hex(24)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(value + "\n")
        return value

    def _ensure_tls(self) -> None:
        """A CA and a broker certificate (127.0.0.1, localhost) signed by it, made
        with keytool once; clients trust ``tls/ca.pem``."""
        if (self.tls_dir / "broker.p12").exists() and self.ca_file.exists():
            return
        keytool = require_tool(
            "keytool", "a Java 17+ runtime's keytool (apt-get install openjdk-17-jre-headless)"
        )
        self.tls_dir.mkdir(parents=True, exist_ok=True)
        self.tls_dir.chmod(0o700)
        store_password = self._password("keystore")
        ca_store = self.tls_dir / "ca.p12"
        broker_store = self.tls_dir / "broker.p12"
        csr = self.tls_dir / "broker.csr"
        broker_pem = self.tls_dir / "broker.pem"
        for stale in (ca_store, broker_store, csr, broker_pem, self.ca_file,
                      self.tls_dir / "truststore.p12"):
            stale.unlink(missing_ok=True)
        common = ["-storetype", "PKCS12", "-storepass", store_password, "-keypass", store_password]
        steps: list[list[str]] = [
            ["-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", "2048",
             "-dname", "CN=turnaudit local CA", "-ext", "bc:c", "-validity", "3650",
             "-keystore", str(ca_store), *common],
            ["-exportcert", "-rfc", "-alias", "ca", "-keystore", str(ca_store),
             "-file", str(self.ca_file), *common],
            ["-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048",
             "-dname", "CN=localhost", "-validity", "3650",
             "-keystore", str(broker_store), *common],
            ["-certreq", "-alias", "broker", "-keystore", str(broker_store),
             "-file", str(csr), *common],
            ["-gencert", "-alias", "ca", "-keystore", str(ca_store), "-infile", str(csr),
             "-outfile", str(broker_pem), "-rfc", "-validity", "3650",
             "-ext", "SAN=ip:127.0.0.1,dns:localhost",
             "-ext", "KU=digitalSignature,keyEncipherment",
             "-ext", "EKU=serverAuth,clientAuth", *common],
            ["-importcert", "-noprompt", "-alias", "ca", "-file", str(self.ca_file),
             "-keystore", str(broker_store), *common],
            ["-importcert", "-noprompt", "-alias", "broker", "-file", str(broker_pem),
             "-keystore", str(broker_store), *common],
            ["-importcert", "-noprompt", "-alias", "ca", "-file", str(self.ca_file),
             "-keystore", str(self.tls_dir / "truststore.p12"), *common],
        ]
        for step in steps:
            result = subprocess.run(
                [keytool, *step], capture_output=True, text=True, check=False
            )
            if result.returncode != 0:
                raise BrokerError(
                    f"keytool {step[0]} failed: {' '.join((result.stdout + result.stderr).split())}"
                )

    def _cluster_id(self) -> str:
        path = self.home / "cluster.id"
        if path.exists():
            return path.read_text().strip()
        cluster_id = "-"
        while cluster_id.startswith("-"):  # the storage tool would read it as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        path.write_text(cluster_id)
        return cluster_id

    def _format_storage_once(self) -> None:
        for node in self._nodes:
            if (node.data_dir / "meta.properties").exists():
                continue
            scram: list[str] = []
            if self.settings.secured:
                for user in self.users():
                    scram += [
                        "--add-scram",
                        f"SCRAM-SHA-512=[name={user},password={self._password(user)}]",
                    ]
            result = subprocess.run(
                [
                    self._java(),
                    "-cp",
                    self._classpath(),
                    f"-Dlog4j2.configurationFile={self.log_config}",
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    self._cluster_id(),
                    "-c",
                    str(node.config_file),
                    *scram,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if result.returncode != 0:
                raise BrokerError(
                    f"formatting Kafka storage failed: {result.stdout}{result.stderr}"
                )

    # -- lifecycle -----------------------------------------------------------
    def start(self, timeout: float = 90.0) -> BrokerStatus:
        status = self.status()
        if status.running and status.serving:
            return status
        self._check_layout()
        for node in self._nodes:
            if node.pid() is not None:
                continue
            for port in (node.port, node.controller_port):
                if _port_open(port):
                    raise BrokerError(f"port {port} on 127.0.0.1 is taken by another program")
        if self.settings.secured:
            self._ensure_tls()
        self._write_config()
        self._format_storage_once()
        procs = {
            node.node_id: self._launch(node) for node in self._nodes if node.pid() is None
        }
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node_id, proc in procs.items():
                if proc.poll() is not None:
                    node = self._node(node_id)
                    raise BrokerError(
                        f"broker node {node_id} exited with code {proc.returncode}; see "
                        f"{node.log_file}:\n" + node.log_tail()
                    )
            if all(_port_open(n.port) for n in self._nodes) and self._all_registered():
                return self.status()
            time.sleep(0.25)
        self.stop()
        raise BrokerError(
            f"the broker did not serve within {timeout:.0f}s; see {self._nodes[0].log_file}"
        )

    def _launch(self, node: _Node) -> subprocess.Popen[bytes]:
        with open(node.log_file, "ab") as log:
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
                    str(node.config_file),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # outlives the CLI that started it
            )
        node.pid_file.write_text(str(proc.pid))
        return proc

    def _all_registered(self) -> bool:
        wanted = set(self.node_ids)
        if len(wanted) == 1:
            return cluster_answers(self.bootstrap_servers, timeout=2, config=self._admin_config())
        return broker_ids(self.bootstrap_servers, 2, self._admin_config()) >= wanted

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every node at once (one by one, the last ones wait out a quorum
        already gone), then wait for each; SIGKILL what is left at ``timeout``."""
        for node in self._nodes:
            pid = node.pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in self._nodes:
            self._stop_node(node, signal.SIGTERM, max(0.0, deadline - time.monotonic()))

    def kill_node(self, node_id: int) -> int:
        """SIGKILL one node (a crash, for failover tests); return the pid it had."""
        node = self._node(node_id)
        pid = node.pid()
        if pid is None:
            raise BrokerError(f"node {node_id} is not running")
        self._stop_node(node, signal.SIGKILL, 10.0)
        return pid

    def stop_node(self, node_id: int, timeout: float = 30.0) -> None:
        self._stop_node(self._node(node_id), signal.SIGTERM, timeout)

    def start_node(self, node_id: int, timeout: float = 90.0) -> None:
        """Start one stopped node again and wait until the cluster names it."""
        node = self._node(node_id)
        if node.pid() is not None:
            return
        proc = self._launch(node)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BrokerError(
                    f"broker node {node_id} exited with code {proc.returncode}; see "
                    f"{node.log_file}:\n" + node.log_tail()
                )
            if _port_open(node.port) and node_id in broker_ids(
                node.bootstrap_servers, 2, self._admin_config()
            ):
                return
            time.sleep(0.25)
        raise BrokerError(f"node {node_id} did not rejoin within {timeout:.0f}s")

    def _stop_node(self, node: _Node, sig: signal.Signals, timeout: float) -> None:
        pid = node.pid()
        if pid is None:
            node.pid_file.unlink(missing_ok=True)  # none, or stale
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            node.pid_file.unlink(missing_ok=True)
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.05)
        node.pid_file.unlink(missing_ok=True)

    def node_status(self, node_id: int) -> NodeStatus:
        node = self._node(node_id)
        pid = node.pid()
        running = pid is not None and _alive(pid)
        serving = running and _port_open(node.port) and self._serves(node)
        return NodeStatus(node_id, running, pid if running else None, serving,
                          node.bootstrap_servers)

    def status(self) -> BrokerStatus:
        nodes = tuple(self.node_status(n.node_id) for n in self._nodes)
        return BrokerStatus(
            running=all(n.running for n in nodes),
            pid=nodes[0].pid,
            serving=all(n.serving for n in nodes),
            bootstrap_servers=self.bootstrap_servers,
            nodes=nodes,
            security=self.settings.security,
        )

    # -- helpers -------------------------------------------------------------
    def _node(self, node_id: int) -> _Node:
        for node in self._nodes:
            if node.node_id == node_id:
                return node
        raise ConfigurationError(
            f"no node {node_id}: the cluster has nodes {', '.join(map(str, self.node_ids))}"
        )

    def _pid(self) -> int | None:
        return self._nodes[0].pid()

    def _serves(self, node: _Node | None = None) -> bool:
        node = node or self._nodes[0]
        try:
            config = self._admin_config()
        except ConfigurationError:
            return False
        return cluster_answers(node.bootstrap_servers, timeout=2, config=config)

    def _log_tail(self, lines: int = 30) -> str:
        return self._nodes[0].log_tail(lines)


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
