"""Least-privilege ACLs for the project's principals, planned for a topic prefix.

``plan_acls`` is pure: which principal may do what on which resource, as rows
a person can read and a test can hold to a table. ``apply_acls`` creates them
with the AdminClient (as a principal allowed to, the cluster's super user);
``denial_text`` says in one line why the cluster refused a client.

The principals (SCRAM user names; every one can be renamed with ``names``):

* ``runtime``: the only writer of turn-events; writes schemas, dead letters,
  stream heads and its signed checkpoints.
* ``log-sink``, ``verdict-metrics``, ``otel-sink``: read turn-events in their
  own group, write only dead letters (the otel sink's records go to a collector,
  not to Kafka).
* ``htir-feeder``: reads turn-events in its own group, writes HTIR traces,
  their schemas and dead letters.
* ``auditor``: reads HTIR traces (groups ``<prefix>auditor-*``), writes
  observations, their schemas and dead letters.
* ``reconciler`` (``verify``, ``replay``): reads turn-events, dead letters,
  stream heads and signed checkpoints, in throwaway reader groups; writes only ``verify --follow``'s
  checkpoints (``<prefix>verify-state``, groups ``<prefix>verify-*``).
* ``subscriber-<team>``: reads turn-events in groups ``<team>-*``;
  nothing else but the schemas topic (the writer schemas it needs to decode).

Every reader also reads ``<prefix>schemas``: it holds the public writer
schemas, nothing a turn said.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from turnaudit.checkpoints import checkpoints_topic
from turnaudit.errors import AccessDeniedError, BrokerError
from turnaudit.settings import DEFAULT_TOPIC_PREFIX, TopicNames


class Role(enum.StrEnum):
    """The project's principals, by the part each plays (also their default user names)."""

    RUNTIME = "runtime"
    LOG_SINK = "log-sink"
    VERDICT_METRICS = "verdict-metrics"
    OTEL_SINK = "otel-sink"
    HTIR_FEEDER = "htir-feeder"
    AUDITOR = "auditor"
    RECONCILER = "reconciler"


ADMIN_PRINCIPAL = "admin"  # the super user: creates topics and ACLs, in no ACL itself
# Throwaway groups of the project's readers (assigned partitions, nothing committed).
READER_GROUP_PREFIXES = ("turnaudit-reader-", "turnaudit-offsets-", "turnaudit-replay-")


@dataclass(frozen=True, order=True)
class AclRule:
    """ALLOW ``principal`` to ``operation`` the ``resource`` ``name`` (a prefix when
    ``prefixed``)."""

    principal: str  # the user name, without "User:"
    resource: str  # topic, group
    name: str
    prefixed: bool
    operation: str  # read, write, describe

    def describe(self) -> str:
        pattern = f"{self.name}*" if self.prefixed else self.name
        return f"User:{self.principal} may {self.operation} {self.resource} {pattern}"


def plan_acls(
    prefix: str = DEFAULT_TOPIC_PREFIX,
    *,
    subscribers: Sequence[str] = (),
    names: Mapping[Role, str] | None = None,
) -> list[AclRule]:
    """The ACLs of every principal for topics under ``prefix``, sorted."""
    t = TopicNames(prefix)
    user = {role: (names or {}).get(role, role.value) for role in Role}
    rules: list[AclRule] = []

    def topic(role_user: str, name: str, *operations: str) -> None:
        rules.extend(AclRule(role_user, "topic", name, False, op) for op in operations)

    def group(role_user: str, name: str, *, prefixed: bool) -> None:
        rules.append(AclRule(role_user, "group", name, prefixed, "read"))

    def reader_groups(role_user: str) -> None:
        for name in READER_GROUP_PREFIXES:
            group(role_user, name, prefixed=True)

    # Checkpoints: each publisher stream's last head (a successor announces a
    # predecessor's), and verify --follow's own progress.
    stream_heads = f"{prefix}stream-heads"
    verify_state = f"{prefix}verify-state"
    checkpoints = checkpoints_topic(prefix)  # signed: docs/trust.md

    runtime = user[Role.RUNTIME]
    topic(runtime, t.turn_events, "write")
    topic(runtime, t.schemas, "write")
    topic(runtime, t.dlq, "write")
    topic(runtime, stream_heads, "write")
    topic(runtime, checkpoints, "write")

    for role in (Role.LOG_SINK, Role.VERDICT_METRICS, Role.OTEL_SINK, Role.HTIR_FEEDER):
        name = user[role]
        topic(name, t.turn_events, "read")
        topic(name, t.schemas, "read")
        topic(name, t.dlq, "write")
        group(name, f"{prefix}{role.value}", prefixed=False)
        reader_groups(name)
    feeder = user[Role.HTIR_FEEDER]
    topic(feeder, t.htir_traces, "write")
    topic(feeder, t.schemas, "write")

    auditor = user[Role.AUDITOR]
    topic(auditor, t.htir_traces, "read")
    topic(auditor, t.schemas, "read", "write")
    topic(auditor, t.auditor_observations, "write")
    topic(auditor, t.dlq, "write")
    group(auditor, f"{prefix}auditor-", prefixed=True)
    reader_groups(auditor)

    reconciler = user[Role.RECONCILER]
    topic(reconciler, t.turn_events, "read")
    topic(reconciler, t.schemas, "read")
    topic(reconciler, t.dlq, "read")
    topic(reconciler, stream_heads, "read")
    topic(reconciler, checkpoints, "read")
    topic(reconciler, verify_state, "read", "write")
    reader_groups(reconciler)
    group(reconciler, f"{prefix}replay-", prefixed=True)
    group(reconciler, f"{prefix}verify-", prefixed=True)  # verify --follow

    for team in subscribers:
        name = subscriber_principal(team)
        topic(name, t.turn_events, "read")
        topic(name, t.schemas, "read")
        group(name, subscriber_group_prefix(team), prefixed=True)
        reader_groups(name)
    return sorted(set(rules))


