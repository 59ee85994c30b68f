"""The local cluster's lifecycle: start every node and wait until the cluster serves,
stop by its own pids, kill or restart one node, report status; and how a client of
each principal reaches it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from turnaudit.errors import BrokerError, ConfigurationError
from turnaudit.kafka import acls
from turnaudit.kafka.acls import ADMIN_PRINCIPAL
from turnaudit.kafka.topics import broker_ids, cluster_answers
from turnaudit.local_broker import credentials, jvm
from turnaudit.local_broker.config import check_layout, write_config
from turnaudit.local_broker.nodes import Node, alive, port_open
from turnaudit.local_broker.settings import LocalBrokerSettings
from turnaudit.local_broker.status import BrokerStatus, NodeStatus
from turnaudit.settings import KafkaCredentials, KafkaSecurity, Secret


class LocalKafkaBroker:
    """Formats storage once, starts, waits until it serves, stops by its own pids."""

    def __init__(self, settings: LocalBrokerSettings) -> None:
        self.settings = settings
        self.home = settings.home.resolve()
        single = settings.nodes == 1
        self._nodes = [
            Node(i + 1, self.home if single else self.home / f"node-{i + 1}", port, cport)
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
        return credentials.users()

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
        return KafkaSecurity("sasl_ssl", KafkaCredentials(user, Secret(password)), self.ca_file)

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
        return jvm.ensure_jars(self.settings)

    def _classpath(self) -> str:
        return str(self.ensure_jars() / "*")

    def _password(self, user: str) -> str:
        return credentials.password(self.secrets_dir, user)

    def _format_storage_once(self) -> None:
        for node in self._nodes:
            if (node.data_dir / "meta.properties").exists():
                continue
            # The admin's credential is in the metadata from the start: brokers
            # authenticate to each other with it, and it adds every other user
            # (``_ensure_users``). Its password goes through a file, never argv.
            scram: list[str] = []
            if self.settings.secured:
                admin = ADMIN_PRINCIPAL
                scram = [
                    "--add-scram",
                    f"SCRAM-SHA-512=[name={admin},password={self._password(admin)}]",
                ]
            jvm.format_storage(
                node, self._classpath(), self.log_config, jvm.cluster_id(self.home), scram
            )

    def _ensure_users(self) -> None:
        """Every planned principal's SCRAM credential, added by the admin through the
        AdminClient once the cluster serves (passwords travel in the request, over
        TLS). Asked at every start: a principal the plan gained since the folder was
        formatted gets one too; one the cluster holds is left as it is."""
        config = {**self._admin_config(), "bootstrap.servers": self.bootstrap_servers}
        users = self.users()[1:]
        missing = set(users) - acls.known_users(config, users)
        if missing:
            acls.upsert_users(config, {user: self._password(user) for user in sorted(missing)})
            acls.await_users(config, missing)

    def _owner_only(self) -> None:
        """The cluster's folders are the owner's alone (a folder made by an older
        version, 0755, too): its segments hold what turns said, its config the
        admin's password. The nodes' own files are 0600 by their umask."""
        self.home.mkdir(parents=True, exist_ok=True)
        for folder in {self.home, *(n.folder for n in self._nodes)}:
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o700)
        for node in self._nodes:
            if node.data_dir.exists():
                node.data_dir.chmod(0o700)

    # -- lifecycle -----------------------------------------------------------
    def start(self, timeout: float = 90.0) -> BrokerStatus:
        status = self.status()
        if status.running and status.serving:
            if self.settings.secured:
                self._ensure_users()
            return status
        check_layout(self.settings, self.home)
        for node in self._nodes:
            if node.pid() is not None:
                continue
            for port in (node.port, node.controller_port):
                if port_open(port):
                    raise BrokerError(f"port {port} on 127.0.0.1 is taken by another program")
        self._owner_only()
        if self.settings.secured:
            self._password("keystore")  # drawn into its file, which keytool reads
            credentials.ensure_tls(self.tls_dir, self.ca_file, self.password_file("keystore"))
        write_config(self.settings, self.home, self._nodes, self._password)
        self._format_storage_once()
        procs = {node.node_id: self._launch(node) for node in self._nodes if node.pid() is None}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node_id, proc in procs.items():
                if proc.poll() is not None:
                    node = self._node(node_id)
                    raise BrokerError(
                        f"broker node {node_id} exited with code {proc.returncode}; see "
                        f"{node.log_file}:\n" + node.log_tail()
                    )
            if all(port_open(n.port) for n in self._nodes) and self._all_registered():
                if self.settings.secured:
                    self._ensure_users()
                return self.status()
            time.sleep(0.25)
        self.stop()
        raise BrokerError(
            f"the broker did not serve within {timeout:.0f}s; see {self._nodes[0].log_file}"
        )

    def _launch(self, node: Node) -> subprocess.Popen[bytes]:
        return jvm.launch(node, self.settings.heap, self._classpath(), self.log_config)

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
            if port_open(node.port) and node_id in broker_ids(
                node.bootstrap_servers, 2, self._admin_config()
            ):
                return
            time.sleep(0.25)
        raise BrokerError(f"node {node_id} did not rejoin within {timeout:.0f}s")

    def _stop_node(self, node: Node, sig: signal.Signals, timeout: float) -> None:
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
        while time.monotonic() < deadline and alive(pid):
            time.sleep(0.05)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
            while alive(pid):
                time.sleep(0.05)
        node.pid_file.unlink(missing_ok=True)

    def node_status(self, node_id: int) -> NodeStatus:
        node = self._node(node_id)
        pid = node.pid()
        running = pid is not None and alive(pid)
        serving = running and port_open(node.port) and self._serves(node)
        return NodeStatus(
            node_id, running, pid if running else None, serving, node.bootstrap_servers
        )

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
    def _node(self, node_id: int) -> Node:
        for node in self._nodes:
            if node.node_id == node_id:
                return node
        raise ConfigurationError(
            f"no node {node_id}: the cluster has nodes {', '.join(map(str, self.node_ids))}"
        )

    def _pid(self) -> int | None:
        return self._nodes[0].pid()

    def _serves(self, node: Node | None = None) -> bool:
        node = node or self._nodes[0]
        try:
            config = self._admin_config()
        except ConfigurationError:
            return False
        return cluster_answers(node.bootstrap_servers, timeout=2, config=config)

    def _log_tail(self, lines: int = 30) -> str:
        return self._nodes[0].log_tail(lines)
