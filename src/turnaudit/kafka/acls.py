"""Least-privilege ACLs for the project's principals, planned for a topic prefix.

``plan_acls`` is pure: which principal may do what on which resource, as rows
a person can read and a test can hold to a table. ``apply_acls`` creates them
with the AdminClient (as a principal allowed to, the cluster's super user);
``upsert_users`` and ``delete_user`` manage the SCRAM credentials.

The principals (SCRAM user names):

* ``runtime``: the only writer of turn-events from live traffic, and the only
  writer of the control topics: the schemas (every shipped writer schema, the
  traces' and observations' too), stream heads and its signed checkpoints;
  dead letters.
* ``log-sink``, ``verdict-metrics``, ``otel-sink``: read turn-events in their
  own group, write only dead letters (the otel sink's records go to a collector,
  not to Kafka).
* ``htir-feeder``: reads turn-events in its own group, writes HTIR traces and
  dead letters.
* ``auditor``: reads HTIR traces in the group ``<prefix>auditor-worker``,
  writes observations and dead letters.
* ``reconciler`` (``verify``, ``replay``): reads turn-events, dead letters,
  stream heads and signed checkpoints; writes only ``verify --follow``'s
  checkpoints (``<prefix>verify-state``, group ``<prefix>verify-follow``);
  ``replay --group NAME`` joins ``<prefix>replay.NAME``.
* ``redriver`` (``dlq redrive``): reads dead letters and turn-events, writes
  turn-events: the redriven originals. No service principal can redrive.
* ``subscriber-<team>``: reads turn-events and the schemas; its groups are
  ``<prefix>subscriber-<team>.*``.

Every principal that reads has its own group namespace ``<prefix><user>.``
(``turnaudit.kafka.groups``); no two principals' group grants overlap. Every
reader also reads ``<prefix>schemas``: it holds the public writer schemas,
nothing a turn said.
"""

from __future__ import annotations

import concurrent.futures
import enum
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from turnaudit.errors import AccessDeniedError, BrokerError, ConfigurationError
from turnaudit.kafka.access import denial_text
from turnaudit.kafka.admin import new_admin
from turnaudit.kafka.groups import namespace, replay_namespace, service_group
from turnaudit.topic_names import DEFAULT_TOPIC_PREFIX, TOPIC_NAME_CHARACTERS, TopicNames


class Role(enum.StrEnum):
    """The project's principals, by the part each plays (also their user names)."""

    RUNTIME = "runtime"
    LOG_SINK = "log-sink"
    VERDICT_METRICS = "verdict-metrics"
    OTEL_SINK = "otel-sink"
    HTIR_FEEDER = "htir-feeder"
    AUDITOR = "auditor"
    RECONCILER = "reconciler"
    REDRIVER = "redriver"
    ARCHIVER = "archiver"


ADMIN_PRINCIPAL = "admin"  # the super user: creates topics and ACLs, in no ACL itself
SUBSCRIBER_PREFIX = "subscriber-"
# Each service's consumer group (a literal name after the prefix) and the principal
# it runs as: consumers/runtime/settings.py's ServiceName holds the same names.
SERVICE_GROUPS: Mapping[str, Role] = {
    "log-sink": Role.LOG_SINK,
    "verdict-metrics": Role.VERDICT_METRICS,
    "otel-sink": Role.OTEL_SINK,
    "htir-feeder": Role.HTIR_FEEDER,
    "auditor-worker": Role.AUDITOR,
    "verify-follow": Role.RECONCILER,
    "archive": Role.ARCHIVER,
}


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

    def covers(self, name: str) -> bool:
        """Whether this rule's pattern matches the resource ``name``."""
        return name.startswith(self.name) if self.prefixed else name == self.name


def check_team(team: str, what: str = "--subscriber") -> str:
    """``team``, when it names a subscriber team: ASCII letters, digits, ``-`` and
    ``_`` (a topic name's characters without the dot, so that one team's group
    namespace ``<prefix>subscriber-<team>.`` is never under another's); else
    ``ConfigurationError``, one line."""
    if not team or any(c not in TOPIC_NAME_CHARACTERS or c == "." for c in team):
        raise ConfigurationError(
            f"{what} {team!r}: name the team with ASCII letters, digits, '-' or '_'"
        )
    return team


