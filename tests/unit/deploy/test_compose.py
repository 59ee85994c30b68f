"""docker-compose.yml: every command it runs exists, every variable it sets is read."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.support import PROJECT_ROOT
from turnaudit.archive.settings import ArchiveSettings
from turnaudit.cli import build_parser
from turnaudit.consumers.runtime.settings import DEFAULT_HTTP_PORTS, ServiceName, ServiceSettings
from turnaudit.errors import ConfigurationError
from turnaudit.evaluation.labels import load_task_labels
from turnaudit.local_registry import LocalRegistrySettings, LocalSchemaRegistry
from turnaudit.local_registry.java import JavaRuntime
from turnaudit.settings import BOOTSTRAP_ENV, KafkaSettings
from turnaudit.signing_keys import KEY_ID_ENV, CheckpointSettings

COMPOSE = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())


class RecordingEnv(dict[str, str]):
    """An environment that remembers every name looked up in it."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)


def names_the_settings_read() -> set[str]:
    env = RecordingEnv()
    for service in ServiceName:
        ServiceSettings.from_env(service, env)
    CheckpointSettings.from_env(env)  # the simulator's checkpoint settings
    with contextlib.suppress(ConfigurationError):  # every name read before any is judged
        ArchiveSettings.from_env(env)
    # The key's id is read only beside a key file (a file needs its id).
    return env.read | {KEY_ID_ENV}


def our_services() -> Iterator[tuple[str, dict[str, Any]]]:
    """The services that run the turnaudit image's own command."""
    for name, service in COMPOSE["services"].items():
        if service.get("build") == "." and "entrypoint" not in service:
            yield name, service


# What each long-running service of the one list runs: (command, action) of the CLI.
SERVICE_COMMANDS = {
    ServiceName.LOG_SINK: ("sink", "logs"),
    ServiceName.VERDICT_METRICS: ("sink", "metrics"),
    ServiceName.HTIR_FEEDER: ("htir", "feed"),
    ServiceName.AUDITOR_WORKER: ("auditor", "run"),
    ServiceName.VERIFY_FOLLOW: ("verify", "follow"),
    ServiceName.OTEL_SINK: ("sink", "otel"),
    ServiceName.ARCHIVE: ("archive", "run"),
}


