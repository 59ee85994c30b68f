"""``turnaudit demo`` as a user runs it, on the real broker: a summary of at most 60 lines
with no log line in it, mostly turns of the newest version, every stream signed, the
continuous verifier proving every turn published, the auditor's tiers named, exit 0; run
again in the same folder it works too (and removes the first run's topics). A follower
holding another key than the publisher's makes the demo fail, its mismatch named in the
summary."""

from __future__ import annotations

import json
import os
import re
import stat
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.support.cli import run_turnaudit
from turnaudit.checkpoints import Keyring, parse_keyring
from turnaudit.cli import main
from turnaudit.commands import demo
from turnaudit.commands.demo_follow import DemoFollower
from turnaudit.consumers.runtime.settings import ServiceSettings
from turnaudit.kafka.admin import admin_client
from turnaudit.kafka.topics import topic_specs
from turnaudit.producers.adapter import LATEST_SCHEMA_VERSION as LATEST
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import generate_keys
from turnaudit.topic_names import TopicNames

pytestmark = pytest.mark.broker

MAX_LINES = 60
ROW = re.compile(
    r"^ +(?P<label>\S.*?)\s+(?P<observed>\d+)\s+(?P<expected>\d+)  (?P<mark>ok|MISMATCH)$"
)
RUN = re.compile(r"^run (?P<id>[0-9a-f]{8}): (?P<turns>\d+) turns .* to (?P<prefix>\S+)\*$")


def rows(summary: list[str]) -> dict[str, tuple[int, int, str]]:
    found = {}
    for line in summary:
        m = ROW.match(line)
        if m:
            found[m["label"]] = (int(m["observed"]), int(m["expected"]), m["mark"])
    return found


def looks_like_a_log_line(line: str) -> bool:
    """A JSON object (structlog's renderer) or structlog's console form."""
    text = line.strip()
    if text.startswith("{"):
        return True
    if re.search(r"\[(debug|info|warning|error|critical)\s*\]", text):
        return True
    return '"event":' in text or '"level":' in text


def demo_env(bootstrap: str, prefix: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "TURNAUDIT_TOPIC_PREFIX": prefix,
        "TURNAUDIT_TOPIC_PARTITIONS": "3",
    }


def demo_topics(prefix: str) -> set[str]:
    """A run's topics: the topic plan's and the continuous verifier's state topic."""
    settings = KafkaSettings(topics=TopicNames(prefix))
    return {spec.name for spec in topic_specs(settings)} | {settings.topics.verify_state}


def topics_under(bootstrap: str, prefix: str) -> set[str]:
    listed = admin_client(KafkaSettings(bootstrap_servers=bootstrap)).list_topics(timeout=10)
    return {name for name in listed.topics if name.startswith(prefix)}


def check_summary(result_stdout: str, folder: Path) -> tuple[str, str]:
    """Every property a summary must have; returns the run's id and topic prefix."""
    summary = result_stdout.splitlines()
    assert len(summary) <= MAX_LINES, result_stdout
    assert [line for line in summary if looks_like_a_log_line(line)] == []
    run = next(m for m in map(RUN.match, summary) if m)
    turns = int(run["turns"])
    found = rows(summary)
    assert [label for label, (_, _, mark) in found.items() if mark != "ok"] == []
    # Mostly the newest version, each with its trace id; main turns name their model.
    newest, newest_expected, _ = found[f"TurnEvent v{LATEST}, the runtime default"]
    assert newest == newest_expected
    assert newest > turns / 2
    traced, traced_expected, _ = found["with a trace id (W3C trace context: v4 and later)"]
    assert newest <= traced == traced_expected <= turns
    named, named_expected, _ = found["naming their model (main turns of v4 and later)"]
    assert 0 < named == named_expected <= traced
    heading = next(line for line in summary if line.startswith("the stream: "))
    assert heading == (
        f"the stream: mostly TurnEvent v{LATEST} ({newest} of {turns} turns); "
        f"{traced} carry a trace id, {named} a model identity"
    )
    # Every stream signed under verify --keyring --require-signed, which exits 0.
    judged = found["streams judged (sessions written with v3 or later)"]
    assert judged[0] == judged[1] > 0
    assert found["streams signed"][:2] == (judged[0], judged[0])
    assert found["verify --keyring --require-signed: exit code"][:2] == (0, 0)
    assert found["checkpoints signed by the publisher, all valid"][0] >= 2
    # The continuous verifier proved every turn published.
    assert found["turns proved (present once, chained, in order)"][:2] == (turns, turns)
    assert found["streams signed, judged as they arrived"][:2] == (judged[0], judged[0])
    # The auditor the gate pins, and its tier.
    assert any(
        re.fullmatch(r"\s+tier rules: turnaudit-rule-auditor version \S+, sha256:[0-9a-f]+….*", x)
        for x in summary
    )
    assert any("the demo runs the rules tier only" in line for line in summary)
    assert re.search(r"^EVR-6 gate: (PASS|HOLD) ", result_stdout, re.MULTILINE)
    assert summary[-1].startswith("demo: all ")
    assert "figures match" in summary[-1]
    # The files it names are there: the log lines in demo.log, the key owner-only.
    out = folder / "var" / "demo"
    log_lines = (out / "demo.log").read_text().splitlines()
    assert log_lines
    assert all("event" in json.loads(line) for line in log_lines)
    key = out / "keys" / f"demo-{run['id']}.key"
    assert f"keys/demo-{run['id']}.key" in result_stdout
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    for name in ("turns.jsonl", "keyring.toml", "gate-report.json", "evidence-bundle.tar"):
        assert name in result_stdout
        assert (out / name).is_file()
    return run["id"], run["prefix"]


