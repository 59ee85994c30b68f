"""Settings of the consumer services, read once from ``TURNAUDIT_*`` variables.

Kafka itself (bootstrap servers, topic prefix, librdkafka passthrough) comes
from ``KafkaSettings.from_env``; this adds what the services need on top.
"""

from __future__ import annotations

import enum
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from turnaudit.consumers.runtime.otel_settings import OtlpSettings
from turnaudit.errors import ConfigurationError
from turnaudit.kafka.groups import service_group
from turnaudit.kafka.producer import check_passthrough_options
from turnaudit.label_bounds import DEFAULT_LABEL_LIMIT
from turnaudit.redaction import Redaction, SurfacePolicy, surface_redaction

# _int: the project's one parser of whole-number variables, same messages everywhere.
from turnaudit.settings import ENV_PREFIX, MAX_PORT, KafkaSettings, _int, check_writable_file

# The one surface policy (turnaudit.redaction), under the name the log sink gave it.
SurfaceRedaction = SurfacePolicy


class ServiceName(enum.StrEnum):
    """Closed set of services; also their default group ids and DLQ stage names."""

    LOG_SINK = "log-sink"
    VERDICT_METRICS = "verdict-metrics"
    HTIR_FEEDER = "htir-feeder"
    AUDITOR_WORKER = "auditor-worker"
    VERIFY_FOLLOW = "verify-follow"
    OTEL_SINK = "otel-sink"
    ARCHIVE = "archive"


DEFAULT_HTTP_PORTS = {
    ServiceName.LOG_SINK: 9309,
    ServiceName.VERDICT_METRICS: 9308,
    ServiceName.HTIR_FEEDER: 9310,
    ServiceName.AUDITOR_WORKER: 9311,
    ServiceName.VERIFY_FOLLOW: 9312,
    ServiceName.OTEL_SINK: 9313,
    ServiceName.ARCHIVE: 9315,
}
# TURNAUDIT_GROUP_INSTANCE_ID=none: dynamic membership (no instance id).
NO_INSTANCE_ID = "none"
# Worker processes of one service (TURNAUDIT_WORKERS, --workers): more than the
# partitions of the topic leaves the extra ones idle.
MAX_WORKERS = 64


def default_group_id(prefix: str, service: ServiceName) -> str:
    """Per service and per deployment: two prefixes on one cluster never share a group.
    The ACL plan grants each by its literal name to the service's principal alone."""
    return service_group(prefix, service.value)


def default_instance_id(
    service: ServiceName, http_port: int, host: str | None = None
) -> str | None:
    """Static membership by default: the host name and the HTTP port name an instance.

    Both stay the same when the instance restarts (same container, same
    port), and no two instances on one host share a port; so a restarted
    instance rejoins as itself and gets its partitions back at once, without
    waiting out its old session. With an HTTP port of 0 (any free port) the
    instance has no stable name: dynamic membership.
    """
    if http_port == 0:
        return None
    return f"{service.value}-{host or socket.gethostname()}-{http_port}"


@dataclass(frozen=True)
class LogSinkSettings:
    redaction: SurfaceRedaction = SurfaceRedaction.DROP
    hash_key: bytes = field(default=b"", repr=False)  # a secret: kept out of logs
    file: Path | None = None  # None: stdout
    file_max_bytes: int = 100 * 1024 * 1024
    file_backups: int = 10

    def __post_init__(self) -> None:
        Redaction(self.redaction, self.hash_key)  # raises when hash has no key

    @property
    def surfaces(self) -> Redaction:
        """The surface policy every writer of the service applies (``turnaudit.redaction``)."""
        return Redaction(self.redaction, self.hash_key)


@dataclass(frozen=True)
class MetricsSettings:
    # With a list, label values outside it are counted as "other"; without one,
    # the first label_limit distinct ids are named and the rest are "other":
    # either way a flood of new pack or domain ids cannot create new series.
    packs: frozenset[str] = frozenset()
    domains: frozenset[str] = frozenset()
    label_limit: int = DEFAULT_LABEL_LIMIT


# A batch's size by service where 500 is not it: the continuous verifier reads backlogs
# (a restart, a new member) in bulk; each batch costs it a tick of its heads feed and a
# flush, so larger batches prove more turns a second (0.43x -> 0.75x the bare consume +
# decode loop over 10 million turns with the deeper fetch of consumers/runtime/loop.py).
DEFAULT_BATCH_SIZES: dict[ServiceName, int] = {ServiceName.VERIFY_FOLLOW: 2000}