def test_the_system_has_every_part() -> None:
    services = COMPOSE["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert services["prometheus"]["image"].startswith("prom/prometheus")
    assert services["grafana"]["image"].startswith("grafana/grafana")
    commands = {tuple(s["command"][-2:]) for _, s in our_services()}
    assert {("sink", "logs"), ("sink", "metrics"), ("--idle-timeout", "300")} <= commands
    assert any(s["command"][2:4] == ["auditor", "run"] for _, s in our_services())
    assert (PROJECT_ROOT / "Dockerfile").exists()
    assert 'ENTRYPOINT ["turnaudit"]' in (PROJECT_ROOT / "Dockerfile").read_text()


def test_every_service_of_the_list_runs_its_own_command() -> None:
    """Compose runs each service of the one list under its name, with its command."""
    for service, (command, action) in SERVICE_COMMANDS.items():
        args = build_parser().parse_args(COMPOSE["services"][service.value]["command"])
        assert args.command == command, service
        assert args.handler.__module__ == f"turnaudit.commands.{command}", service
        if action == "follow":
            assert args.follow is True
            assert args.keyring is not None  # the simulator signs: the follower judges trust
        else:
            assert args.handler.__name__ == f"_{action}", service
    assert set(SERVICE_COMMANDS) == set(ServiceName)


@pytest.mark.parametrize(("name", "service"), list(our_services()))
def test_every_environment_name_is_one_the_settings_read(
    name: str, service: dict[str, Any]
) -> None:
    read = names_the_settings_read()
    assert BOOTSTRAP_ENV in read
    assert set(service["environment"]) <= read, (name, set(service["environment"]) - read)


def test_compose_runs_the_kafka_version_the_local_broker_uses() -> None:
    pom = (PROJECT_ROOT / "deploy/kafka/pom.xml").read_text()
    version = pom.split("<kafka.version>")[1].split("</kafka.version>")[0]
    assert COMPOSE["services"]["kafka"]["image"] == f"apache/kafka:{version}"


def test_prometheus_scrapes_the_ports_the_services_listen_on() -> None:
    config = yaml.safe_load((PROJECT_ROOT / "deploy/prometheus/prometheus.yml").read_text())
    targets = {
        target
        for job in config["scrape_configs"]
        for static in job.get("static_configs", [])
        for target in static["targets"]
    }
    for name, service in our_services():
        port = service["environment"].get("TURNAUDIT_HTTP_PORT")
        if port is not None:
            assert f"{name}:{port}" in targets
    assert "./deploy/prometheus:/etc/prometheus:ro" in COMPOSE["services"]["prometheus"]["volumes"]


def test_the_alert_webhook_runs_the_example_receiver() -> None:
    receiver = COMPOSE["services"]["alert-webhook"]["command"]
    assert "/etc/alertmanager/webhook_receiver.py" in receiver


def test_kafka_is_advertised_to_the_host_too() -> None:
    kafka = COMPOSE["services"]["kafka"]
    env = kafka["environment"]
    advertised = dict(
        entry.split("://", 1) for entry in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    )
    assert advertised["PLAINTEXT"] == "kafka:9092"  # the services inside compose
    host_port = advertised["HOST"].rsplit(":", 1)[1]
    assert advertised["HOST"] == f"localhost:{host_port}"
    assert f"{host_port}:{host_port}" in kafka["ports"]
    assert f"HOST://:{host_port}" in env["KAFKA_LISTENERS"].split(",")
    assert "HOST:PLAINTEXT" in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "PLAINTEXT"


def test_the_compose_simulator_stamps_real_time() -> None:
    args = build_parser().parse_args(COMPOSE["services"]["simulator"]["command"])
    assert args.real_time is True


def test_the_auditor_worker_runs_on_the_label_pack_compose_mounts() -> None:
    worker = COMPOSE["services"]["auditor-worker"]
    args = build_parser().parse_args(worker["command"])
    mounts = dict(v.split(":")[:2][::-1] for v in worker["volumes"] if v.startswith("./"))
    host = mounts[str(args.labels.parent)]
    assert load_task_labels(PROJECT_ROOT / host / args.labels.name) == {}
    assert worker["environment"]["TURNAUDIT_HTTP_PORT"] == str(
        DEFAULT_HTTP_PORTS[ServiceName.AUDITOR_WORKER]
    )


def test_the_runtime_job_is_scraped_from_target_files() -> None:
    config = yaml.safe_load((PROJECT_ROOT / "deploy/prometheus/prometheus.yml").read_text())
    (runtime,) = [j for j in config["scrape_configs"] if j["job_name"] == "turn-runtime"]
    assert runtime["file_sd_configs"][0]["files"] == ["/etc/prometheus/runtimes/*.json"]
    # Compose's simulator serves its runtime metrics, and its target file names that port.
    command = COMPOSE["services"]["simulator"]["command"]
    port = command[command.index("--metrics-port") + 1]
    assert command[command.index("--metrics-host") + 1] == "0.0.0.0"  # noqa: S104 - in its container
    targets = json.loads((PROJECT_ROOT / "deploy/prometheus/runtimes/compose.json").read_text())
    assert [t["targets"] for t in targets] == [[f"simulator:{port}"]]


def test_the_registry_profile_puts_every_service_in_registry_mode() -> None:
    registry = COMPOSE["services"]["registry"]
    assert registry["profiles"] == ["registry"]
    assert registry["build"] == "./deploy/registry"
    # The API on the host's loopback only, the container's port the services name.
    (published,) = registry["ports"]
    host, host_port, container_port = published.split(":")
    assert host == "127.0.0.1"
    documented = "http://registry:8080/apis/ccompat/v7"
    assert (
        f"TURNAUDIT_SCHEMA_REGISTRY_URL={documented}"
        in (PROJECT_ROOT / "docker-compose.yml").read_text()
    )
    assert documented.split(":")[2].split("/", maxsplit=1)[0] == container_port
    assert host_port == str(LocalRegistrySettings().port)
    # Every turnaudit service takes the registry URL from the host (empty: no registry).
    for name, service in our_services():
        assert service["environment"]["TURNAUDIT_SCHEMA_REGISTRY_URL"] == (
            "${TURNAUDIT_SCHEMA_REGISTRY_URL:-}"
        ), name
    assert KafkaSettings.from_env({"TURNAUDIT_SCHEMA_REGISTRY_URL": ""}).schema_registry_url is None


def test_the_registry_image_runs_the_resolved_server_as_turnaudit_registry_does() -> None:
    dockerfile = (PROJECT_ROOT / "deploy/registry/Dockerfile").read_text()
    assert "COPY target/server/ /opt/registry/" in dockerfile
    ignored = (PROJECT_ROOT / "deploy/registry/.dockerignore").read_text().split()
    assert ignored[-2:] == ["*", "!target/server/"]  # not the Java runtime make may fetch
    entry = json.loads(
        "".join(line.rstrip("\\") for line in dockerfile.split("ENTRYPOINT ", 1)[1].splitlines())
    )
    local = LocalSchemaRegistry(LocalRegistrySettings()).command(
        JavaRuntime(PROJECT_ROOT, 21, "PATH")
    )

    def options(command: list[str]) -> dict[str, str]:
        return dict(a[2:].split("=", 1) for a in command if a.startswith("-D"))

    image, here = options(entry), options(local)
    assert set(image) == set(here)  # the same settings, none forgotten on either side
    differ = {k for k in here if image[k] != here[k]}
    # Only where it listens and where its database is differ: the container's interfaces
    # and ports, the volume.
    assert differ == {
        "quarkus.http.host",
        "quarkus.http.port",
        "quarkus.management.host",
        "quarkus.management.port",
        "apicurio.datasource.url",
    }
    # The same JVM: heap and collector as the local registry's defaults.
    assert [a for a in entry if a.startswith("-X")] == [a for a in local if a.startswith("-X")]
    assert entry[-2:] == ["-jar", "/opt/registry/quarkus-run.jar"]
