"""The pipeline on a SASL/SCRAM-SHA-512 + TLS broker with the planned ACLs.

One secured broker for the session (tests/broker/conftest.py, from the project's
local broker code), planned here for its own prefix; every process runs as its
own principal with only the rights ``turnaudit acls plan`` gives it. Then a table
of denied actions: each one line on stderr, exit 3 (2 for a setting that cannot
even be read), no traceback.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.cli import run_turnaudit
from tests.support.clusters import (
    SecuredCluster,
    principal_env,
    reconciled,
    secure_setup,
)
from tests.support.services import turnaudit_process
from tests.support.streams import http_get
from turnaudit.kafka.acls import apply_acls, delete_user, plan_acls, upsert_user
from turnaudit.local_broker import LocalKafkaBroker, free_port
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

PREFIX = "sec."
TURNS = 300


@pytest.fixture(scope="module")
def cluster(secured: SecuredCluster) -> tuple[LocalKafkaBroker, KafkaSettings]:
    """The session's secured cluster (tests/broker/conftest.py), planned for ``PREFIX``."""
    return secured.broker, secure_setup(secured.broker, PREFIX)


def turnaudit_as(
    broker: LocalKafkaBroker, user: str, *argv: str, cwd: Path, **extra: str
) -> subprocess.CompletedProcess[str]:
    return run_turnaudit(
        *argv, env=principal_env(broker, user, PREFIX, **extra), cwd=cwd, timeout=120
    )


def ready(port: int, deadline_s: float = 60.0) -> dict[str, object]:
    deadline = time.monotonic() + deadline_s
    body: dict[str, object] = {}
    while time.monotonic() < deadline:
        try:
            code, text = http_get(port, "/readyz")
            body = json.loads(text)
            if code == 200:
                return body
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"not ready within {deadline_s:.0f} s: {body}")


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_every_service_and_command_works_with_only_its_principal(
    cluster: tuple[LocalKafkaBroker, KafkaSettings], tmp_path: Path
) -> None:
    broker, _ = cluster
    published = turnaudit_as(
        broker,
        "runtime",
        "simulate",
        "--seed",
        "7",
        "--events",
        str(TURNS),
        "--rate",
        "1000",
        "--truth",
        str(tmp_path / "truth.json"),
        "--spool-dir",
        str(tmp_path / "spool"),
        cwd=tmp_path,
    )
    assert published.returncode == 0, published.stderr
    assert f"{TURNS} delivered" in published.stdout

    log_file = tmp_path / "turns.jsonl"
    log_port, metrics_port = free_port(), free_port()
    log_env = principal_env(
        broker,
        "log-sink",
        PREFIX,
        TURNAUDIT_HTTP_PORT=str(log_port),
        TURNAUDIT_LOG_FILE=str(log_file),
    )
    metrics_env = principal_env(
        broker, "verdict-metrics", PREFIX, TURNAUDIT_HTTP_PORT=str(metrics_port)
    )
    with (
        turnaudit_process(["sink", "logs"], log_env, tmp_path / "log-sink.err"),
        turnaudit_process(["sink", "metrics"], metrics_env, tmp_path / "metrics.err"),
    ):
        assert ready(log_port)["status"] == "ok"
        assert ready(metrics_port)["status"] == "ok"
        deadline = time.monotonic() + 60
        while lines(log_file) < TURNS and time.monotonic() < deadline:
            time.sleep(0.5)
        assert lines(log_file) == TURNS
        verified = turnaudit_as(
            broker,
            "reconciler",
            "verify",
            "--log-file",
            str(log_file),
            "--metrics-url",
            f"http://127.0.0.1:{metrics_port}/metrics",
            cwd=tmp_path,
        )
    assert reconciled(verified.stdout, verified.returncode), verified.stdout + verified.stderr
    assert "lost 0" in verified.stdout

    feeder_env = principal_env(broker, "htir-feeder", PREFIX, TURNAUDIT_HTTP_PORT=str(free_port()))
    with turnaudit_process(
        ["htir", "feed", "--idle-timeout", "2"], feeder_env, tmp_path / "feeder.err"
    ):
        audited = turnaudit_as(
            broker,
            "auditor",
            "auditor",
            "run",
            "--labels",
            str(tmp_path / "truth.json"),
            "--evidence",
            str(tmp_path / "evidence.json"),
            "--traces",
            "1",
            cwd=tmp_path,
            TURNAUDIT_HTTP_PORT=str(free_port()),
        )
    assert audited.returncode == 0, audited.stderr
    assert re.search(r": [1-9]\d* traces audited", audited.stdout), audited.stdout

    replayed = turnaudit_as(
        broker, "reconciler", "replay", "--into", f"jsonl:{tmp_path / 'replay.jsonl'}", cwd=tmp_path
    )
    assert replayed.returncode == 0, replayed.stderr
    assert lines(tmp_path / "replay.jsonl") == TURNS
    subscribed = turnaudit_as(
        broker,
        "subscriber-demo",
        "replay",
        "--into",
        f"jsonl:{tmp_path / 'sub.jsonl'}",
        cwd=tmp_path,
    )
    assert subscribed.returncode == 0, subscribed.stderr