def subscriber_principal(team: str) -> str:
    return f"subscriber-{team}"


def subscriber_group_prefix(team: str) -> str:
    """The team's groups, as docs/subscribers.md names them: ``<team>-<purpose>``."""
    return f"{team}-"


def principals(subscribers: Iterable[str] = ()) -> list[str]:
    """Every user name the plan names (the admin is not in it)."""
    return [role.value for role in Role] + [subscriber_principal(t) for t in subscribers]


def upsert_user(
    admin_config: Mapping[str, Any], user: str, password: str, timeout: float = 30.0
) -> None:
    """Create or change ``user``'s SCRAM-SHA-512 credential (a new subscriber team's)."""
    admin = AdminClient(dict(admin_config))
    upsertion = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode()
    )
    try:
        admin.alter_user_scram_credentials([upsertion])[user].result(timeout=timeout)
    except KafkaException as exc:
        text = denial_text(exc.args[0])
        if text:
            raise AccessDeniedError(f"cannot add user {user}: {text}") from None
        raise BrokerError(f"cannot add user {user}: {exc.args[0].str()}") from None


def delete_user(admin_config: Mapping[str, Any], user: str, timeout: float = 30.0) -> None:
    """Remove ``user``'s SCRAM-SHA-512 credential: its password no longer opens a session
    (how a leaked or expired credential is revoked)."""
    admin = AdminClient(dict(admin_config))
    deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
    try:
        admin.alter_user_scram_credentials([deletion])[user].result(timeout=timeout)
    except KafkaException as exc:
        raise BrokerError(f"cannot revoke {user}: {exc.args[0].str()}") from None


def writers_of(rules: Iterable[AclRule], topic: str) -> set[str]:
    return {
        r.principal
        for r in rules
        if r.resource == "topic"
        and r.operation == "write"
        and (r.name == topic or (r.prefixed and topic.startswith(r.name)))
    }


# -- on the cluster -----------------------------------------------------------------

_OPERATIONS = {
    "read": AclOperation.READ,
    "write": AclOperation.WRITE,
    "describe": AclOperation.DESCRIBE,
}
_RESOURCES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP}


def binding(rule: AclRule) -> AclBinding:
    return AclBinding(
        _RESOURCES[rule.resource],
        rule.name,
        ResourcePatternType.PREFIXED if rule.prefixed else ResourcePatternType.LITERAL,
        f"User:{rule.principal}",
        "*",
        _OPERATIONS[rule.operation],
        AclPermissionType.ALLOW,
    )


def apply_acls(
    admin_config: Mapping[str, Any], rules: Sequence[AclRule], timeout: float = 30.0
) -> int:
    """Create ``rules`` on the cluster (creating one that exists changes nothing);
    return how many. Raises ``AccessDeniedError`` when the caller may not."""
    admin = AdminClient(dict(admin_config))
    futures = admin.create_acls([binding(r) for r in rules], request_timeout=timeout)
    for acl, future in futures.items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            error = exc.args[0]
            text = denial_text(error)
            if text:
                raise AccessDeniedError(f"cannot create ACLs: {text}") from None
            raise BrokerError(f"cannot create the ACL {acl}: {error.str()}") from None
    return len(rules)


# -- why a client was refused ----------------------------------------------------------

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
