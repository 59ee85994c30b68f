"""Which topic prefixes Kafka accepts: the one rule, held by every command.

``TopicNames`` (``turnaudit.settings``) checks its prefix with
``check_topic_prefix``, so ``topics create``, ``acls plan|apply`` and every other
command refuse the same prefixes, each in one line (exit 2), before a cluster is
asked; ``acls plan --prefix`` checks its flag with the same function.
"""

from __future__ import annotations

from turnaudit.errors import ConfigurationError

# Every topic the project names, after its prefix (checkpoints: turnaudit.checkpoints,
# stream-heads: turnaudit.stream_heads, verify-state: verify --follow's checkpoints).
TOPIC_SUFFIXES = (
    "turn-events",
    "schemas",
    "dlq",
    "htir-traces",
    "auditor-observations",
    "stream-heads",
    "checkpoints",
    "verify-state",
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
