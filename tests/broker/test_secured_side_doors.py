"""The side doors of the secured cluster, tried: each principal of the plan, with its
own client and only its ACLs, against every other principal's consumer groups (join,
commit offsets), every topic (read, write) and the redrive path; and the secured
start itself (no password on any command line, the broker's files its owner's alone).

One secured cluster for the session (tests/broker/conftest.py), planned here for its
own prefix with two subscriber teams. Each principal's checks share one admin client,
one producer and one set of consumers, so the table (10 principals, 8 topics, every
group) stays a few seconds.
"""

from __future__ import annotations

import json
import stat
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AclOperation, AdminClient

from tests.support.cli import run_turnaudit
from tests.support.clusters import SecuredCluster, admin_settings, principal_env, tool_calls
from tests.support.events import encode, turn
from turnaudit.dead_letters import dead_letter_headers
from turnaudit.kafka.acls import AclRule, Role, apply_acls, plan_acls, principals, upsert_users
from turnaudit.kafka.groups import replay_group_id
from turnaudit.kafka.state_topic import ensure_verify_state_topic
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import LocalKafkaBroker
from turnaudit.local_broker.credentials import password
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TOPIC_SUFFIXES

pytestmark = pytest.mark.broker

PREFIX = "ops-audit."
TEAMS = ("demo", "ops")  # under the old plan, team ops's groups ops-* held every ops-audit.*
TOPICS = tuple(PREFIX + suffix for suffix in TOPIC_SUFFIXES)
QUIET = {"log_level": 0}
DENIED_GROUP = "GROUP_AUTHORIZATION_FAILED"
DENIED_TOPIC = "TOPIC_AUTHORIZATION_FAILED"


@dataclass(frozen=True)
class Side:
    broker: LocalKafkaBroker
    admin: KafkaSettings
    rules: list[AclRule]

    @property
    def users(self) -> list[str]:
        return principals(TEAMS)

    def config(self, user: str) -> dict[str, object]:
        options = self.broker.security(user).client_options()
        return {"bootstrap.servers": self.broker.bootstrap_servers, "log_level": 0, **options}

    def may(self, user: str, operation: str, topic: str) -> bool:
        return any(
            r.principal == user
            and r.resource == "topic"
            and r.operation == operation
            and r.covers(topic)
            for r in self.rules
        )

    def groups_of(self, user: str) -> list[str]:
        """A group under each of ``user``'s group grants: the literal name, or a name in
        the namespace."""
        return [
            r.name + "probe" if r.prefixed else r.name
            for r in self.rules
            if r.principal == user and r.resource == "group"
        ]

    def read_topic(self, user: str) -> str:
        """A topic ``user`` may read (so a refused commit is about the group alone)."""
        readable = [t for t in TOPICS if self.may(user, "read", t)]
        return readable[0] if readable else PREFIX + "turn-events"


@pytest.fixture(scope="module")
def side(secured: SecuredCluster) -> Side:
    broker = secured.broker
    admin = admin_settings(broker, PREFIX)
    config = admin.client_config({"log_level": 0})
    # A second subscriber team, so a subscriber meets another subscriber's groups too.
    upsert_users(config, {"subscriber-ops": password(broker.secrets_dir, "subscriber-ops")})
    rules = plan_acls(PREFIX, subscribers=TEAMS)
    apply_acls(config, rules)
    ensure_topics(admin, strict=True)
    ensure_verify_state_topic(admin)
    # A message on every topic: a read that were let through would find one. The turn
    # events' holds the original of the dead letters (at 0:0), so the redriver's redrive
    # can prove the letter it writes back.
    producer = Producer(admin.client_config(QUIET))
    letter = encode(turn("s-side-door", 0))
    producer.produce(PREFIX + "turn-events", letter, b"k", partition=0)
    assert producer.flush(10) == 0
    for topic in TOPICS:
        if topic != PREFIX + "turn-events":
            producer.produce(
                topic,
                letter,
                b"k",
                headers=dead_letter_headers(
                    reason="unknown_schema",
                    error="parked for the side-door test",
                    topic=PREFIX + "turn-events",
                    partition=0,
                    offset=0,
                    stage=f"log-sink/{PREFIX}log-sink",
                ),
            )
    assert producer.flush(10) == 0
    return Side(broker, admin, rules)


