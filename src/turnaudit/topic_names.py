"""Every topic the project names, and which topic prefixes Kafka accepts.

``TopicNames`` is the one owner of the topics' names: topic creation
(``turnaudit.kafka.topics``), the ACL plan (``turnaudit.kafka.acls``) and every
service read a topic's name from it, and nothing else spells a topic's suffix.
It checks its prefix with ``check_topic_prefix``, so ``topics create``,
``acls plan|apply`` and every other command refuse the same prefixes, each in
one line (exit 2), before a cluster is asked; ``acls plan --prefix`` checks its
flag with the same function.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnaudit.errors import ConfigurationError

DEFAULT_TOPIC_PREFIX = "turn-audit."
TOPIC_PREFIX_SETTING = "TURNAUDIT_TOPIC_PREFIX"

TURN_EVENTS = "turn-events"
SCHEMAS = "schemas"  # the writer schemas, compacted (turnaudit.kafka.schema_topic)
DLQ = "dlq"  # dead letters (turnaudit.dead_letters)
HTIR_TRACES = "htir-traces"
AUDITOR_OBSERVATIONS = "auditor-observations"
STREAM_HEADS = "stream-heads"  # each publisher stream's last head (turnaudit.stream_heads)
CHECKPOINTS = "checkpoints"  # signed checkpoints (turnaudit.checkpoints)
VERIFY_STATE = "verify-state"  # verify --follow's own progress
SURFACE_KEYS = "surface-keys"  # sealed surfaces' wrapped data keys, compacted (turnaudit.sealing)
ERASURES = "erasures"  # the record of each session erased (turnaudit erase)
# Every topic the project names, after its prefix.
TOPIC_SUFFIXES = (
    TURN_EVENTS,
    SCHEMAS,
    DLQ,
    HTIR_TRACES,
    AUDITOR_OBSERVATIONS,
    STREAM_HEADS,
    CHECKPOINTS,
    VERIFY_STATE,
    SURFACE_KEYS,
    ERASURES,
)
# Kafka's rule for a topic name (org.apache.kafka.common.internals.Topic.validate):
# 1 to 249 of these characters, and neither "." nor "..".
TOPIC_NAME_CHARACTERS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
)
MAX_TOPIC_NAME = 249


def check_topic_prefix(prefix: str, what: str) -> str:
    """``prefix``, when Kafka accepts every topic name the project makes under it;
    else ``ConfigurationError``, one line naming ``what`` (the setting or flag).

    The one rule for prefixes: ``TopicNames`` holds every prefix to it, so
    ``topics create``, ``acls plan|apply`` and every other command refuse the
    same ones."""
    bad = sorted({c for c in prefix if c not in TOPIC_NAME_CHARACTERS})
    if bad:
        raise ConfigurationError(
            f"{what} {prefix!r}: Kafka topic names hold only ASCII letters, digits, "
            f"'.', '_' and '-' (not {', '.join(map(repr, bad))})"
        )
    room = MAX_TOPIC_NAME - max(len(suffix) for suffix in TOPIC_SUFFIXES)
    if len(prefix) > room:
        raise ConfigurationError(
            f"{what}: {len(prefix)} characters; at most {room}, so that every topic "
            f"name stays within Kafka's {MAX_TOPIC_NAME}"
        )
    return prefix


@dataclass(frozen=True)
class TopicNames:
    """The project's topics, all under one prefix (``check_topic_prefix``'s)."""

    prefix: str = DEFAULT_TOPIC_PREFIX

    def __post_init__(self) -> None:
        check_topic_prefix(self.prefix, TOPIC_PREFIX_SETTING)

    @property
    def turn_events(self) -> str:
        return self.prefix + TURN_EVENTS

    @property
    def schemas(self) -> str:
        return self.prefix + SCHEMAS

    @property
    def dlq(self) -> str:
        return self.prefix + DLQ

    @property
    def htir_traces(self) -> str:
        return self.prefix + HTIR_TRACES

    @property
    def auditor_observations(self) -> str:
        return self.prefix + AUDITOR_OBSERVATIONS

    @property
    def stream_heads(self) -> str:
        return self.prefix + STREAM_HEADS

    @property
    def checkpoints(self) -> str:
        return self.prefix + CHECKPOINTS

    @property
    def verify_state(self) -> str:
        return self.prefix + VERIFY_STATE

    @property
    def surface_keys(self) -> str:
        return self.prefix + SURFACE_KEYS

    @property
    def erasures(self) -> str:
        return self.prefix + ERASURES

    def every(self) -> tuple[str, ...]:
        """Every topic the project names under this prefix, in ``TOPIC_SUFFIXES``' order."""
        return tuple(self.prefix + suffix for suffix in TOPIC_SUFFIXES)
