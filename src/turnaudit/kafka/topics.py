"""Topic creation with the AdminClient, under the configured prefix."""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from turnaudit.errors import BrokerError, BrokerUnreachableError, ConfigurationError
from turnaudit.settings import KafkaSettings

log = structlog.get_logger("turnaudit.topics")


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]


def topic_specs(settings: KafkaSettings) -> list[TopicSpec]:
    t = settings.topics
    keep_events = str(settings.turn_events_retention_ms)
    return [
        # Keyed by session: order per session; kept long enough to replay weeks.
        TopicSpec(
            t.turn_events,
            settings.partitions,
            {"retention.ms": keep_events, "cleanup.policy": "delete"},
        ),
        # One record per writer schema, keyed by fingerprint: compaction keeps them all.
        TopicSpec(t.schemas, 1, {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}),
        TopicSpec(
            t.dlq,
            settings.partitions,
            {"retention.ms": str(settings.dlq_retention_ms), "cleanup.policy": "delete"},
        ),
        TopicSpec(t.htir_traces, settings.partitions, {"retention.ms": keep_events}),
        TopicSpec(t.auditor_observations, settings.partitions, {"retention.ms": keep_events}),
    ]


LOCAL_BROKER_HINT = "is the broker running? (turnaudit broker start)"
CLUSTER_HINT = "is the cluster up, and KAFKA_BOOTSTRAP_SERVERS right?"


def cluster_answers(bootstrap_servers: str, timeout: float) -> bool:
    """Whether a cluster at ``bootstrap_servers`` answers a metadata request in time."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except Exception:  # KafkaException until the listener accepts requests
        return False
    return bool(metadata.brokers)


def admin_client(settings: KafkaSettings) -> AdminClient:
    try:
        return AdminClient(settings.client_config())
    except KafkaException as exc:
        raise ConfigurationError(f"Kafka client settings: {exc.args[0].str()}") from None


def require_cluster(
    settings: KafkaSettings, *, wait: float | None = None, hint: str = CLUSTER_HINT
) -> None:
    """Return once a broker answers; raise ``BrokerUnreachableError`` (one line,
    with what to do) when none does within ``wait`` seconds (default: the
    settings' connect timeout). Asks again every second until then."""
    timeout = settings.connect_timeout_s if wait is None else wait
    admin = admin_client(settings)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            admin.list_topics(timeout=max(0.5, min(left, 5.0)))
            return
        except KafkaException as exc:
            log.debug("cluster_not_answering", error=str(exc), left_s=round(left, 1))
        admin.poll(0)  # serves librdkafka's own log lines to their (silent) logger
        if time.monotonic() >= deadline:
            raise BrokerUnreachableError(
                f"cannot reach {settings.bootstrap_servers} within {timeout:g} s: {hint}"
            )
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def ensure_topics(settings: KafkaSettings, timeout: float = 30.0) -> list[str]:
    """Create the project's topics that do not exist yet; return the names created."""
    admin = admin_client(settings)
    wanted = topic_specs(settings)
    futures = admin.create_topics(
        [
            NewTopic(
                s.name,
                num_partitions=s.partitions,
                replication_factor=settings.replication_factor,
                config=s.config,
            )
            for s in wanted
        ],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    created: list[str] = []
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise BrokerError(f"could not create topic {name}: {exc.args[0].str()}") from exc
    _wait_for_leaders(admin, [s.name for s in wanted], timeout)
    existing = [s for s in wanted if s.name not in created]
    if existing:
        _check_existing(admin, existing, timeout)
    return sorted(created)


# Settings a topic that already existed must have: a schemas topic that deletes
# old records would make weeks-old events unreadable for replays.
_REQUIRED = {"cleanup.policy"}


def _check_existing(admin: AdminClient, specs: list[TopicSpec], timeout: float) -> None:
    resources = [ConfigResource(ResourceType.TOPIC, s.name) for s in specs]
    described = {
        r.name: f.result(timeout=timeout) for r, f in admin.describe_configs(resources).items()
    }
    for spec in specs:
        actual = described[spec.name]
        for key, wanted in spec.config.items():
            have = actual[key].value if key in actual else None
            if have == wanted:
                continue
            if key in _REQUIRED:
                raise BrokerError(
                    f"topic {spec.name} exists with {key}={have}, the pipeline needs {wanted}"
                )
            log.warning(
                "topic_config_differs", topic=spec.name, key=key, actual=have, configured=wanted
            )


def _wait_for_leaders(admin: AdminClient, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        metadata = admin.list_topics(timeout=timeout)
        ready = all(
            name in metadata.topics
            and metadata.topics[name].error is None
            and all(p.leader >= 0 for p in metadata.topics[name].partitions.values())
            for name in names
        )
        if ready:
            return
        if time.monotonic() > deadline:
            raise BrokerError(f"topics {names} have no leader after {timeout:.0f}s")
        time.sleep(0.2)
