"""docker-compose.yml's optional OpenTelemetry profile against deploy/otelcol/: the collector
image is the release the tests build, fed the same configuration, where the sink exports."""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

import yaml

from tests.support import PROJECT_ROOT
from turnaudit.cli import build_parser
from turnaudit.consumers.runtime.otel_settings import OtlpProtocol
from turnaudit.consumers.runtime.settings import ServiceName, ServiceSettings

COMPOSE = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())
CONFIG_TEXT = (PROJECT_ROOT / "deploy/otelcol/config.yaml").read_text()
CONFIG = yaml.safe_load(CONFIG_TEXT)
GO_MOD = (PROJECT_ROOT / "deploy/otelcol/go.mod").read_text()


def service(name: str) -> dict[str, Any]:
    found: dict[str, Any] = COMPOSE["services"][name]
    return found


def default_port(protocol: str) -> int:
    """The port the collector's configuration listens on by default for OTLP ``protocol``."""
    endpoint = CONFIG["receivers"]["otlp"]["protocols"][protocol]["endpoint"]
    match = re.fullmatch(r"\$\{env:\w+:-[\d.]+:(\d+)\}", endpoint)
    assert match, endpoint
    return int(match.group(1))


def test_both_parts_are_an_option_of_the_otel_profile() -> None:
    assert service("otel-sink")["profiles"] == ["otel"]
    assert service("otel-collector")["profiles"] == ["otel"]
    args = build_parser().parse_args(service("otel-sink")["command"])
    assert args.service == "otel"
    assert callable(args.handler)


def test_the_collector_image_is_the_release_the_tests_build() -> None:
    built = re.search(r"go\.opentelemetry\.io/collector/otelcol v(\S+)", GO_MOD)
    assert built
    assert service("otel-collector")["image"] == (
        f"otel/opentelemetry-collector-contrib:{built.group(1)}"
    )
    version = re.search(
        r'Version:\s+"([^"]+)"', (PROJECT_ROOT / "deploy/otelcol/main.go").read_text()
    )
    assert version
    assert version.group(1) == built.group(1)


def test_the_collector_runs_the_tests_configuration_and_the_sink_reaches_it() -> None:
    collector = service("otel-collector")
    assert "./deploy/otelcol/config.yaml:/etc/otelcol/config.yaml:ro" in collector["volumes"]
    assert "--config=/etc/otelcol/config.yaml" in collector["command"]
    settings = ServiceSettings.from_env(ServiceName.OTEL_SINK, service("otel-sink")["environment"])
    target = urllib.parse.urlsplit(settings.otlp.endpoint)
    assert target.hostname == "otel-collector"
    assert target.port == default_port(settings.otlp.protocol.value)
    for protocol in OtlpProtocol:
        assert (
            f"{default_port(protocol.value)}:{default_port(protocol.value)}" in (collector["ports"])
        )


def test_the_collector_configuration_writes_every_log_record_and_keeps_its_port_closed() -> None:
    (pipeline,) = CONFIG["service"]["pipelines"].values()
    assert pipeline["receivers"] == ["otlp"]
    assert set(pipeline["exporters"]) == {"file", "debug"}
    assert list(CONFIG["service"]["pipelines"]) == ["logs"]
    assert CONFIG["service"]["telemetry"]["metrics"]["level"] == "none"
    assert "OTELCOL_FILE" in CONFIG_TEXT
