"""The ACL plan and the names the commands use agree, for any prefix and any teams.

Every consumer group a command can use falls under exactly one principal's
grant, the one that command runs as; no two principals' group grants overlap;
each control topic has one writer; and a prefix or team name is accepted
exactly when the names it makes are ones Kafka (and the plan) can take.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import re
import string
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support import PROJECT_ROOT
from turnaudit.checkpoints import checkpoints_topic
from turnaudit.cli import main
from turnaudit.consumers.settings import ServiceName, ServiceSettings, default_group_id
from turnaudit.errors import ConfigurationError
from turnaudit.kafka.acls import (
    SERVICE_GROUPS,
    AclRule,
    Role,
    check_team,
    plan_acls,
    principals,
    subscriber_groups,
    subscriber_principal,
    writers_of,
)
from turnaudit.kafka.consumer import KafkaConsumer
from turnaudit.kafka.groups import own_group
from turnaudit.replay.group import group_id
from turnaudit.settings import (
    DEFAULT_TOPIC_PREFIX,
    KafkaCredentials,
    KafkaSecurity,
    KafkaSettings,
    Secret,
    TopicNames,
)
from turnaudit.topic_names import TOPIC_SUFFIXES, check_topic_prefix

LEGAL = string.ascii_letters + string.digits + "._-"
prefixes = st.text(alphabet=LEGAL, max_size=40) | st.text(
    alphabet=LEGAL, min_size=225, max_size=229
)
teams = st.lists(
    st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=1, max_size=12),
    max_size=4,
    unique=True,
)
# Anything a user may type after --group (the replay command refuses whitespace).
replay_names = st.text(min_size=1, max_size=20).filter(lambda s: not any(c.isspace() for c in s))
purposes = st.text(alphabet=string.ascii_lowercase + "-", min_size=1, max_size=12)


def kafka_rule_accepts(name: str) -> bool:
    """Kafka's own test of a topic name (``Topic.validate``), written out apart from the
    project's: not empty, not ``.`` or ``..``, at most 249 characters, each an ASCII
    letter or digit, ``.``, ``_`` or ``-``."""
    if name in ("", ".", ".."):
        return False
    if len(name) > 249:
        return False
    return all(
        ("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9") or c in "._-" for c in name
    )


def group_grants(rules: list[AclRule]) -> list[AclRule]:
    return [r for r in rules if r.resource == "group"]


def owners(rules: list[AclRule], group: str) -> set[str]:
    return {r.principal for r in group_grants(rules) if r.covers(group)}


def as_user(user: str, prefix: str) -> KafkaSettings:
    return KafkaSettings(
        bootstrap_servers="stand-in:9092",
        topics=TopicNames(prefix),
        security=KafkaSecurity("sasl_ssl", KafkaCredentials(user, Secret("x"))),
    )


def groups_in_use(
    prefix: str, team_names: list[str], replay_name: str, purpose: str
) -> list[tuple[str, str]]:
    """(group, the principal the command that uses it runs as), from the code that
    names each group."""
    used: list[tuple[str, str]] = []
    for service in ServiceName:
        runs_as = SERVICE_GROUPS[service.value].value
        used.append((default_group_id(prefix, service), runs_as))
        env = {"TURNAUDIT_TOPIC_PREFIX": prefix}
        used.append((ServiceSettings.from_env(service, env).group_id, runs_as))
    used.append((group_id(prefix, replay_name), Role.RECONCILER.value))
    readers = [p for p in principals(team_names) if p != Role.RUNTIME.value]
    for user in readers:
        settings = as_user(user, prefix)
        for made in ("reader", "offsets", "replay-reader", "auditor-run"):
            used.append((own_group(settings, made), user))
        used.append((KafkaConsumer(settings, prefix + "turn-events").group_id, user))
    for team in team_names:
        used.append((subscriber_groups(prefix, team) + purpose, subscriber_principal(team)))
    return used


@given(prefix=prefixes, team_names=teams, replay_name=replay_names, purpose=purposes)
@example(prefix="turn-audit.", team_names=["turn"], replay_name="x", purpose="a")
@example(prefix="", team_names=["replay", "log-sink", "a", "a-b"], replay_name="a.", purpose="a")
@settings(max_examples=150, deadline=None)
def test_every_group_a_command_uses_is_granted_to_exactly_the_principal_it_runs_as(
    prefix: str, team_names: list[str], replay_name: str, purpose: str
) -> None:
    rules = plan_acls(prefix, subscribers=team_names)
    for group, runs_as in groups_in_use(prefix, team_names, replay_name, purpose):
        assert owners(rules, group) == {runs_as}, group


@given(prefix=prefixes, team_names=teams)
@example(prefix="turn-audit.", team_names=["turn"])  # the probe: turn-* held every service group
@example(prefix="", team_names=["replay", "a", "a_b", "a-b"])
@settings(max_examples=200)
def test_no_two_principals_group_grants_overlap(prefix: str, team_names: list[str]) -> None:
    grants = group_grants(plan_acls(prefix, subscribers=team_names))
    for a, b in itertools.combinations(grants, 2):
        if a.principal == b.principal:
            continue
        assert not a.covers(b.name), (a.describe(), b.describe())
        assert not b.covers(a.name), (a.describe(), b.describe())
    # Each service group is one literal name, granted once.
    literal = [r for r in grants if not r.prefixed]
    assert sorted(r.name for r in literal) == sorted(prefix + s for s in SERVICE_GROUPS)


def test_the_services_and_the_plan_name_the_same_groups() -> None:
    assert set(SERVICE_GROUPS) == {service.value for service in ServiceName}


@given(prefix=prefixes, team_names=teams)
@settings(max_examples=100)
def test_each_control_topic_has_one_writer_and_only_the_redriver_redrives(
    prefix: str, team_names: list[str]
) -> None:
    rules = plan_acls(prefix, subscribers=team_names)
    t = TopicNames(prefix)
    runtime = {Role.RUNTIME.value}
    assert writers_of(rules, t.schemas) == runtime
    assert writers_of(rules, checkpoints_topic(prefix)) == runtime
    assert writers_of(rules, f"{prefix}stream-heads") == runtime
    assert writers_of(rules, f"{prefix}verify-state") == {Role.RECONCILER.value}
    assert writers_of(rules, t.turn_events) == {Role.RUNTIME.value, Role.REDRIVER.value}
    # dlq redrive reads the dead letters and the topic and writes the topic back.
    readers = {r.principal for r in rules if r.operation == "read" and r.covers(t.dlq)}
    redrivers = readers & writers_of(rules, t.turn_events)
    assert redrivers == {Role.REDRIVER.value}


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@given(prefix=st.text(max_size=12) | prefixes | st.text(min_size=228, max_size=232))
@example(prefix="bad prefix/")
@example(prefix="")
@example(prefix="x" * 229)
@example(prefix="x" * 230)
@settings(max_examples=200, deadline=None)
def test_a_prefix_is_accepted_exactly_when_kafka_accepts_every_topic_it_names(
    prefix: str,
) -> None:
    kafka_accepts = all(kafka_rule_accepts(prefix + suffix) for suffix in TOPIC_SUFFIXES)
    try:
        check_topic_prefix(prefix, "--prefix")
        accepted = True
    except ConfigurationError:
        accepted = False
    assert accepted == kafka_accepts
    code, out, err = run_cli("acls", "plan", f"--prefix={prefix}", "--json")
    if kafka_accepts:
        assert code == 0
        assert err == ""
        assert out.count("\n") == len(plan_acls(prefix))
    else:
        assert code == 2
        assert out == ""
        assert err.startswith("turnaudit acls: --prefix")
        assert err.count("\n") == 1


@given(team=st.text(max_size=14))
@example(team="a.b")
@example(team="")
@example(team="fraud")
@settings(max_examples=200, deadline=None)
def test_a_team_is_accepted_exactly_when_its_names_are_legal_and_dot_free(team: str) -> None:
    """The team's names (principal ``subscriber-<team>``, groups ``<prefix>subscriber-<team>.``)
    must be legal Kafka names, and dot-free: with a dot, team ``a.b``'s groups would fall
    under team ``a``'s."""
    legal = team != "" and kafka_rule_accepts(team) and "." not in team
    try:
        check_team(team)
        accepted = True
    except ConfigurationError:
        accepted = False
    assert accepted == legal
    code, _, err = run_cli("acls", "plan", f"--subscriber={team}", "--prefix=p.")
    assert code == (0 if legal else 2)
    if not legal:
        assert err.startswith("turnaudit acls: --subscriber")
        assert err.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [
        ("topics", "create"),
        ("acls", "plan"),
        ("acls", "apply"),
        ("simulate", "--events", "1"),
        ("replay", "--into", "jsonl:out.jsonl"),
    ],
)
def test_every_command_refuses_a_prefix_kafka_would_in_one_line_before_any_cluster(
    argv: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", "bad prefix/")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")  # nothing answers there
    code, out, err = run_cli(*argv)
    assert code == 2
    assert out == ""
    assert err == (
        f"turnaudit {argv[0]}: TURNAUDIT_TOPIC_PREFIX 'bad prefix/': Kafka topic names hold "
        "only ASCII letters, digits, '.', '_' and '-' (not ' ', '/')\n"
    )


def test_the_security_guide_says_who_writes_each_topic_as_the_plan_does() -> None:
    guide = (PROJECT_ROOT / "docs/security.md").read_text()
    section = guide.split("### Who writes what", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `([\w-]+)` \| ([^|]+) \|", section, re.M)
    assert {topic for topic, _ in rows} == set(TOPIC_SUFFIXES)
    rules = plan_acls(DEFAULT_TOPIC_PREFIX)
    for topic, writers in rows:
        named = set(re.findall(r"`([\w-]+)`", writers))
        assert named == writers_of(rules, DEFAULT_TOPIC_PREFIX + topic), topic