def test_the_demo_summarises_todays_product_and_runs_again_in_the_same_folder(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    base = f"t-{uuid.uuid4().hex[:10]}."
    env = demo_env(kafka_bootstrap, base)
    first = run_turnaudit("demo", env=env, cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stderr == ""  # every log line went to var/demo/demo.log
    first_id, first_prefix = check_summary(first.stdout, tmp_path)
    assert first_prefix == f"{base}demo-{first_id}."
    assert topics_under(kafka_bootstrap, first_prefix) == demo_topics(first_prefix)

    second = run_turnaudit("demo", env=env, cwd=tmp_path, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    assert second.stderr == ""
    second_id, second_prefix = check_summary(second.stdout, tmp_path)
    assert second_id != first_id
    # The first run's topics and key are gone; one run's worth is left.
    assert topics_under(kafka_bootstrap, first_prefix) == set()
    assert topics_under(kafka_bootstrap, second_prefix) == demo_topics(second_prefix)
    assert sorted(p.name for p in (tmp_path / "var/demo/keys").iterdir()) == [
        f"demo-{second_id}.key",
        f"demo-{second_id}.pub",
    ]


class StrangerFollower(DemoFollower):
    """The continuous verifier with a keyring that holds another key than the publisher's."""

    keyring: Keyring

    def __init__(
        self,
        settings: ServiceSettings,
        keyring: Keyring,
        *,
        grace_s: float,
        trust_grace_s: float,
        start_offsets: Mapping[int, int],
    ) -> None:
        super().__init__(
            settings,
            StrangerFollower.keyring,
            grace_s=grace_s,
            trust_grace_s=trust_grace_s,
            start_offsets=start_offsets,
        )


def test_a_follower_without_the_publishers_key_fails_the_demo_and_says_where(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    made = generate_keys(tmp_path / "stranger", "stranger")
    StrangerFollower.keyring = parse_keyring("require_signed = true\n" + made.keyring_entry)
    monkeypatch.setattr(demo, "DemoFollower", StrangerFollower)
    for name, value in demo_env(kafka_bootstrap, f"t-{uuid.uuid4().hex[:10]}.").items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)

    assert main(["demo", "--events", "600"]) == 1
    summary = capsys.readouterr().out.splitlines()
    found = rows(summary)
    judged = found["streams judged (sessions written with v3 or later)"][0]
    # The range verify holds the publisher's key: every stream signed.
    assert found["verify --keyring --require-signed: exit code"] == (0, 0, "ok")
    # The follower's checkpoints are all invalid, every stream forged: named, not folded away.
    assert found["streams signed"] == (judged, judged, "ok")
    assert found["streams signed, judged as they arrived"] == (0, judged, "MISMATCH")
    forged = next(line for line in summary if "no turn" not in line and "pending" in line)
    assert f"forged {judged} (expected 0)" in forged
    assert forged.endswith("MISMATCH")
    assert summary[-1].startswith("demo: MISMATCH in ")
    assert "streams signed, judged as they arrived" in summary[-1]
    assert "streams forged" in summary[-1]