def untrusted_ca(folder: Path) -> Path:
    """A CA of its own, made with keytool: the broker's certificate is not signed by it."""
    store, pem = folder / "other-ca.p12", folder / "other-ca.pem"
    keytool = shutil.which("keytool")
    assert keytool is not None, "the test machine needs the JDK's keytool"
    common = ["-storetype", "PKCS12", "-storepass", "changeit", "-keystore", str(store)]
    subprocess.run(
        [
            keytool,
            "-genkeypair",
            "-alias",
            "ca",
            "-keyalg",
            "RSA",
            "-dname",
            "CN=someone else",
            "-ext",
            "bc:c",
            *common,
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [keytool, "-exportcert", "-rfc", "-alias", "ca", "-file", str(pem), *common],
        check=True,
        capture_output=True,
    )
    return pem


@dataclass(frozen=True)
class Denied:
    name: str
    user: str
    argv: list[str]
    exit_code: int
    says: str
    env: dict[str, str] = field(default_factory=dict)


def denied_cases(tmp: Path, other_ca: Path) -> list[Denied]:
    spool = ["--spool-dir", str(tmp / "spool")]
    return [
        Denied(
            "wrong password",
            "runtime",
            ["simulate", "--events", "5", *spool],
            3,
            "authentication failed",
            {"TURNAUDIT_KAFKA_PASSWORD_FILE": "", "TURNAUDIT_KAFKA_PASSWORD": "not-the-password"},
        ),
        Denied(
            "unknown principal",
            "mallory",
            ["replay", "--into", f"jsonl:{tmp}/m.jsonl"],
            3,
            "authentication failed",
            {"TURNAUDIT_KAFKA_PASSWORD": "guess", "TURNAUDIT_KAFKA_PASSWORD_FILE": ""},
        ),
        Denied(
            "untrusted certificate",
            "reconciler",
            ["replay", "--into", f"jsonl:{tmp}/u.jsonl"],
            3,
            "certificate verify failed",
            {"TURNAUDIT_KAFKA_CA_FILE": str(other_ca)},
        ),
        Denied(
            "revoked (expired) credential",
            "subscriber-expired",
            ["replay", "--into", f"jsonl:{tmp}/e.jsonl"],
            3,
            "authentication failed",
            {"TURNAUDIT_KAFKA_PASSWORD": "was-valid", "TURNAUDIT_KAFKA_PASSWORD_FILE": ""},
        ),
        Denied(
            "unsupported SASL mechanism",
            "runtime",
            ["simulate", "--events", "5", *spool],
            3,
            "authentication",
            {"TURNAUDIT_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256"},
        ),
        Denied(
            "a sink producing to turn-events",
            "log-sink",
            ["simulate", "--events", "5", *spool],
            3,
            f"User:log-sink may not write {PREFIX}turn-events",
        ),
        Denied(
            "the feeder producing to turn-events",
            "htir-feeder",
            ["simulate", "--events", "5", *spool],
            3,
            f"User:htir-feeder may not write {PREFIX}turn-events",
        ),
        Denied(
            "a subscriber reading traces",
            "subscriber-demo",
            ["replay", "--topic", f"{PREFIX}htir-traces", "--into", f"jsonl:{tmp}/t.jsonl"],
            3,
            f"User:subscriber-demo may not read {PREFIX}htir-traces",
        ),
        Denied(
            "a subscriber reading dead letters",
            "subscriber-demo",
            ["replay", "--topic", f"{PREFIX}dlq", "--into", f"jsonl:{tmp}/d.jsonl"],
            3,
            f"User:subscriber-demo may not read {PREFIX}dlq",
        ),
        Denied(
            "the auditor reading turn-events",
            "auditor",
            ["tail", "--show-verdicts"],
            3,
            f"User:auditor may not read {PREFIX}turn-events",
        ),
        Denied(
            "a reader creating topics",
            "reconciler",
            ["topics", "create"],
            3,
            "not authorized for the topic",
        ),
        Denied(
            "the runtime granting itself ACLs",
            "runtime",
            ["acls", "apply"],
            3,
            "not authorized for the cluster operation",
        ),
        Denied(
            "an unreadable password file",
            "runtime",
            ["simulate", "--events", "5", *spool],
            2,
            "cannot be read",
            {"TURNAUDIT_KAFKA_PASSWORD_FILE": str(tmp / "no-such-file")},
        ),
    ]


def test_denied_actions_are_one_line_and_an_exit_code(
    cluster: tuple[LocalKafkaBroker, KafkaSettings], tmp_path: Path
) -> None:
    broker, admin = cluster
    admin_config = admin.client_config({"log_level": 0})
    # A subscriber team whose credential is then revoked (SCRAM has no expiry of its own).
    upsert_user(admin_config, "subscriber-expired", "was-valid")
    apply_acls(admin_config, plan_acls(PREFIX, subscribers=["expired"]))
    delete_user(admin_config, "subscriber-expired")
    cases = denied_cases(tmp_path, untrusted_ca(tmp_path))
    assert len(cases) >= 8
    table = []
    for case in cases:
        env = {k: v for k, v in case.env.items() if v}
        started = time.monotonic()
        result = run_turnaudit(
            *case.argv,
            env={
                **{
                    k: v
                    for k, v in principal_env(broker, case.user, PREFIX).items()
                    if not (k in case.env and not case.env[k])
                },
                **env,
            },
            cwd=tmp_path,
            timeout=120,
        )
        elapsed = time.monotonic() - started
        stderr = result.stderr.strip()
        table.append((case.name, result.returncode, round(elapsed, 1), stderr))
        assert result.returncode == case.exit_code, (case.name, result.returncode, stderr)
        assert len(stderr.splitlines()) == 1, (case.name, stderr)
        assert "Traceback" not in stderr, case.name
        assert case.says in stderr, (case.name, stderr)
        assert elapsed < 30, (case.name, elapsed)
    (tmp_path / "denied.json").write_text(json.dumps(table, indent=1))
    print("\n".join(f"{n}: exit {c} in {s} s: {e}" for n, c, s, e in table))


def test_a_service_with_a_wrong_password_is_503_with_the_reason(
    cluster: tuple[LocalKafkaBroker, KafkaSettings], tmp_path: Path
) -> None:
    broker, _ = cluster
    port = free_port()
    env = principal_env(
        broker,
        "log-sink",
        PREFIX,
        TURNAUDIT_HTTP_PORT=str(port),
        TURNAUDIT_KAFKA_PASSWORD="wrong",  # noqa: S106
        TURNAUDIT_LOG_FILE=str(tmp_path / "l"),
    )
    env.pop("TURNAUDIT_KAFKA_PASSWORD_FILE")
    with turnaudit_process(["sink", "logs"], env, tmp_path / "err"):
        body = reason_when_not_ready(port, "authentication")
    assert body["status"] == "not_ready"
    assert "wrong" not in (tmp_path / "err").read_text()


def test_a_service_run_as_another_principal_is_503_naming_the_denial(
    cluster: tuple[LocalKafkaBroker, KafkaSettings], tmp_path: Path
) -> None:
    broker, _ = cluster
    port = free_port()
    env = principal_env(
        broker,
        "verdict-metrics",
        PREFIX,
        TURNAUDIT_HTTP_PORT=str(port),
        TURNAUDIT_GROUP_ID=f"{PREFIX}log-sink",
        TURNAUDIT_LOG_FILE=str(tmp_path / "l"),
    )
    with turnaudit_process(["sink", "logs"], env, tmp_path / "err"):
        reason_when_not_ready(port, "authorization", deadline_s=25)


def reason_when_not_ready(port: int, words: str, deadline_s: float = 40) -> dict[str, object]:
    deadline = time.monotonic() + deadline_s
    body: dict[str, object] = {}
    while time.monotonic() < deadline:
        try:
            code, text = http_get(port, "/readyz")
            body = json.loads(text)
            assert code == 503, body
            if any(words.lower() in str(r).lower() for r in body.get("reasons", [])):  # type: ignore[union-attr]
                return body
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"no reason naming {words!r} within {deadline_s:.0f} s: {body}")
