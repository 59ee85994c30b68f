"""The local broker's default ports stay off the ports monitoring tools listen on, so
``make demo`` starts beside a running Prometheus, Alertmanager or Grafana."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnaudit.consumers.runtime.settings import DEFAULT_HTTP_PORTS
from turnaudit.errors import ConfigurationError
from turnaudit.local_broker import LocalBrokerSettings
from turnaudit.local_broker.settings import BROKER_NODE_COUNTS, NODE_PORT_STEP
from turnaudit.settings import MAX_PORT

# The default ports of monitoring tools a developer's machine runs (Prometheus's default
# port allocations for its own components and the common exporters, Grafana's stack, the
# OpenTelemetry Collector, Jaeger, Zipkin) and of docker-compose.yml's published ports.
WELL_KNOWN = {
    3000: "Grafana",
    3100: "Loki",
    3200: "Tempo",
    4317: "OTLP gRPC",
    4318: "OTLP HTTP",
    8888: "OpenTelemetry Collector metrics",
    9090: "Prometheus",
    9091: "Pushgateway",
    9093: "Alertmanager",
    9094: "Alertmanager cluster (and compose's Kafka host listener)",
    9095: "compose's alert webhook",
    9100: "node exporter",
    9101: "HAProxy exporter",
    9102: "StatsD exporter",
    9104: "MySQL exporter",
    9115: "blackbox exporter",
    9187: "PostgreSQL exporter",
    9308: "Kafka exporter",
    9411: "Zipkin",
    13133: "OpenTelemetry Collector health",
    14268: "Jaeger collector",
    16686: "Jaeger UI",
}


def default_ports(nodes: int) -> list[int]:
    """Every port the local broker listens on by default, as the CLI reads its settings."""
    settings = LocalBrokerSettings.from_env({"TURNAUDIT_BROKER_NODES": str(nodes)})
    assert settings == LocalBrokerSettings(nodes=nodes)  # the env defaults are the class's
    return [port for pair in settings.node_ports() for port in pair]


@pytest.mark.parametrize("nodes", BROKER_NODE_COUNTS)
def test_no_default_port_is_a_monitoring_tools_or_a_services(nodes: int) -> None:
    ports = default_ports(nodes)
    assert len(set(ports)) == 2 * nodes
    taken = {port: WELL_KNOWN[port] for port in ports if port in WELL_KNOWN}
    assert taken == {}
    assert not set(ports) & set(DEFAULT_HTTP_PORTS.values())  # this project's own services


def test_the_client_port_is_kafkas_own_and_the_controller_is_off_alertmanagers() -> None:
    assert LocalBrokerSettings().bootstrap_servers == "127.0.0.1:9092"
    assert LocalBrokerSettings().node_ports() == [(9092, 19093)]
    assert default_ports(3) == [9092, 19093, 10092, 20093, 11092, 21093]


@given(
    port=st.integers(1, MAX_PORT - 2 * NODE_PORT_STEP),
    controller=st.integers(1, MAX_PORT - 2 * NODE_PORT_STEP),
)
def test_three_nodes_step_both_ports_by_the_node_step(port: int, controller: int) -> None:
    settings = LocalBrokerSettings(port=port, controller_port=controller, nodes=3)
    assert settings.node_ports() == [
        (port + NODE_PORT_STEP * i, controller + NODE_PORT_STEP * i) for i in range(3)
    ]


@pytest.mark.parametrize("setting", ["TURNAUDIT_BROKER_PORT", "TURNAUDIT_BROKER_CONTROLLER_PORT"])
@given(first=st.integers(MAX_PORT - 2 * NODE_PORT_STEP + 1, MAX_PORT))
def test_a_third_node_past_the_last_port_is_one_line(setting: str, first: int) -> None:
    with pytest.raises(ConfigurationError, match=rf"{setting}={first}: node 3 would listen on"):
        LocalBrokerSettings.from_env({"TURNAUDIT_BROKER_NODES": "3", setting: str(first)})
    # Named ports per node are taken as given; one node needs no room above its port.
    assert LocalBrokerSettings.from_env({setting: str(first)}).nodes == 1
