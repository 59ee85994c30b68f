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
from turnaudit.files import open_private
from turnaudit.registry_settings import (
    RegistryOption,
    auto_register_from_env,
    registry_options_from_env,
)
from turnaudit.topic_names import DEFAULT_TOPIC_PREFIX

# Re-exported: settings hold the topics' names, and the demo imports them from here.
from turnaudit.topic_names import TopicNames as TopicNames  # noqa: PLC0414

ENV_PREFIX = "TURNAUDIT_"
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
HOUR_MS = 3_600_000
MAX_PORT = 65_535

# librdkafka's own log lines (connection refused, retries, ...) go to this
# logger, never straight to stderr: silent unless an application (or the CLI
# at --log-level DEBUG) gives it a handler. Errors that matter reach the user
# through the project's own messages instead.
LIBRDKAFKA_LOGGER = logging.getLogger("turnaudit.librdkafka")
LIBRDKAFKA_LOGGER.addHandler(logging.NullHandler())
LIBRDKAFKA_LOGGER.propagate = False


class Secret:
    """A password held in memory: its ``repr`` and ``str`` never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:  # worker processes get it too
        return (Secret, (self._value,))


SECURITY_PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


@dataclass(frozen=True)
class KafkaCredentials:
    """Who a service is on the cluster: a SASL principal and its password."""

    username: str
    password: Secret
    mechanism: str = "SCRAM-SHA-512"


@dataclass(frozen=True)
class KafkaSecurity:
    """How a client reaches a secured cluster: protocol, principal, trusted CA.

    Read from ``TURNAUDIT_KAFKA_SECURITY_PROTOCOL``, ``TURNAUDIT_KAFKA_USERNAME``,
    ``TURNAUDIT_KAFKA_PASSWORD`` or ``TURNAUDIT_KAFKA_PASSWORD_FILE``,
    ``TURNAUDIT_KAFKA_SASL_MECHANISM`` and ``TURNAUDIT_KAFKA_CA_FILE``; mapped
    into librdkafka's ``security.protocol``, ``sasl.*`` and ``ssl.ca.location``.
    The password is never logged: its ``repr`` is masked.
    """

    protocol: str = "plaintext"
    credentials: KafkaCredentials | None = None
    ca_file: Path | None = None

    @property
    def principal(self) -> str | None:
        return self.credentials.username if self.credentials else None

    def client_options(self) -> dict[str, str]:
        options: dict[str, str] = {}
        if self.protocol != "plaintext":
            options["security.protocol"] = self.protocol
        if self.credentials is not None:
            options["sasl.mechanisms"] = self.credentials.mechanism
            options["sasl.username"] = self.credentials.username
            options["sasl.password"] = self.credentials.password.reveal()
        if self.ca_file is not None:
            options["ssl.ca.location"] = str(self.ca_file)
        return options

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> KafkaSecurity:
        username = env.get(ENV_PREFIX + "KAFKA_USERNAME", "").strip()
        password = _password(env)
        if password is not None and not username:
            raise ConfigurationError(
                f"{ENV_PREFIX}KAFKA_PASSWORD given without {ENV_PREFIX}KAFKA_USERNAME: "
                "name the principal"
            )
        if username and password is None:
            raise ConfigurationError(
                f"{ENV_PREFIX}KAFKA_USERNAME={username} has no password: set "
                f"{ENV_PREFIX}KAFKA_PASSWORD_FILE (or {ENV_PREFIX}KAFKA_PASSWORD)"
            )
        mechanism = env.get(ENV_PREFIX + "KAFKA_SASL_MECHANISM", "").strip().upper()
        mechanism = mechanism or SASL_MECHANISMS[0]
        if mechanism not in SASL_MECHANISMS:
            raise ConfigurationError(
                f"{ENV_PREFIX}KAFKA_SASL_MECHANISM={mechanism!r}: choose "
                f"{', '.join(SASL_MECHANISMS)}"
            )
        ca_text = env.get(ENV_PREFIX + "KAFKA_CA_FILE", "").strip()
        ca_file = Path(ca_text) if ca_text else None
        if ca_file is not None and not ca_file.is_file():
            raise ConfigurationError(
                f"{ENV_PREFIX}KAFKA_CA_FILE={ca_file}: no such file (name the PEM file of the "
                "CA that signed the brokers' certificates)"
            )
        protocol = env.get(ENV_PREFIX + "KAFKA_SECURITY_PROTOCOL", "").strip().lower()
        if not protocol:
            sasl, tls = bool(username), ca_file is not None
            protocol = {
                (True, True): "sasl_ssl",
                (True, False): "sasl_ssl",
                (False, True): "ssl",
                (False, False): "plaintext",
            }[(sasl, tls)]
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigurationError(
                f"{ENV_PREFIX}KAFKA_SECURITY_PROTOCOL={protocol!r}: choose "
                f"{', '.join(SECURITY_PROTOCOLS)}"
            )
        if protocol.startswith("sasl") and not username:
            raise ConfigurationError(
                f"{ENV_PREFIX}KAFKA_SECURITY_PROTOCOL={protocol} needs "
                f"{ENV_PREFIX}KAFKA_USERNAME and {ENV_PREFIX}KAFKA_PASSWORD_FILE"
            )
        credentials = (
            KafkaCredentials(username, password, mechanism)
            if username and password is not None
            else None
        )
        return cls(protocol, credentials, ca_file)


def _password(env: Mapping[str, str]) -> Secret | None:
    inline = env.get(ENV_PREFIX + "KAFKA_PASSWORD")
    file_text = env.get(ENV_PREFIX + "KAFKA_PASSWORD_FILE", "").strip()
    if inline and file_text:
        raise ConfigurationError(
            f"both {ENV_PREFIX}KAFKA_PASSWORD and {ENV_PREFIX}KAFKA_PASSWORD_FILE are set: keep one"
        )
    if file_text:
        try:
            value = Path(file_text).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigurationError(
                f"{ENV_PREFIX}KAFKA_PASSWORD_FILE={file_text} cannot be read "
                f"({exc.strerror or exc})"
            ) from None
        if not value:
            raise ConfigurationError(f"{ENV_PREFIX}KAFKA_PASSWORD_FILE={file_text} is empty")
        return Secret(value)
    if inline:
        return Secret(inline)
    return None


@dataclass(frozen=True)
class KafkaSettings:
    """Where the cluster is, how topics are named and laid out, client options."""

    bootstrap_servers: str | None = None  # None: use the project's local broker
    topics: TopicNames = field(default_factory=TopicNames)
    schema_registry_url: str | None = None
    # Registry client options (credentials, TLS) and whether the publisher may
    # register schemas (turnaudit.registry_settings reads them from the environment).
    schema_registry_options: Mapping[str, RegistryOption] = field(
        default_factory=lambda: MappingProxyType({})
    )
    schema_registry_auto_register: bool = True
    client_options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    partitions: int = 6
    # None: 3 on a cluster of 3 or more brokers, else 1 (min.insync.replicas: 2, else 1).
    replication_factor: int | None = None
    # Turn events must outlive the longest replay window the users need.
    turn_events_retention_ms: int = 30 * 24 * HOUR_MS
    # The control topics (checkpoints, stream heads) keep a record this much longer than
    # the turn topic keeps a turn: a checkpoint must outlive every turn it signs, and the
    # turn topic's oldest segment outlives its retention by up to its segment.ms (Kafka's
    # default: 7 days), so 8 days.
    control_retention_margin_ms: int = 8 * 24 * HOUR_MS
    dlq_retention_ms: int = 30 * 24 * HOUR_MS
    # How long a command waits for the cluster to answer before saying it cannot.
    connect_timeout_s: float = 10.0
    # Protocol, principal and trusted CA (below the passthrough options, which win).
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    # min.insync.replicas of the created topics (None: the cluster's default).
    min_insync_replicas: int | None = None

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
        return {**config, **self.security.client_options(), **self.client_options, **overrides}

    def with_security(self, security: KafkaSecurity) -> KafkaSettings:
        return replace(self, security=security)

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
        # Kept as given: librdkafka judges them when a command connects
        # (turnaudit.kafka.producer.check_passthrough_options).
        client_options = {str(k): str(v) for k, v in options.items()}
        return cls(
            bootstrap_servers=env.get(BOOTSTRAP_ENV) or None,
            topics=TopicNames(env.get(ENV_PREFIX + "TOPIC_PREFIX", DEFAULT_TOPIC_PREFIX)),
            schema_registry_url=env.get(ENV_PREFIX + "SCHEMA_REGISTRY_URL") or None,
            schema_registry_options=MappingProxyType(registry_options_from_env(env)),
            schema_registry_auto_register=auto_register_from_env(env),
            client_options=MappingProxyType(client_options),
            partitions=_int(env, "TOPIC_PARTITIONS", 6, minimum=1),
            replication_factor=_optional_int(env, "TOPIC_REPLICATION_FACTOR", minimum=1),
            turn_events_retention_ms=_int(env, "TURN_EVENTS_RETENTION_HOURS", 30 * 24, minimum=1)
            * HOUR_MS,
            control_retention_margin_ms=_int(
                env, "CONTROL_RETENTION_MARGIN_HOURS", 8 * 24, minimum=1
            )
            * HOUR_MS,
            dlq_retention_ms=_int(env, "DLQ_RETENTION_HOURS", 30 * 24, minimum=1) * HOUR_MS,
            connect_timeout_s=_int(env, "CONNECT_TIMEOUT_S", 10, minimum=1),
            security=KafkaSecurity.from_env(env),
            min_insync_replicas=_optional_int(env, "TOPIC_MIN_INSYNC_REPLICAS", minimum=1),
        )


def _optional_int(env: Mapping[str, str], name: str, *, minimum: int) -> int | None:
    raw = env.get(ENV_PREFIX + name)
    if raw is None or raw.strip() == "":
        return None
    return _int(env, name, minimum, minimum=minimum)


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
        with open_private(path, "a", parents=True):  # created owner-only, as it will be written
            pass
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename and str(exc.filename) != str(path) else ""
        raise ConfigurationError(
            f"{setting}={path} cannot be written ({exc.strerror}{where}): name a writable file"
        ) from None
