"""Topic creation with the AdminClient, under the configured prefix."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import structlog
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from turnaudit.errors import (
    AccessDeniedError,
    BrokerError,
    BrokerUnreachableError,
    ConfigurationError,
)
from turnaudit.kafka.access import denial_text
from turnaudit.kafka.admin import admin_client, new_admin
from turnaudit.settings import KafkaSettings

log = structlog.get_logger("turnaudit.topics")


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]
    # Values of a required setting that an earlier release created and that still work:
    # a topic holding one is named with what to change, not refused.
    tolerated: Mapping[str, frozenset[str]] = field(default_factory=dict)


def control_retention_ms(settings: KafkaSettings) -> int:
    """``retention.ms`` of the control topics (checkpoints, stream heads): the turn
    topic's plus the margin (``TURNAUDIT_CONTROL_RETENTION_MARGIN_HOURS``), so that a
    checkpoint outlives every turn it signs; -1 (for ever) when turns are kept for ever."""
    if settings.turn_events_retention_ms < 0:
        return -1
    return settings.turn_events_retention_ms + settings.control_retention_margin_ms


# Control topics made before they had a lifecycle: compacted only, kept for ever.
_UNBOUNDED = {"cleanup.policy": frozenset({"compact"})}


def topic_specs(settings: KafkaSettings) -> list[TopicSpec]:
    t = settings.topics
    keep_events = str(settings.turn_events_retention_ms)
    # Compacted (a re-sent copy folds) and deleted by time: each record has a key of its
    # own, so without retention these topics would grow for ever.
    control = {
        "cleanup.policy": "compact,delete",
        "retention.ms": str(control_retention_ms(settings)),
        "min.compaction.lag.ms": "0",
    }
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
        # Each publisher stream's last recorded head, keyed by stream.
        TopicSpec(t.stream_heads, 1, dict(control), _UNBOUNDED),
        # Signed checkpoints, each under its own key; the broker stamps the append time,
        # which verify holds a key's revocation to.
        TopicSpec(
            t.checkpoints,
            1,
            {**control, "message.timestamp.type": "LogAppendTime"},
            _UNBOUNDED,
        ),
        # Sealed surfaces' data keys, keyed by data key id: an erasure's tombstone
        # removes one; short segments and a low dirty ratio let the cleaner reach it.
        TopicSpec(
            t.surface_keys,
            1,
            {
                "cleanup.policy": "compact",
                "min.compaction.lag.ms": "0",
                "segment.ms": str(3_600_000),
                "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": str(3_600_000),
            },
        ),
        # The erasures done (who, what, when): kept like the turns they erased.
        TopicSpec(t.erasures, 1, {"retention.ms": "-1", "cleanup.policy": "delete"}),
    ]


LOCAL_BROKER_HINT = "is the broker running? (turnaudit broker start)"
CLUSTER_HINT = "is the cluster up, and KAFKA_BOOTSTRAP_SERVERS right?"


def cluster_answers(
    bootstrap_servers: str, timeout: float, config: dict[str, str] | None = None
) -> bool:
    """Whether a cluster at ``bootstrap_servers`` answers a metadata request in time
    (``config``: the client's security options, for a secured cluster)."""
    admin = new_admin({**(config or {}), "bootstrap.servers": bootstrap_servers, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except Exception:  # KafkaException until the listener accepts requests
        return False
    return bool(metadata.brokers)


def broker_ids(
    bootstrap_servers: str, timeout: float, config: dict[str, str] | None = None
) -> set[int]:
    """The node ids of the brokers the cluster's metadata names now (empty: no answer)."""
    admin = new_admin({**(config or {}), "bootstrap.servers": bootstrap_servers, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except Exception:
        return set()
    return set(metadata.brokers)


def require_cluster(
    settings: KafkaSettings, *, wait: float | None = None, hint: str = CLUSTER_HINT
) -> None:
    """Return once a broker answers; raise ``BrokerUnreachableError`` (one line,
    with what to do) when none does within ``wait`` seconds (default: the
    settings' connect timeout). Asks again every second until then."""
    timeout = settings.connect_timeout_s if wait is None else wait
    denied: list[str] = []  # an authentication or TLS refusal: no point waiting on

    def on_error(error: KafkaError) -> None:
        text = denial_text(error)
        if text:
            denied.append(text)

    admin = admin_client(settings, error_cb=on_error)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            admin.list_topics(timeout=max(0.5, min(left, 2.0 if denied == [] else 0.5)))
            if not denied:
                return
        except KafkaException as exc:
            log.debug("cluster_not_answering", error=str(exc), left_s=round(left, 1))
        admin.poll(0)  # serves librdkafka's own log lines to their (silent) logger
        if denied:
            raise AccessDeniedError(f"{settings.bootstrap_servers}: {denied[-1]}")
        if time.monotonic() >= deadline:
            raise BrokerUnreachableError(
                f"cannot reach {settings.bootstrap_servers} within {timeout:g} s: {hint}"
            )
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


@dataclass(frozen=True)
class Replication:
    """Replication factor and min.insync.replicas of the created topics."""

    factor: int
    min_insync: int


def plan_replication(
    brokers: int,
    factor: int | None = None,
    min_insync: int | None = None,
    *,
    allow_unsafe: bool = False,
    topic: str = "the audit topic",
) -> Replication:
    """The replication the topics get on a cluster of ``brokers`` brokers.

    Defaults: 3 and 2 where the cluster has 3 brokers or more, else 1 and 1.
    Refused (``ConfigurationError``, one line) unless ``allow_unsafe``: a
    min.insync.replicas equal to the replication factor on a cluster of more
    than one broker (one broker down stops every acks=all write), and a
    replication factor of 1 on such a cluster (one broker lost loses turns).
    Always refused: more replicas than brokers, min.insync.replicas above the
    replication factor (nothing could ever be written with acks=all).
    """
    rf = factor if factor is not None else (3 if brokers >= 3 else 1)
    isr = min_insync if min_insync is not None else (min(2, rf - 1) if rf > 1 else 1)
    if rf < 1 or isr < 1:
        raise ConfigurationError("replication factor and min.insync.replicas must be 1 or more")
    if rf > brokers:
        raise ConfigurationError(
            f"replication factor {rf} needs {rf} brokers; the cluster has {brokers}"
        )
    if isr > rf:
        raise ConfigurationError(
            f"min.insync.replicas {isr} above replication factor {rf}: "
            "no acks=all write could ever succeed"
        )
    if brokers > 1 and not allow_unsafe:
        if rf == 1:
            raise ConfigurationError(
                f"replication factor 1 for {topic} on a cluster of {brokers} brokers: one "
                "broker lost loses turns (give --replication-factor 3, or --allow-unsafe)"
            )
        if isr >= rf:
            raise ConfigurationError(
                f"min.insync.replicas {isr} with replication factor {rf} for {topic}: one "
                "broker down stops every write (give fewer, or --allow-unsafe)"
            )
    return Replication(rf, isr)


def cluster_size(admin: AdminClient, timeout: float) -> int:
    try:
        return len(admin.list_topics(timeout=timeout).brokers)
    except KafkaException as exc:
        raise BrokerError(f"cannot read the cluster's metadata: {exc.args[0].str()}") from exc


def ensure_topics(
    settings: KafkaSettings,
    timeout: float = 30.0,
    *,
    allow_unsafe: bool = False,
    strict: bool = False,
) -> list[str]:
    """Create the project's topics that do not exist yet; return the names created.

    Replication: the settings' (``TURNAUDIT_TOPIC_REPLICATION_FACTOR``,
    ``TURNAUDIT_TOPIC_MIN_INSYNC_REPLICAS``), else what the cluster's size
    allows (see ``plan_replication``), checked only when a topic is missing.

    On a secured cluster a principal that may not create topics (every one but
    the admin) leaves them to the admin: the refusal is logged, not raised,
    unless ``strict`` (``turnaudit topics create``), and a topic it cannot see
    is not waited for.
    """
    admin = admin_client(settings)
    wanted = topic_specs(settings)
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise BrokerError(f"cannot read the cluster's metadata: {exc.args[0].str()}") from exc
    missing = [s for s in wanted if s.name not in metadata.topics]
    created: list[str] = []
    denied: dict[str, str] = {}
    if missing:
        replication = plan_replication(
            len(metadata.brokers),
            settings.replication_factor,
            settings.min_insync_replicas,
            allow_unsafe=allow_unsafe,
            topic=settings.topics.turn_events,
        )
        futures = admin.create_topics(
            [
                NewTopic(
                    s.name,
                    num_partitions=s.partitions,
                    replication_factor=replication.factor,
                    config={**s.config, "min.insync.replicas": str(replication.min_insync)},
                )
                for s in missing
            ],
            operation_timeout=timeout,
            request_timeout=timeout,
        )
        for name, future in futures.items():
            try:
                future.result(timeout=timeout)
                created.append(name)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                text = denial_text(error)
                if text is None:
                    raise BrokerError(f"could not create topic {name}: {error.str()}") from exc
                if strict:
                    raise AccessDeniedError(f"could not create topic {name}: {text}") from exc
                denied[name] = text
    if denied:
        reason = next(iter(denied.values()))
        log.info("topics_left_to_the_admin", topics=sorted(denied), reason=reason)
    visible = [s for s in wanted if s.name not in denied]
    wait_for_leaders(admin, [s.name for s in visible], timeout)
    existing = [s for s in visible if s.name not in created]
    if existing:
        _check_existing(admin, existing, timeout)
    return sorted(created)


# Settings a topic that already existed must have: a schemas topic that deletes
# old records would make weeks-old events unreadable for replays.
_REQUIRED = {"cleanup.policy"}


def config_fix(topic: str, config: Mapping[str, str]) -> str:
    """The command that gives an existing ``topic`` the settings ``config``."""
    values = ",".join(f"{k}=[{v}]" if "," in v else f"{k}={v}" for k, v in config.items())
    return (
        f"kafka-configs.sh --bootstrap-server HOST:PORT --alter --entity-type topics "
        f"--entity-name {topic} --add-config {values}"
    )


def _check_existing(admin: AdminClient, specs: list[TopicSpec], timeout: float) -> None:
    resources = [ConfigResource(ResourceType.TOPIC, s.name) for s in specs]
    described: dict[str, dict[str, ConfigEntry]] = {}
    for resource, future in admin.describe_configs(resources).items():
        try:
            described[resource.name] = future.result(timeout=timeout)
        except KafkaException as exc:
            if denial_text(exc.args[0]) is None:
                raise
            # A principal without DescribeConfigs trusts the admin's topic settings.
            log.info("topic_config_unchecked", topic=resource.name, reason=exc.args[0].str())
    specs = [s for s in specs if s.name in described]
    for spec in specs:
        actual = described[spec.name]
        differs: dict[str, tuple[str | None, str]] = {}
        for key, wanted in spec.config.items():
            have = actual[key].value if key in actual else None
            if have == wanted:
                continue
            if key in _REQUIRED and have not in spec.tolerated.get(key, frozenset()):
                raise BrokerError(
                    f"topic {spec.name} exists with {key}={have}, the pipeline needs {wanted}"
                )
            differs[key] = (have, wanted)
        if differs:
            # One line per topic: what differs, and the command that changes it.
            log.warning(
                "topic_config_differs",
                topic=spec.name,
                differs={
                    k: f"{have} (configured {wanted})" for k, (have, wanted) in differs.items()
                },
                fix=config_fix(spec.name, {k: wanted for k, (_, wanted) in differs.items()}),
            )


def wait_for_leaders(admin: AdminClient, names: list[str], timeout: float) -> None:
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


def topic_retention_ms(settings: KafkaSettings, topic: str, timeout: float = 30.0) -> int | None:
    """The topic's ``retention.ms`` (None: kept for ever, -1). A principal that may not
    describe the topic's configuration gets the pipeline's configured retention."""
    admin = admin_client(settings)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        described = admin.describe_configs([resource])[resource].result(timeout=timeout)
        value = int(described["retention.ms"].value)
    except (KafkaException, KeyError, ValueError, TypeError):
        value = settings.turn_events_retention_ms
    return None if value < 0 else value
