"""``verify --archive`` on the real broker, the checkpoints and stream heads past their
topics: signed turns published (checkpoints, and a stream head per closed stream), the
three topics archived as the archiver writes them, then each deleted to its end
(``delete_records``, as retention does). verify from the archive gives the report it gave
before the deletion: every turn, every stream signed, every stream's end known. An archive
of the turns alone proves neither: the checkpoints and heads are gone with their topics."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.archive import archive_records, signing_key
from tests.support.verify_helpers import fresh_topics, publish
from turnaudit.archive.segments import ArchivedRecord
from turnaudit.archive.store import LocalArchive
from turnaudit.archive.writer import ArchivePolicy
from turnaudit.checkpoints import keyring_entry_toml
from turnaudit.cli import main
from turnaudit.kafka.offsets import delete_records_before, end_offsets, watermarks
from turnaudit.kafka.reading import read_range
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import CheckpointSettings, generate_keys, load_signing_key

pytestmark = pytest.mark.broker

LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


def archive_topic(settings: KafkaSettings, topic: str, root: Path) -> dict[int, int]:
    """Every record of ``topic`` into the archive at ``root``; the topic's ends."""
    ends = end_offsets(settings, topic)
    records = [ArchivedRecord.of(m) for m in read_range(settings, topic, None, ends)]
    for p in ends:
        held = [r for r in records if r.partition == p]
        if held:
            archive_records(LocalArchive(root), held, signing_key(), ArchivePolicy(window_ms=500))
    return ends


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    """A command's exit code and the JSON it printed."""
    capsys.readouterr()
    code = main([*args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_verify_from_the_archive_proves_signatures_and_stream_ends_after_every_topic_is_trimmed(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = fresh_topics(kafka_bootstrap)
    key = generate_keys(tmp_path / "keys", "runtime-1")
    keyring = tmp_path / "keyring.toml"
    keyring.write_text(keyring_entry_toml("runtime-1", key.public_path.read_text(), LONG_AGO))
    publisher = TurnEventPublisher(
        settings,
        spool_dir=tmp_path / "spool",
        checkpoints=CheckpointSettings(
            load_signing_key(key.private_path, "runtime-1"), interval_s=0.05, max_turns=30
        ),
    )
    sim = TurnRuntimeSimulator(17, schema_versions=(4, 5), concurrent_sessions=6)
    for event in sim.events(240):
        publisher.publish(event)
    assert publisher.close().ok  # every stream closed: its head announced
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    signed = ["--keyring", str(keyring), "--require-signed"]
    code, before = cli_json(capsys, "verify", *signed)
    assert code == 0, before["unexplained"]
    assert before["counts"]["turns"] == 240
    assert {s["status"] for s in before["trust"]["streams"]} == {"signed"}
    assert before["stream_ends"]["ended_cleanly"] == before["streams"]["chained"] > 0

    names = settings.topics
    whole, turns_only = tmp_path / "archive", tmp_path / "turns-only"
    ends = {
        t: archive_topic(settings, t, whole)
        for t in (names.turn_events, names.checkpoints, names.stream_heads)
    }
    archive_topic(settings, names.turn_events, turns_only)
    assert all(sum(e.values()) > 0 for e in ends.values())
    for topic, end in ends.items():  # retention, every topic: nothing of them left
        assert delete_records_before(settings, topic, end) == end
        assert watermarks(settings, topic).low == end

    code, after = cli_json(capsys, "verify", *signed, "--archive", str(whole))
    assert code == 0, after["unexplained"]
    for part in ("counts", "streams", "lost", "trust", "stream_ends", "range"):
        assert after[part] == before[part], part

    # The turns alone: every turn is there, but no checkpoint signs them and no head
    # says where their streams ended.
    code, bare = cli_json(capsys, "verify", *signed, "--archive", str(turns_only))
    assert bare["counts"]["turns"] == 240
    assert code == 1
    assert "signed" not in {s["status"] for s in bare["trust"]["streams"]}
    assert bare["stream_ends"]["announced"] == 0


def test_verify_by_broker_time_from_the_archive_after_deletion_is_the_report_before_it(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Turns published in three rounds (their broker times apart), the topic deleted past
    the first time's records: ``verify --archive --from --to`` by broker time reports what
    verify reported before the deletion (counts, streams, lost, range); without the
    archive, fewer turns."""
    settings = fresh_topics(kafka_bootstrap)
    for round_ in range(3):
        publish(settings, tmp_path / f"spool{round_}", seed=81 + round_, events=80)
        time.sleep(0.05)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    topic = settings.topics.turn_events
    ends = end_offsets(settings, topic)
    records = [ArchivedRecord.of(m) for m in read_range(settings, topic, None, ends)]
    stamps = sorted({r.timestamp for r in records})
    early, late = stamps[len(stamps) // 5], stamps[len(stamps) * 4 // 5]
    window = ["--from", iso(early), "--to", iso(late)]
    code_before, before = cli_json(capsys, "verify", *window)
    assert 0 < before["counts"]["turns"] < len(records)

    root = tmp_path / "archive"
    archive_topic(settings, topic, root)
    cut = {p: e * 2 // 3 for p, e in ends.items()}
    assert delete_records_before(settings, topic, cut) == cut
    assert all(
        min(r.offset for r in records if r.partition == p and r.timestamp >= early) < cut[p]
        for p in ends
    )  # every partition's range starts in what the deletion removed

    code, after = cli_json(capsys, "verify", *window, "--archive", str(root))
    assert code == code_before
    for part in ("counts", "streams", "lost", "range"):
        assert after[part] == before[part], part
    _, topic_only = cli_json(capsys, "verify", *window)
    assert topic_only["counts"]["turns"] < before["counts"]["turns"]


def iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds")
