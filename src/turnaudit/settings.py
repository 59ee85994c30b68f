"""Settings, built once at a service's entry point and passed down.

Every name is read from the environment with the ``TURNAUDIT_`` prefix, except
``KAFKA_BOOTSTRAP_SERVERS``, the name Kafka tooling already uses. librdkafka
options pass through untouched in ``TURNAUDIT_KAFKA_OPTIONS`` (a JSON object).
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from turnaudit.errors import ConfigurationError
from turnaudit.serialization.registry import auto_register_from_env, registry_options_from_env

ENV_PREFIX = "TURNAUDIT_"
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
DEFAULT_TOPIC_PREFIX = "turn-audit."
HOUR_MS = 3_600_000
MAX_PORT = 65_535

# librdkafka's own log lines (connection refused, retries, ...) go to this
# logger, never straight to stderr: silent unless an application (or the CLI
# at --log-level DEBUG) gives it a handler. Errors that matter reach the user
# through the project's own messages instead.
LIBRDKAFKA_LOGGER = logging.getLogger("turnaudit.librdkafka")
LIBRDKAFKA_LOGGER.addHandler(logging.NullHandler())
LIBRDKAFKA_LOGGER.propagate = False


@dataclass(frozen=True)
class TopicNames:
    """The project's topics, all under one prefix."""

    prefix: str = DEFAULT_TOPIC_PREFIX

    @property
    def turn_events(self) -> str:
        return f"{self.prefix}turn-events"

    @property
    def schemas(self) -> str:
        return f"{self.prefix}schemas"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}dlq"

    @property
    def htir_traces(self) -> str:
        return f"{self.prefix}htir-traces"

    @property
    def auditor_observations(self) -> str:
        return f"{self.prefix}auditor-observations"


@dataclass(frozen=True)
class KafkaSettings:
    """Where the cluster is, how topics are named and laid out, client options."""

    bootstrap_servers: str | None = None  # None: use the project's local broker
    topics: TopicNames = field(default_factory=TopicNames)
    schema_registry_url: str | None = None
    # Registry client options (credentials, TLS) and whether the publisher may
    # register schemas: turnaudit.serialization.registry reads them.
    schema_registry_options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    schema_registry_auto_register: bool = True
    client_options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    partitions: int = 6
    replication_factor: int = 1
    # Turn events must outlive the longest replay window the users need.
    turn_events_retention_ms: int = 30 * 24 * HOUR_MS
    dlq_retention_ms: int = 30 * 24 * HOUR_MS
    # How long a command waits for the cluster to answer before saying it cannot.
    connect_timeout_s: float = 10.0

    def with_bootstrap(self, bootstrap_servers: str) -> KafkaSettings:
        return replace(self, bootstrap_servers=bootstrap_servers)

    def client_config(self, *defaults: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
        """librdkafka configuration: the caller's ``defaults``, then the user's
        passthrough options, then what the caller must fix (``overrides``)."""
        if not self.bootstrap_servers:
            raise ConfigurationError(
                f"no Kafka cluster: set {BOOTSTRAP_ENV} or start the local broker "
                "(turnaudit broker start)"
            )
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": LIBRDKAFKA_LOGGER,
        }
        for layer in defaults:
            config.update(layer)
        return {**config, **self.client_options, **overrides}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KafkaSettings:
        env = os.environ if env is None else env
        options_text = env.get(ENV_PREFIX + "KAFKA_OPTIONS", "").strip()
        try:
            options = json.loads(options_text) if options_text else {}
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f"{ENV_PREFIX}KAFKA_OPTIONS is not a JSON object of librdkafka options: {exc}"
            ) from exc
        if not isinstance(options, dict):
            raise ConfigurationError(f"{ENV_PREFIX}KAFKA_OPTIONS must be a JSON object")
        client_options = {str(k): str(v) for k, v in options.items()}
        # librdkafka judges them, through the one producer wrapper (imported
        # here: turnaudit.kafka builds on these settings).
        from turnaudit.kafka.producer import check_client_options  # noqa: PLC0415

        check_client_options(client_options, f"{ENV_PREFIX}KAFKA_OPTIONS")
        return cls(
            bootstrap_servers=env.get(BOOTSTRAP_ENV) or None,
            topics=TopicNames(env.get(ENV_PREFIX + "TOPIC_PREFIX", DEFAULT_TOPIC_PREFIX)),
            schema_registry_url=env.get(ENV_PREFIX + "SCHEMA_REGISTRY_URL") or None,
            schema_registry_options=MappingProxyType(registry_options_from_env(env)),
            schema_registry_auto_register=auto_register_from_env(env),
            client_options=MappingProxyType(client_options),
            partitions=_int(env, "TOPIC_PARTITIONS", 6, minimum=1),
            replication_factor=_int(env, "TOPIC_REPLICATION_FACTOR", 1, minimum=1),
            turn_events_retention_ms=_int(env, "TURN_EVENTS_RETENTION_HOURS", 30 * 24, minimum=1)
            * HOUR_MS,
            dlq_retention_ms=_int(env, "DLQ_RETENTION_HOURS", 30 * 24, minimum=1) * HOUR_MS,
            connect_timeout_s=_int(env, "CONNECT_TIMEOUT_S", 10, minimum=1),
        )


@dataclass(frozen=True)
class LocalBrokerSettings:
    """The project-local single-node KRaft broker used by the demo and the tests."""

    home: Path = Path("var/kafka")  # data, config, logs and pid file
    jars_dir: Path = Path("deploy/kafka/target/jars")
    pom: Path = Path("deploy/kafka/pom.xml")
    port: int = 9092
    controller_port: int = 9093
    heap: str = "768m"

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LocalBrokerSettings:
        env = os.environ if env is None else env
        root = Path(env.get(ENV_PREFIX + "PROJECT_DIR", "."))
        return cls(
            home=Path(env.get(ENV_PREFIX + "BROKER_HOME", root / "var" / "kafka")),
            jars_dir=Path(env.get(ENV_PREFIX + "BROKER_JARS", root / "deploy/kafka/target/jars")),
            pom=root / "deploy/kafka/pom.xml",
            port=_int(env, "BROKER_PORT", 9092, minimum=1, maximum=MAX_PORT),
            controller_port=_int(env, "BROKER_CONTROLLER_PORT", 9093, minimum=1, maximum=MAX_PORT),
            heap=env.get(ENV_PREFIX + "BROKER_HEAP", "768m"),
        )


def _int(
    env: Mapping[str, str], name: str, default: int, *, minimum: int, maximum: int | None = None
) -> int:
    raw = env.get(ENV_PREFIX + name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{ENV_PREFIX}{name}={raw!r} is not a whole number") from None
    if value < minimum:
        raise ConfigurationError(f"{ENV_PREFIX}{name}={value} is below {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigurationError(f"{ENV_PREFIX}{name}={value} is above {maximum}")
    return value


def check_port_free(host: str, port: int, setting: str) -> None:
    """Fail with one line, before anything starts, when ``port`` cannot be bound."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigurationError(
                f"{setting}={port}: cannot listen on {host}:{port} ({exc.strerror}): "
                "choose a free port"
            ) from None


def check_writable_file(path: Path, setting: str) -> None:
    """Fail with one line when ``path`` cannot be opened for appending."""
    if path.is_dir():
        raise ConfigurationError(f"{setting}={path} is a directory: name a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename and str(exc.filename) != str(path) else ""
        raise ConfigurationError(
            f"{setting}={path} cannot be written ({exc.strerror}{where}): name a writable file"
        ) from None
