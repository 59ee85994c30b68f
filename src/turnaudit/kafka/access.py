"""Why the cluster refused a client, and what the configured principal may do.

``denial_text`` says in one line why a client was refused; ``check_topic_access``
and ``check_group_access`` ask the cluster before a command starts, so a denial
is one line (exit 3) before any work, not a stream of failed deliveries or a
group that seems to never answer.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient

from turnaudit.errors import AccessDeniedError

_DENIALS = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "not authorized for the topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "not authorized for the consumer group",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "not authorized for the cluster operation",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "not authorized for the transactional id",
    KafkaError.SASL_AUTHENTICATION_FAILED: "authentication failed",
    KafkaError._AUTHENTICATION: "authentication failed",
    KafkaError._SSL: "TLS failed",
}
# Words librdkafka's texts carry when a refusal was wrapped into another error.
DENIAL_MARKERS = (
    "AUTHORIZATION_FAILED",
    "Authorization failed",
    "not authorized",
    "SASL authentication error",
    "Authentication failed",
    "SSL handshake failed",
    "certificate verify failed",
)


def denial_text(error: object) -> str | None:
    """One line saying why the cluster refused (None: not a refusal of access)."""
    if not isinstance(error, KafkaError):
        return None
    what = _DENIALS.get(error.code())
    if what is None:
        return None
    text = " ".join(error.str().split())
    # The broker's text of a refused forwarded request dumps the whole request.
    text = text.split("Request(", 1)[0].strip(" :").removesuffix("Request").strip(" :")
    return f"access denied: {what}" + (f": {text}" if text else "")


def is_denial(text: str) -> bool:
    """Whether an error's text says the cluster refused the client's identity or rights."""
    return any(marker.lower() in text.lower() for marker in DENIAL_MARKERS)


# -- what the configured principal may do, asked before a command starts ----------------

_MAY = {"read": AclOperation.READ, "write": AclOperation.WRITE}


def check_topic_access(
    client_config: Mapping[str, Any],
    principal: str | None,
    *,
    reads: Sequence[str] = (),
    writes: Sequence[str] = (),
    timeout: float = 10.0,
) -> None:
    """Raise ``AccessDeniedError`` (one line naming the principal, the operation and
    the topic) when the cluster says the client may not read ``reads`` or write
    ``writes``. Asked through the topics' authorized operations (KIP-430); a
    cluster without an authorizer, or a topic that does not exist, passes: the
    command's own reads and writes then say what is wrong."""
    wanted = [(t, "read") for t in reads] + [(t, "write") for t in writes]
    if not wanted:
        return
    admin = AdminClient(dict(client_config))
    names = sorted({t for t, _ in wanted})
    futures = admin.describe_topics(
        TopicCollection(names), include_authorized_operations=True, request_timeout=timeout
    )
    who = f"User:{principal}" if principal else "this client"
    allowed: dict[str, set[AclOperation] | None] = {}
    for name, future in futures.items():
        try:
            description = future.result(timeout=timeout)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                allowed[name] = set()
                continue
            if denial_text(error):
                raise AccessDeniedError(denial_text(error) or "") from None
            allowed[name] = None  # unknown topic, timeout: not ours to judge here
            continue
        operations = description.authorized_operations
        allowed[name] = None if operations is None else set(operations)
    for topic, operation in wanted:
        ops = allowed.get(topic)
        if ops is None or _MAY[operation] in ops or AclOperation.ALL in ops:
            continue
        raise AccessDeniedError(
            f"access denied: {who} may not {operation} {topic} "
            "(turnaudit acls plan shows which principal may)"
        )


# A group's coordinator moving or loading: asked again, briefly.
_COORDINATOR_BUSY = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}


def check_group_access(
    client_config: Mapping[str, Any],
    principal: str | None,
    group: str,
    *,
    timeout: float = 10.0,
) -> None:
    """Raise ``AccessDeniedError`` (one line naming the principal and the group) when
    the cluster says the client may not use the consumer group ``group``: join it,
    commit to it. Asked through the group's description (its authorized operations,
    KIP-430), which a group nobody joined yet has too; a cluster without an
    authorizer passes, as does a coordinator that does not answer in ``timeout``
    (the command's own join then says what is wrong)."""
    admin = AdminClient(dict(client_config))
    who = f"User:{principal}" if principal else "this client"
    deadline = time.monotonic() + timeout
    while True:
        future = admin.describe_consumer_groups(
            [group], include_authorized_operations=True, request_timeout=timeout
        )[group]
        try:
            description = future.result(timeout=timeout)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                break
            if denial_text(error):
                raise AccessDeniedError(denial_text(error) or "") from None
            if error.code() in _COORDINATOR_BUSY and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            return  # not ours to judge here
        operations = description.authorized_operations
        if operations is None or {AclOperation.READ, AclOperation.ALL} & set(operations):
            return
        break
    raise AccessDeniedError(
        f"access denied: {who} may not use the consumer group {group} "
        "(turnaudit acls plan shows which principal may)"
    )