def plan_acls(
    prefix: str = DEFAULT_TOPIC_PREFIX, *, subscribers: Sequence[str] = ()
) -> list[AclRule]:
    """The ACLs of every principal for topics under ``prefix``, sorted. A prefix
    Kafka would refuse (``check_topic_prefix``) or a bad team name
    (``check_team``) is a ``ConfigurationError``."""
    t = TopicNames(prefix)
    for team in subscribers:
        check_team(team)
    rules: list[AclRule] = []

    def topic(user: str, name: str, *operations: str) -> None:
        rules.extend(AclRule(user, "topic", name, False, op) for op in operations)

    def group(user: str, name: str, *, prefixed: bool) -> None:
        rules.append(AclRule(user, "group", name, prefixed, "read"))

    def own_groups(user: str) -> None:
        group(user, namespace(prefix, user), prefixed=True)

    # Checkpoints: each publisher stream's last head (a successor announces a
    # predecessor's), and verify --follow's own progress.
    stream_heads, verify_state = t.stream_heads, t.verify_state
    checkpoints = t.checkpoints  # signed: docs/trust.md

    # The control topics (schemas, stream heads, checkpoints) have one writer.
    runtime = Role.RUNTIME.value
    topic(runtime, t.turn_events, "write")
    topic(runtime, t.schemas, "write")
    topic(runtime, t.dlq, "write")
    topic(runtime, stream_heads, "write")
    topic(runtime, checkpoints, "write")
    rules.extend(_sealing_rules(t))

    for service, role in SERVICE_GROUPS.items():
        group(role.value, service_group(prefix, service), prefixed=False)

    for role in (Role.LOG_SINK, Role.VERDICT_METRICS, Role.OTEL_SINK, Role.HTIR_FEEDER):
        topic(role.value, t.turn_events, "read")
        topic(role.value, t.schemas, "read")
        topic(role.value, t.dlq, "write")
        own_groups(role.value)
    topic(Role.HTIR_FEEDER.value, t.htir_traces, "write")

    auditor = Role.AUDITOR.value
    topic(auditor, t.htir_traces, "read")
    topic(auditor, t.schemas, "read")
    topic(auditor, t.auditor_observations, "write")
    topic(auditor, t.dlq, "write")
    own_groups(auditor)

    reconciler = Role.RECONCILER.value
    topic(reconciler, t.turn_events, "read")
    topic(reconciler, t.schemas, "read")
    topic(reconciler, t.dlq, "read")
    topic(reconciler, stream_heads, "read")
    topic(reconciler, checkpoints, "read")
    topic(reconciler, verify_state, "read", "write")
    own_groups(reconciler)
    group(reconciler, replay_namespace(prefix), prefixed=True)

    redriver = Role.REDRIVER.value
    topic(redriver, t.dlq, "read")
    topic(redriver, t.turn_events, "read", "write")
    topic(redriver, t.schemas, "read")
    own_groups(redriver)

    rules.extend(_archiver_rules(prefix, t))

    for team in subscribers:
        name = subscriber_principal(team)
        topic(name, t.turn_events, "read")
        topic(name, t.schemas, "read")
        own_groups(name)
    return sorted(set(rules))


def _archiver_rules(prefix: str, t: TopicNames) -> list[AclRule]:
    """The archiver reads what it keeps: the turns and the control topics, one group each
    (``<prefix>archive``, then ``<prefix>archive-<topic>``: turnaudit.commands.archive)."""
    archiver = Role.ARCHIVER.value
    kept = (t.turn_events, t.stream_heads, t.checkpoints)
    return [
        *(AclRule(archiver, "topic", name, False, "read") for name in kept),
        AclRule(archiver, "group", service_group(prefix, "archive") + "-", True, "read"),
        AclRule(archiver, "group", namespace(prefix, archiver), True, "read"),
    ]