@dataclass(frozen=True)
class ServiceSettings:
    service: ServiceName
    kafka: KafkaSettings
    group_id: str
    group_instance_id: str | None = None  # static membership: a restart needs no rebalance
    http_host: str = "0.0.0.0"  # noqa: S104 - a service in a container is scraped from outside
    http_port: int = 9308  # 0: any free port (tests)
    batch_size: int = 500
    batch_timeout_s: float = 0.01  # a batch waits at most this long to fill: the latency floor
    auto_offset_reset: str = "earliest"
    drain_timeout_s: float = 30.0
    max_sessions: int = 100_000  # stream tracker bound: ordered streams
    max_event_ids: int = 500_000  # stream tracker bound: event ids remembered for dedupe
    # Not ready after holding no partition this long (a rebalance takes less).
    unassigned_bound_s: float = 30.0
    # Kafka client errors (an unreachable broker) are logged at most this often.
    client_error_report_s: float = 30.0
    # Worker processes, each a member of the group (consumers/runtime/workers.py).
    workers: int = 1
    log: LogSinkSettings = field(default_factory=LogSinkSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    otlp: OtlpSettings = field(default_factory=OtlpSettings)  # the otel sink's collector

    @property
    def surfaces(self) -> Redaction:
        """What every writer of the service puts out for surface texts and tool I/O."""
        return self.log.surfaces

    def with_kafka(self, kafka: KafkaSettings) -> ServiceSettings:
        return replace(self, kafka=kafka)

    @classmethod
    def from_env(
        cls, service: ServiceName, env: Mapping[str, str] | None = None
    ) -> ServiceSettings:
        env = os.environ if env is None else env
        reset = _text(env, "AUTO_OFFSET_RESET", "earliest")
        if reset not in ("earliest", "latest"):
            raise ConfigurationError(f"{ENV_PREFIX}AUTO_OFFSET_RESET must be earliest or latest")
        surfaces = surface_redaction(env)
        log_file = _text(env, "LOG_FILE", "")
        if log_file and service is ServiceName.LOG_SINK:
            check_writable_file(Path(log_file), f"{ENV_PREFIX}LOG_FILE")
        kafka = KafkaSettings.from_env(env)
        check_passthrough_options(kafka)
        http_port = _int(env, "HTTP_PORT", DEFAULT_HTTP_PORTS[service], minimum=0, maximum=MAX_PORT)
        instance = _text(env, "GROUP_INSTANCE_ID", "")
        return cls(
            service=service,
            kafka=kafka,
            group_id=_text(env, "GROUP_ID", default_group_id(kafka.topics.prefix, service)),
            group_instance_id=(
                None
                if instance.lower() == NO_INSTANCE_ID
                else instance or default_instance_id(service, http_port)
            ),
            http_host=_text(env, "HTTP_HOST", "0.0.0.0"),  # noqa: S104
            http_port=http_port,
            batch_size=_int(env, "BATCH_SIZE", DEFAULT_BATCH_SIZES.get(service, 500), minimum=1),
            batch_timeout_s=_int(env, "BATCH_TIMEOUT_MS", 10, minimum=1) / 1000,
            auto_offset_reset=reset,
            drain_timeout_s=_int(env, "DRAIN_TIMEOUT_S", 30, minimum=1),
            max_sessions=_int(env, "MAX_SESSIONS", 100_000, minimum=1),
            max_event_ids=_int(env, "MAX_EVENT_IDS", 500_000, minimum=1),
            unassigned_bound_s=_int(env, "READY_UNASSIGNED_S", 30, minimum=1),
            client_error_report_s=_int(env, "CLIENT_ERROR_REPORT_S", 30, minimum=1),
            workers=_int(env, "WORKERS", 1, minimum=1, maximum=MAX_WORKERS),
            log=LogSinkSettings(
                redaction=surfaces.policy,
                hash_key=surfaces.key,
                file=Path(log_file) if log_file else None,
                file_max_bytes=_int(env, "LOG_FILE_MAX_BYTES", 100 * 1024 * 1024, minimum=1024),
                file_backups=_int(env, "LOG_FILE_BACKUPS", 10, minimum=1),
            ),
            metrics=MetricsSettings(
                packs=_names(env, "METRICS_PACKS"),
                domains=_names(env, "METRICS_DOMAINS"),
                label_limit=_int(env, "METRICS_LABEL_LIMIT", DEFAULT_LABEL_LIMIT, minimum=1),
            ),
            # Read (and checked) only by the service that exports to a collector.
            otlp=OtlpSettings.from_env(env) if service is ServiceName.OTEL_SINK else OtlpSettings(),
        )


def _text(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(ENV_PREFIX + name)
    return default if value is None else value.strip()


def _names(env: Mapping[str, str], name: str) -> frozenset[str]:
    return frozenset(n.strip() for n in _text(env, name, "").split(",") if n.strip())