# -- topics ------------------------------------------------------------------------------


def authorized(side: Side, user: str) -> dict[str, set[str]]:
    """The cluster's answer: which of read/write ``user`` may do on each topic."""
    admin = AdminClient(side.config(user))
    futures = admin.describe_topics(
        TopicCollection(list(TOPICS)), include_authorized_operations=True
    )
    may: dict[str, set[str]] = {}
    refused: dict[str, str] = {}
    for topic, future in futures.items():
        try:
            operations = set(future.result(timeout=10).authorized_operations or [])
        except KafkaException as exc:  # not even allowed to describe it
            refused[topic] = exc.args[0].name()
            operations = set()
        may[topic] = {
            name
            for name, op in (("read", AclOperation.READ), ("write", AclOperation.WRITE))
            if op in operations or AclOperation.ALL in operations
        }
    assert set(refused.values()) <= {DENIED_TOPIC}, (user, refused)
    return may


def refused_writes(side: Side, user: str, topics: list[str]) -> dict[str, str]:
    """Produce one record to each topic; the error each delivery got."""
    producer = Producer({**side.config(user), "message.timeout.ms": 10_000})
    errors: dict[str, str] = {}

    def report(err: KafkaError | None, msg: object) -> None:
        errors[msg.topic()] = err.name() if err is not None else "written"  # type: ignore[attr-defined]  # a Message

    for topic in topics:
        producer.produce(topic, b"forged", b"k", on_delivery=report)
    producer.flush(15)
    return errors


def refused_reads(side: Side, user: str, topics: list[str]) -> dict[str, str]:
    """Fetch each topic from its start (it holds a message); what the cluster said. A
    topic the principal may not even describe is refused at the metadata request."""
    consumer = Consumer(
        {**side.config(user), "group.id": f"{PREFIX}{user}.probe", "enable.auto.commit": False}
    )
    said: dict[str, str] = {}
    try:
        partitions: list[TopicPartition] = []
        for topic in topics:
            known = consumer.list_topics(topic, timeout=10).topics[topic]
            if known.error is not None:
                said[topic] = known.error.name()
            else:
                partitions += [TopicPartition(topic, p, 0) for p in known.partitions]
        fetchable = {tp.topic for tp in partitions}
        consumer.assign(partitions)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and fetchable - set(said):
            msg = consumer.poll(0.2)
            if msg is None or msg.topic() is None:
                continue
            error = msg.error()
            said.setdefault(msg.topic(), error.name() if error is not None else "read")
    finally:
        consumer.close()
    return said


def test_each_principal_reads_and_writes_exactly_what_the_plan_gives_it(side: Side) -> None:
    table: list[str] = []
    for user in side.users:
        may = authorized(side, user)
        expected = {t: {op for op in ("read", "write") if side.may(user, op, t)} for t in TOPICS}
        assert may == expected, user
        cannot_write = [t for t in TOPICS if "write" not in expected[t]]
        cannot_read = [t for t in TOPICS if "read" not in expected[t]]
        writes = refused_writes(side, user, cannot_write)
        reads = refused_reads(side, user, cannot_read)
        assert writes == dict.fromkeys(cannot_write, DENIED_TOPIC), user
        assert reads == dict.fromkeys(cannot_read, DENIED_TOPIC), user
        table.append(f"{user}: writes {len(writes)} refused, reads {len(reads)} refused")
    print("\n".join(table))
    # The control topics: one writer each, whoever else tries.
    assert [u for u in side.users if side.may(u, "write", PREFIX + "schemas")] == ["runtime"]
    assert [u for u in side.users if side.may(u, "write", PREFIX + "checkpoints")] == ["runtime"]


