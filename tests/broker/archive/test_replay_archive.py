"""``replay --archive`` on the real broker: turns published, archived (the broker's records,
as the archiver writes them), then each partition deleted (``delete_records``) to another
point of the archive; the replay from the archive and the topic is byte for byte the
replay taken before the deletion (jsonl and logs outputs). A partition deleted past the
archive's end fails the replay with one line naming the offsets, no output written."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.archive import archive_up_to, broker_records
from tests.support.verify_helpers import fresh_topics, publish
from turnaudit.cli import main
from turnaudit.kafka.offsets import delete_records_before

pytestmark = pytest.mark.broker

OUTPUTS = ("jsonl", "logs")


def replay_into(folder: Path, *extra: str) -> tuple[int, dict[str, bytes]]:
    """Replay into each output kind under ``folder``; the exit code and the outputs."""
    folder.mkdir()
    codes = [main(["replay", *extra, "--into", f"{kind}:{folder / kind}"]) for kind in OUTPUTS]
    written = {kind: (folder / kind).read_bytes() for kind in OUTPUTS if (folder / kind).exists()}
    return max(codes), written


def test_replay_from_the_archive_after_deletion_is_the_replay_before_it_byte_for_byte(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = fresh_topics(kafka_bootstrap)
    topic = settings.topics.turn_events
    publish(settings, tmp_path / "spool", seed=41, events=300, versions=(1, 2, 3))
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    code, before = replay_into(tmp_path / "before")
    assert code == 0

    # The archive holds each partition's first two thirds, as the archiver writes them.
    ends, records = broker_records(settings, topic)
    archived_to = {p: ends[p] * 2 // 3 for p in ends}
    root = tmp_path / "archive"
    archive_up_to(root, records, archived_to, window_ms=200)
    # Deleted: to the archive's end (the topic takes over at its log start), to within the
    # archive (both hold the offsets between), to just before the archive's last offset.
    cut = {0: archived_to[0], 1: archived_to[1] // 2, 2: archived_to[2] - 1}
    assert delete_records_before(settings, topic, cut) == cut

    code, after = replay_into(tmp_path / "after", "--archive", str(root), "--timeout", "10")
    assert code == 0
    assert after == before
    # The topic alone has lost the deleted turns.
    code, topic_only = replay_into(tmp_path / "topic-only")
    assert code == 0
    assert topic_only["jsonl"].count(b"\n") == before["jsonl"].count(b"\n") - sum(cut.values())

    # Partition 1 deleted past the archive's end: offsets neither holds, refused, nothing written.
    delete_records_before(settings, topic, {1: archived_to[1] + 5})
    capsys.readouterr()
    code, gapped = replay_into(tmp_path / "gap", "--archive", str(root))
    err = capsys.readouterr().err
    assert (code, gapped) == (1, {})
    assert f"1: {archived_to[1]}-{archived_to[1] + 4}" in err
    assert all(line.startswith("turnaudit replay: ") for line in err.strip().splitlines())


def test_a_replay_by_broker_time_from_the_archive_after_deletion_is_the_one_before_it(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns published in three rounds (their broker times apart); ranges by broker time
    whose start, or end, the deletion removed from the topic: the replay with the archive
    is the replay taken before the deletion, byte for byte; the topic alone has less."""
    settings = fresh_topics(kafka_bootstrap)
    topic = settings.topics.turn_events
    for round_ in range(3):
        publish(settings, tmp_path / f"spool{round_}", seed=61 + round_, events=100)
        time.sleep(0.05)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    ends, records = broker_records(settings, topic)
    stamps = sorted({r.timestamp for r in records})
    # Two times: a fifth and four fifths into the records' broker times.
    early, late = stamps[len(stamps) // 5], stamps[len(stamps) * 4 // 5]
    ranges = {
        "both": ["--from", iso(early), "--to", iso(late)],
        "to": ["--to", iso(early), "--time", "broker"],
    }
    before = {}
    for name, window in ranges.items():
        code, before[name] = replay_into(tmp_path / f"before-{name}", *window)
        assert code == 0
    # The archive holds each partition's first half; the topic is deleted past the first
    # time's records (to the archive's end, into it, to before its last offset).
    archived_to = {p: ends[p] // 2 for p in ends}
    root = tmp_path / "archive"
    archive_up_to(root, records, archived_to, window_ms=200)
    cut = {0: archived_to[0], 1: archived_to[1] * 3 // 4, 2: archived_to[2] - 1}
    assert delete_records_before(settings, topic, cut) == cut
    first_at = {
        p: min(r.offset for r in records if r.partition == p and r.timestamp >= early) for p in ends
    }
    assert all(first_at[p] < cut[p] for p in ends)  # every range starts or ends in the archive

    for name, window in ranges.items():
        archive = ["--archive", str(root), "--timeout", "10"]
        code, after = replay_into(tmp_path / f"after-{name}", *window, *archive)
        assert code == 0
        assert after == before[name]
        assert after["jsonl"].count(b"\n") > 0
        code, topic_only = replay_into(tmp_path / f"topic-only-{name}", *window)
        assert code == 0
        assert topic_only["jsonl"].count(b"\n") < before[name]["jsonl"].count(b"\n")


def iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds")
