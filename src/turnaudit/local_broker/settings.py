"""The local broker's settings: nodes, security, folders and ports, from ``TURNAUDIT_BROKER_*``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from turnaudit.errors import ConfigurationError
from turnaudit.settings import ENV_PREFIX, MAX_PORT, _int

BROKER_SECURITY = ("plaintext", "sasl_ssl")
BROKER_NODE_COUNTS = (1, 3)
# The local broker's default ports, off the ones monitoring tools take on the same machine
# (Prometheus 9090, Pushgateway 9091, Alertmanager 9093 and its cluster port 9094, the
# exporters from 9100, Grafana 3000, the compose Kafka's host port 9094): the client port is
# Kafka's own 9092, the controller Kafka's usual 9093 moved up by 10000. Node i of a
# three-node cluster adds NODE_PORT_STEP * (i - 1) to both.
BROKER_PORT = 9092
BROKER_CONTROLLER_PORT = 19093
NODE_PORT_STEP = 1000


@dataclass(frozen=True)
class LocalBrokerSettings:
    """The project-local KRaft broker used by the demo and the tests.

    One node by default; ``nodes=3``: three combined broker+controller nodes on
    loopback, node ``i`` on ``port + 1000(i-1)`` and ``controller_port + 1000(i-1)``
    unless ``ports``/``controller_ports`` name them. ``security="sasl_ssl"``:
    SASL/SCRAM-SHA-512 over TLS, certificates made with keytool at start,
    credentials added at format time, the StandardAuthorizer with ``admin`` as
    its super user.
    """

    home: Path = Path("var/kafka")  # data, config, logs and pid file
    jars_dir: Path = Path("deploy/kafka/target/jars")
    pom: Path = Path("deploy/kafka/pom.xml")
    port: int = BROKER_PORT
    controller_port: int = BROKER_CONTROLLER_PORT
    heap: str = "768m"
    nodes: int = 1
    security: str = "plaintext"
    ports: tuple[int, ...] = ()  # per node; empty: derived from port
    controller_ports: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.nodes not in BROKER_NODE_COUNTS:
            raise ConfigurationError(
                f"{ENV_PREFIX}BROKER_NODES={self.nodes}: choose 1 or 3 (a KRaft quorum)"
            )
        if self.security not in BROKER_SECURITY:
            raise ConfigurationError(
                f"{ENV_PREFIX}BROKER_SECURITY={self.security!r}: choose plaintext or sasl_ssl"
            )
        for name, given in (("PORTS", self.ports), ("CONTROLLER_PORTS", self.controller_ports)):
            if given and len(given) != self.nodes:
                raise ConfigurationError(
                    f"{ENV_PREFIX}BROKER_{name} names {len(given)} ports for {self.nodes} nodes"
                )
        for name, first, given in (
            ("PORT", self.port, self.ports),
            ("CONTROLLER_PORT", self.controller_port, self.controller_ports),
        ):
            last = first + NODE_PORT_STEP * (self.nodes - 1)
            if not given and last > MAX_PORT:
                raise ConfigurationError(
                    f"{ENV_PREFIX}BROKER_{name}={first}: node {self.nodes} would listen on {last},"
                    f" above {MAX_PORT}: choose a lower port or name each node's in "
                    f"{ENV_PREFIX}BROKER_{name}S"
                )

    @property
    def secured(self) -> bool:
        return self.security == "sasl_ssl"

    def node_ports(self) -> list[tuple[int, int]]:
        """(client port, controller port) of each node, node 1 first."""
        ports = self.ports or tuple(self.port + NODE_PORT_STEP * i for i in range(self.nodes))
        controllers = self.controller_ports or tuple(
            self.controller_port + NODE_PORT_STEP * i for i in range(self.nodes)
        )
        return list(zip(ports, controllers, strict=True))

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port, _ in self.node_ports())

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LocalBrokerSettings:
        env = os.environ if env is None else env
        root = Path(env.get(ENV_PREFIX + "PROJECT_DIR", "."))
        return cls(
            home=Path(env.get(ENV_PREFIX + "BROKER_HOME", root / "var" / "kafka")),
            jars_dir=Path(env.get(ENV_PREFIX + "BROKER_JARS", root / "deploy/kafka/target/jars")),
            pom=root / "deploy/kafka/pom.xml",
            port=_int(env, "BROKER_PORT", BROKER_PORT, minimum=1, maximum=MAX_PORT),
            controller_port=_int(
                env, "BROKER_CONTROLLER_PORT", BROKER_CONTROLLER_PORT, minimum=1, maximum=MAX_PORT
            ),
            heap=env.get(ENV_PREFIX + "BROKER_HEAP", "768m"),
            nodes=_int(env, "BROKER_NODES", 1, minimum=1),
            security=env.get(ENV_PREFIX + "BROKER_SECURITY", "plaintext").strip().lower()
            or "plaintext",
            ports=_ports(env, "BROKER_PORTS"),
            controller_ports=_ports(env, "BROKER_CONTROLLER_PORTS"),
        )


def _ports(env: Mapping[str, str], name: str) -> tuple[int, ...]:
    raw = env.get(ENV_PREFIX + name, "").strip()
    if not raw:
        return ()
    ports = []
    for part in raw.split(","):
        try:
            port = int(part)
        except ValueError:
            raise ConfigurationError(
                f"{ENV_PREFIX}{name}={raw!r}: give comma-separated port numbers"
            ) from None
        if not 1 <= port <= MAX_PORT:
            raise ConfigurationError(f"{ENV_PREFIX}{name}={raw!r}: {port} is not a port")
        ports.append(port)
    return tuple(ports)