# -- groups ------------------------------------------------------------------------------


def commit_outcomes(side: Side, user: str, groups: list[str]) -> dict[str, str]:
    """Commit offset 0 of a topic ``user`` reads to each group, as a member-less commit
    (AdminClient.alter_consumer_group_offsets: what moved a service's offsets)."""
    admin = AdminClient(side.config(user))
    topic = side.read_topic(user)
    futures = {
        group: admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])],
            request_timeout=10,
        )[group]
        for group in groups
    }
    outcome: dict[str, str] = {}
    for group, future in futures.items():
        try:
            future.result(timeout=15)
            outcome[group] = "committed"
        except KafkaException as exc:
            outcome[group] = exc.args[0].name()
    return outcome


def join_outcomes(side: Side, user: str, groups: list[str]) -> dict[str, str]:
    """Join each group (subscribe to a topic ``user`` reads) at once: ``assigned``, or
    the error the cluster answered."""
    topic = side.read_topic(user)
    members = {
        group: Consumer({**side.config(user), "group.id": group, "enable.auto.commit": False})
        for group in groups
    }
    outcome: dict[str, str] = {}
    try:
        for consumer in members.values():
            consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(outcome) < len(members):
            for group, consumer in members.items():
                if group in outcome:
                    continue
                msg = consumer.poll(0.05)
                if msg is not None and msg.error() is not None:
                    if msg.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                        outcome[group] = msg.error().name()
                elif consumer.assignment():
                    outcome[group] = "assigned"
    finally:
        for consumer in members.values():
            consumer.close()
    return outcome


def test_no_principal_joins_or_commits_to_another_principals_groups(side: Side) -> None:
    owned = {user: side.groups_of(user) for user in side.users}
    # Every reader has groups of its own; the runtime reads nothing, so it has none.
    assert [u for u in side.users if not owned[u]] == [Role.RUNTIME.value]
    assert replay_group_id(PREFIX, "probe") in owned[Role.RECONCILER.value]
    counts = {"denied": 0, "own": 0}
    for user in side.users:
        theirs = [g for other in side.users if other != user for g in owned[other]]
        mine = owned[user]
        commits = commit_outcomes(side, user, theirs + mine)
        joins = join_outcomes(side, user, theirs + mine)
        assert {g: commits[g] for g in theirs} == dict.fromkeys(theirs, DENIED_GROUP), user
        assert {g: joins.get(g) for g in theirs} == dict.fromkeys(theirs, DENIED_GROUP), user
        # Its own groups work: the denials above are about whose group it is.
        assert {g: commits[g] for g in mine} == dict.fromkeys(mine, "committed"), user
        assert {g: joins.get(g) for g in mine} == dict.fromkeys(mine, "assigned"), user
        counts["denied"] += 2 * len(theirs)
        counts["own"] += 2 * len(mine)
    print(f"group doors: {counts['denied']} refused, {counts['own']} own ones used")


# -- through the CLI ---------------------------------------------------------------------


def run_as(side: Side, user: str, *argv: str, cwd: Path) -> tuple[int, str, str]:
    result = run_turnaudit(
        *argv, env=principal_env(side.broker, user, PREFIX), cwd=cwd, timeout=120
    )
    return result.returncode, result.stdout, result.stderr.strip()


def turn_events_count(side: Side) -> int:
    consumer = Consumer({**side.admin.client_config(QUIET), "group.id": f"{PREFIX}admin.count"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(PREFIX + "turn-events", p), 10)[1]
            for p in range(3)
        )
    finally:
        consumer.close()


