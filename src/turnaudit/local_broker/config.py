"""The files a node reads: its ``server.properties`` (plaintext or SASL_SSL listeners),
the log4j2 config, and ``layout.json``, the node count, security and ports a folder was
started with."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from turnaudit.errors import ConfigurationError
from turnaudit.kafka.acls import ADMIN_PRINCIPAL
from turnaudit.local_broker.nodes import Node
from turnaudit.local_broker.settings import LocalBrokerSettings

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


def check_layout(settings: LocalBrokerSettings, home: Path) -> None:
    """A folder formatted for another layout is not silently reused."""
    layout = home / LAYOUT_FILE
    if not layout.exists():
        formatted = (home / "data" / "meta.properties").exists() or any(
            (home / f"node-{i}" / "data" / "meta.properties").exists() for i in (1, 2, 3)
        )
        if formatted and (settings.nodes != 1 or settings.secured):
            raise ConfigurationError(
                f"{home} holds a single-node plaintext broker: use another "
                "TURNAUDIT_BROKER_HOME for this layout"
            )
        return
    saved = saved_layout(replace(settings, home=home))
    if (saved.nodes, saved.security) != (settings.nodes, settings.security):
        raise ConfigurationError(
            f"{home} holds a {saved.nodes}-node {saved.security} cluster, not "
            f"{settings.nodes}-node {settings.security}: use another "
            "TURNAUDIT_BROKER_HOME, or the same TURNAUDIT_BROKER_NODES and "
            "TURNAUDIT_BROKER_SECURITY"
        )


def write_layout(settings: LocalBrokerSettings, home: Path) -> None:
    ports = settings.node_ports()
    (home / LAYOUT_FILE).write_text(
        json.dumps(
            {
                "nodes": settings.nodes,
                "security": settings.security,
                "ports": [p for p, _ in ports],
                "controller_ports": [c for _, c in ports],
            }
        )
    )


def write_config(
    settings: LocalBrokerSettings,
    home: Path,
    nodes: Sequence[Node],
    password: Callable[[str], str],
) -> None:
    """Every node's ``server.properties``, the log4j2 config and the layout;
    ``password(user)`` gives a drawn password (secured clusters only)."""
    home.mkdir(parents=True, exist_ok=True)
    tls_dir = home / "tls"
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)
    count = len(nodes)
    for node in nodes:
        node.folder.mkdir(parents=True, exist_ok=True)
        text = _SERVER_PROPERTIES.format(
            node_id=node.node_id,
            nodes=count,
            voters=voters,
            data_dir=node.data_dir,
            internal_rf=min(3, count),
            internal_isr=2 if count >= 3 else 1,
        )
        if settings.secured:
            text += _SECURED_LISTENERS.format(
                port=node.port,
                controller_port=node.controller_port,
                admin=ADMIN_PRINCIPAL,
                admin_password=password(ADMIN_PRINCIPAL),
                keystore=tls_dir / "broker.p12",
                truststore=tls_dir / "truststore.p12",
                store_password=password("keystore"),
            )
        else:
            text += _PLAINTEXT_LISTENERS.format(
                port=node.port, controller_port=node.controller_port
            )
        node.config_file.write_text(text)
        if settings.secured:
            node.config_file.chmod(0o600)  # it holds the admin's password
    (home / "log4j2.yaml").write_text(_LOG4J2)
    write_layout(settings, home)