def _sealing_rules(t: TopicNames) -> list[AclRule]:
    """Sealed surfaces' wrapped data keys: the runtime writes them and the log sink, the one
    service that writes surfaces, reads them (useless without a KEK: who sees surfaces is
    who holds one, docs/privacy.md). Erasures are written by the admin (`turnaudit erase`)
    and read by the reconciler."""
    return [
        AclRule(Role.RUNTIME.value, "topic", t.surface_keys, False, "write"),
        AclRule(Role.LOG_SINK.value, "topic", t.surface_keys, False, "read"),
        AclRule(Role.RECONCILER.value, "topic", t.erasures, False, "read"),
    ]


def subscriber_principal(team: str) -> str:
    return f"{SUBSCRIBER_PREFIX}{team}"


def subscriber_groups(prefix: str, team: str) -> str:
    """The team's groups, as docs/subscribers.md names them: this, then a purpose."""
    return namespace(prefix, subscriber_principal(team))


def principals(subscribers: Iterable[str] = ()) -> list[str]:
    """Every user name the plan names (the admin is not in it)."""
    return [role.value for role in Role] + [subscriber_principal(t) for t in subscribers]


def upsert_user(
    admin_config: Mapping[str, Any], user: str, password: str, timeout: float = 30.0
) -> None:
    """Create or change ``user``'s SCRAM-SHA-512 credential (a new subscriber team's)."""
    upsert_users(admin_config, {user: password}, timeout)


def upsert_users(
    admin_config: Mapping[str, Any], passwords: Mapping[str, str], timeout: float = 30.0
) -> None:
    """Create or change each user's SCRAM-SHA-512 credential, in one request to the
    cluster: the password travels in the request (over TLS), never on a command line."""
    admin = new_admin(admin_config)
    upsertions: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode()
        )
        for user, password in passwords.items()
    ]
    futures = admin.alter_user_scram_credentials(upsertions, request_timeout=timeout)
    for user, future in futures.items():
        try:
            future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            raise BrokerError(f"cannot add user {user}: no answer within {timeout:g} s") from None
        except KafkaException as exc:
            text = denial_text(exc.args[0])
            if text:
                raise AccessDeniedError(f"cannot add user {user}: {text}") from None
            raise BrokerError(f"cannot add user {user}: {exc.args[0].str()}") from None


def known_users(
    admin_config: Mapping[str, Any], users: Iterable[str], timeout: float = 10.0
) -> set[str]:
    """Which of ``users`` the cluster holds a SCRAM credential of."""
    admin = new_admin(admin_config)
    known: set[str] = set()
    futures = admin.describe_user_scram_credentials(sorted(users), request_timeout=timeout)
    for user, future in futures.items():  # type: ignore[union-attr]  # a dict when users are named
        try:
            future.result(timeout=timeout)
        except KafkaException:
            continue  # RESOURCE_NOT_FOUND: no credential (yet)
        known.add(user)
    return known


def await_users(
    admin_config: Mapping[str, Any], users: Iterable[str], timeout: float = 10.0
) -> None:
    """Return once the cluster names every one of ``users``' credentials (a credential
    added is served a moment after the controller took it)."""
    wanted = set(users)
    deadline = time.monotonic() + timeout
    while (missing := wanted - known_users(admin_config, wanted)) and time.monotonic() < deadline:
        time.sleep(0.1)
    if missing:
        raise BrokerError(
            f"the cluster does not serve the credentials of {', '.join(sorted(missing))}"
        )


def delete_user(admin_config: Mapping[str, Any], user: str, timeout: float = 30.0) -> None:
    """Remove ``user``'s SCRAM-SHA-512 credential: its password no longer opens a session
    (how a leaked or expired credential is revoked)."""
    admin = new_admin(admin_config)
    deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
    try:
        admin.alter_user_scram_credentials([deletion])[user].result(timeout=timeout)
    except KafkaException as exc:
        raise BrokerError(f"cannot revoke {user}: {exc.args[0].str()}") from None


def writers_of(rules: Iterable[AclRule], topic: str) -> set[str]:
    """The principals ``rules`` let write ``topic``."""
    return {
        r.principal
        for r in rules
        if r.resource == "topic" and r.operation == "write" and r.covers(topic)
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
    admin = new_admin(admin_config)
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