def test_only_the_redriver_redrives_and_every_other_principal_is_told_in_one_line(
    side: Side, tmp_path: Path
) -> None:
    others = [u for u in side.users if u != Role.REDRIVER.value]
    with ThreadPoolExecutor(4) as pool:
        results = dict(
            zip(
                others,
                pool.map(lambda u: run_as(side, u, "dlq", "redrive", cwd=tmp_path), others),
                strict=True,
            )
        )
    for user, (code, _, stderr) in results.items():
        assert code == 3, (user, stderr)
        assert len(stderr.splitlines()) == 1, (user, stderr)
        assert stderr.startswith(f"turnaudit dlq: access denied: User:{user} may not"), stderr
    assert turn_events_count(side) == 1  # the original alone: nothing written by any of them
    code, stdout, stderr = run_as(side, Role.REDRIVER.value, "dlq", "redrive", cwd=tmp_path)
    assert code == 0, stderr
    assert "(1 written)" in stdout
    assert turn_events_count(side) == 2


def test_a_replay_group_is_the_reconcilers_alone(side: Side, tmp_path: Path) -> None:
    group = replay_group_id(PREFIX, "probe")
    readers = [
        u for u in side.users if side.may(u, "read", PREFIX + "turn-events") and u != "reconciler"
    ]

    def replay(user: str) -> tuple[int, str, str]:
        into = f"jsonl:{tmp_path / user}.jsonl"
        return run_as(side, user, "replay", "--group", "probe", "--into", into, cwd=tmp_path)

    with ThreadPoolExecutor(4) as pool:
        results = dict(zip(readers, pool.map(replay, readers), strict=True))
    for user, (code, _, stderr) in results.items():
        assert code == 3, (user, stderr)
        assert len(stderr.splitlines()) == 1, (user, stderr)
        assert f"User:{user} may not use the consumer group {group}" in stderr
    code, _, stderr = replay(Role.RECONCILER.value)
    assert code == 0, stderr


# -- the secured start -------------------------------------------------------------------


def test_no_password_is_on_the_command_line_of_anything_the_secured_start_ran(
    secured: SecuredCluster,
) -> None:
    broker = secured.broker
    calls = tool_calls(secured.tool_calls)
    ran = [tool for tool, _ in calls]
    assert ran.count("keytool") >= 8  # the CA, the broker's certificate, the stores
    assert ran.count("java") >= 2  # the storage format, the broker
    pid = broker.status().pid
    assert pid is not None
    running = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    argvs = [argv for _, argv in calls] + [[a.decode() for a in running]]
    secrets = {f.name: f.read_text().strip() for f in broker.secrets_dir.glob("*.password")}
    assert set(secrets) >= {f"{u}.password" for u in ["admin", "keystore", *broker.users()]}
    for argv in argvs:
        for name, secret in secrets.items():
            assert not any(secret in argument for argument in argv), (name, argv[:3])
    assert not list(broker.home.rglob("format.args"))  # the storage tool's @file is gone


def modes(root: Path) -> Iterator[tuple[Path, int]]:
    yield root, stat.S_IMODE(root.stat().st_mode)
    for path in root.rglob("*"):
        yield path, stat.S_IMODE(path.lstat().st_mode)


def test_the_brokers_folder_and_files_are_its_owners_alone(
    secured: SecuredCluster, side: Side
) -> None:
    broker = secured.broker
    pid = broker.status().pid
    assert "Umask:\t0077" in Path(f"/proc/{pid}/status").read_text()
    assert stat.S_IMODE(broker.home.stat().st_mode) == 0o700
    found = dict(modes(broker.data_dir))
    segments = [p for p in found if p.suffix == ".log" and p.parent.name.startswith(PREFIX)]
    assert segments  # the topics' segments are there to judge
    wrong = {str(p): oct(m) for p, m in found.items() if m != (0o700 if p.is_dir() else 0o600)}
    assert wrong == {}
    for folder in (broker.secrets_dir, broker.tls_dir):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {stat.S_IMODE(f.stat().st_mode) for f in broker.secrets_dir.iterdir()} == {0o600}
    print(json.dumps({"files judged": len(found), "segments": len(segments)}))
