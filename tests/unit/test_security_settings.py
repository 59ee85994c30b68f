"""Credentials and local-cluster settings: one line for every wrong value, and a
password that never shows in a repr, an error or a log line."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnaudit.errors import ConfigurationError
from turnaudit.kafka.acls import AclRule, plan_acls, principals, writers_of
from turnaudit.kafka.topics import plan_replication
from turnaudit.local_broker import LocalBrokerSettings
from turnaudit.settings import KafkaSettings

SECRET = "s3cret-never-shown"  # noqa: S105


def test_credentials_from_a_file_reach_librdkafka_and_never_the_repr(tmp_path: Path) -> None:
    password = tmp_path / "pw"
    password.write_text(SECRET + "\n")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    settings = KafkaSettings.from_env(
        {
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
            "TURNAUDIT_KAFKA_USERNAME": "runtime",
            "TURNAUDIT_KAFKA_PASSWORD_FILE": str(password),
            "TURNAUDIT_KAFKA_CA_FILE": str(ca),
        }
    )
    config = settings.client_config()
    assert config["security.protocol"] == "sasl_ssl"
    assert config["sasl.mechanisms"] == "SCRAM-SHA-512"
    assert config["sasl.username"] == "runtime"
    assert config["sasl.password"] == SECRET
    assert config["ssl.ca.location"] == str(ca)
    assert SECRET not in repr(settings)
    assert SECRET not in str(settings.security)
    assert settings.security.principal == "runtime"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"TURNAUDIT_KAFKA_USERNAME": "runtime"}, "has no password"),
        ({"TURNAUDIT_KAFKA_PASSWORD": SECRET}, "without TURNAUDIT_KAFKA_USERNAME"),
        (
            {
                "TURNAUDIT_KAFKA_USERNAME": "r",
                "TURNAUDIT_KAFKA_PASSWORD": SECRET,
                "TURNAUDIT_KAFKA_PASSWORD_FILE": "/x",
            },
            "keep one",
        ),
        (
            {"TURNAUDIT_KAFKA_USERNAME": "r", "TURNAUDIT_KAFKA_PASSWORD_FILE": "/no/such"},
            "cannot be read",
        ),
        (
            {
                "TURNAUDIT_KAFKA_USERNAME": "r",
                "TURNAUDIT_KAFKA_PASSWORD": SECRET,
                "TURNAUDIT_KAFKA_SASL_MECHANISM": "GSSAPI",
            },
            "choose SCRAM-SHA-512",
        ),
        ({"TURNAUDIT_KAFKA_SECURITY_PROTOCOL": "tls"}, "choose plaintext"),
        ({"TURNAUDIT_KAFKA_SECURITY_PROTOCOL": "sasl_ssl"}, "needs TURNAUDIT_KAFKA_USERNAME"),
        ({"TURNAUDIT_KAFKA_CA_FILE": "/no/such.pem"}, "no such file"),
    ],
)
def test_a_wrong_credential_setting_is_one_line(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        KafkaSettings.from_env(env)
    text = str(caught.value)
    assert says in text
    assert "\n" not in text
    assert SECRET not in text


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"TURNAUDIT_BROKER_NODES": "2"}, "choose 1 or 3"),
        ({"TURNAUDIT_BROKER_SECURITY": "kerberos"}, "choose plaintext or sasl_ssl"),
        ({"TURNAUDIT_BROKER_NODES": "3", "TURNAUDIT_BROKER_PORTS": "1,2"}, "2 ports for 3 nodes"),
        ({"TURNAUDIT_BROKER_PORTS": "a,b"}, "comma-separated port numbers"),
    ],
)
def test_a_wrong_local_cluster_setting_is_one_line(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        LocalBrokerSettings.from_env(env)


def test_three_nodes_get_their_own_ports() -> None:
    settings = LocalBrokerSettings.from_env(
        {"TURNAUDIT_BROKER_NODES": "3", "TURNAUDIT_BROKER_SECURITY": "SASL_SSL"}
    )
    assert settings.node_ports() == [(9092, 19093), (10092, 20093), (11092, 21093)]
    assert settings.bootstrap_servers == "127.0.0.1:9092,127.0.0.1:10092,127.0.0.1:11092"
    assert settings.secured


# -- replication ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("brokers", "factor", "isr", "unsafe", "expected"),
    [
        (1, None, None, False, (1, 1)),
        (3, None, None, False, (3, 2)),
        (5, None, None, False, (3, 2)),
        (3, 3, 3, True, (3, 3)),
        (3, 1, None, True, (1, 1)),
        (3, 2, 1, False, (2, 1)),
    ],
)
def test_replication_defaults_and_overrides(
    brokers: int, factor: int | None, isr: int | None, unsafe: bool, expected: tuple[int, int]
) -> None:
    got = plan_replication(brokers, factor, isr, allow_unsafe=unsafe)
    assert (got.factor, got.min_insync) == expected


@pytest.mark.parametrize(
    ("brokers", "factor", "isr", "says"),
    [
        (3, 3, 3, "one broker down stops every write"),
        (3, 1, None, "one broker lost loses turns"),
        (1, 3, None, "needs 3 brokers"),
        (3, 2, 3, "above replication factor"),
    ],
)
def test_unsafe_replication_is_refused(
    brokers: int, factor: int, isr: int | None, says: str
) -> None:
    with pytest.raises(ConfigurationError, match=says):
        plan_replication(brokers, factor, isr)


# -- the ACL plan, as a table --------------------------------------------------------------

P = "turn-audit."


def table(rules: list[AclRule]) -> set[tuple[str, str, str, str]]:
    return {
        (r.principal, r.operation, r.resource, r.name + ("*" if r.prefixed else "")) for r in rules
    }


def test_the_plan_is_least_privilege() -> None:
    rules = table(plan_acls(P, subscribers=["fraud"]))
    expected: set[tuple[str, str, str, str]] = {
        ("runtime", "write", "topic", P + "turn-events"),
        ("runtime", "write", "topic", P + "schemas"),
        ("runtime", "write", "topic", P + "dlq"),
        ("runtime", "write", "topic", P + "stream-heads"),
        ("runtime", "write", "topic", P + "checkpoints"),
        ("reconciler", "read", "topic", P + "stream-heads"),
        ("reconciler", "read", "topic", P + "checkpoints"),
        ("reconciler", "read", "topic", P + "verify-state"),
        ("reconciler", "write", "topic", P + "verify-state"),
        ("reconciler", "read", "group", P + "verify-follow"),
        ("reconciler", "read", "group", P + "replay.*"),
        ("reconciler", "read", "topic", P + "turn-events"),
        ("reconciler", "read", "topic", P + "schemas"),
        ("reconciler", "read", "topic", P + "dlq"),
        ("auditor", "read", "topic", P + "htir-traces"),
        ("auditor", "read", "topic", P + "schemas"),
        ("auditor", "write", "topic", P + "auditor-observations"),
        ("auditor", "write", "topic", P + "dlq"),
        ("auditor", "read", "group", P + "auditor-worker"),
        ("redriver", "read", "topic", P + "dlq"),
        ("redriver", "read", "topic", P + "turn-events"),
        ("redriver", "write", "topic", P + "turn-events"),
        ("redriver", "read", "topic", P + "schemas"),
        ("subscriber-fraud", "read", "topic", P + "turn-events"),
        ("subscriber-fraud", "read", "topic", P + "schemas"),
        ("htir-feeder", "write", "topic", P + "htir-traces"),
        # The archiver reads what it keeps, in its group per topic.
        ("archiver", "read", "topic", P + "turn-events"),
        ("archiver", "read", "topic", P + "stream-heads"),
        ("archiver", "read", "topic", P + "checkpoints"),
        ("archiver", "read", "group", P + "archive"),
        ("archiver", "read", "group", P + "archive-*"),
        # Sealed surfaces: the runtime writes data keys, the log sink (the one service that
        # writes surfaces) reads them; `turnaudit erase` runs as the admin.
        ("runtime", "write", "topic", P + "surface-keys"),
        ("log-sink", "read", "topic", P + "surface-keys"),
        ("reconciler", "read", "topic", P + "erasures"),
    }
    for service in ("log-sink", "verdict-metrics", "otel-sink", "htir-feeder"):
        expected |= {
            (service, "read", "topic", P + "turn-events"),
            (service, "read", "topic", P + "schemas"),
            (service, "write", "topic", P + "dlq"),
            (service, "read", "group", P + service),
        }
    # Every principal that reads has its own group namespace, and only one.
    for who in (
        "log-sink",
        "verdict-metrics",
        "otel-sink",
        "htir-feeder",
        "auditor",
        "reconciler",
        "redriver",
        "archiver",
        "subscriber-fraud",
    ):
        expected.add((who, "read", "group", f"{P}{who}.*"))
    assert rules == expected


def test_no_principal_but_the_runtime_and_the_redriver_writes_turn_events() -> None:
    rules = plan_acls("x.", subscribers=["a", "b"])
    assert writers_of(rules, "x.turn-events") == {"runtime", "redriver"}
    assert not any(r.prefixed and r.resource == "topic" for r in rules)  # no wildcard topics
    assert not any(r.operation not in {"read", "write"} for r in rules)
    assert set(principals(["a"])) == {r.principal for r in plan_acls("x.", subscribers=["a"])}


def test_the_plan_follows_the_prefix() -> None:
    assert all(r.name.startswith("other.") for r in plan_acls("other."))
    assert writers_of(plan_acls("other."), "turn-audit.turn-events") == set()
