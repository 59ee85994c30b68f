"""``replay --archive --group`` on the real broker: the members of a replay group split the
partitions through Kafka, each reading the archive's part of its partitions and then the
topic. Turns published, half of each partition archived, the topic deleted into and to
the archive's end (``delete_records``): three members' outputs, merged by partition and
offset, are the replay taken before the deletion, every message once. A member that
finds the group's offsets committed inside the archive (another member's progress) goes
on from there, in the archive, to the end."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.archive import archive_records, signing_key
from tests.support.replay_members import run_replay_members
from tests.support.verify_helpers import fresh_topics, publish
from turnaudit.archive.segments import ArchivedRecord
from turnaudit.archive.store import LocalArchive
from turnaudit.archive.writer import ArchivePolicy
from turnaudit.cli import main
from turnaudit.kafka.consumer import KafkaConsumer
from turnaudit.kafka.offsets import RangeSpec, delete_records_before, end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.replay import ReplayCheckpoint, ReplayRequest, ReplayTarget, group_id
from turnaudit.replay.group import bound_metadata
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def by_position(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(found, key=lambda line: (line["partition"], line["offset"]))


def archived_and_trimmed(
    settings: KafkaSettings, tmp_path: Path
) -> tuple[Path, dict[int, int], list[dict[str, Any]]]:
    """Turns published, the replay of them all (jsonl lines), then each partition's first
    half archived and the topic deleted to the archive's end, into it, or to before its
    last offset. The archive's folder, the high watermarks and the lines before."""
    topic = settings.topics.turn_events
    publish(settings, tmp_path / "spool", seed=71, events=300)
    assert main(["replay", "--into", f"jsonl:{tmp_path / 'before.jsonl'}"]) == 0
    ends = end_offsets(settings, topic)
    records = [ArchivedRecord.of(m) for m in read_range(settings, topic, None, ends)]
    archived_to = {p: ends[p] // 2 for p in ends}
    root = tmp_path / "archive"
    for p in ends:
        held = sorted(
            (r for r in records if r.partition == p and r.offset < archived_to[p]),
            key=lambda r: r.offset,
        )
        archive_records(LocalArchive(root), held, signing_key(), ArchivePolicy(window_ms=200))
    cut = {0: archived_to[0], 1: archived_to[1] // 2, 2: archived_to[2] - 1}
    assert delete_records_before(settings, topic, cut) == cut
    return root, ends, lines(tmp_path / "before.jsonl")


def test_three_members_split_a_range_from_the_archive_each_message_once(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three `turnaudit replay --archive --group` processes, as docs/archive.md runs them."""
    settings = fresh_topics(kafka_bootstrap)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    root, _, before = archived_and_trimmed(settings, tmp_path)

    group = f"g-{uuid.uuid4().hex[:8]}"
    outs = [tmp_path / f"member-{i}.jsonl" for i in range(3)]
    shared = ["--group", group, "--members", "3", "--batch-size", "20", "--timeout", "30"]
    run_replay_members(
        ["--archive", str(root), *shared, "--checkpoint-every", "40"], outs, os.environ
    )
    merged = [line for out in outs for line in lines(out)]
    assert len(merged) == len(before)  # every message once: no repeat, none missing
    assert by_position(merged) == by_position(before)
    written = [
        ReplayCheckpoint.load(out.with_name(out.name + ".replay-checkpoint.json")) for out in outs
    ]
    assert all(state.complete for state in written)
    assert all(state.events > 0 for state in written)  # the range was split


def test_a_member_goes_on_from_offsets_the_group_committed_inside_the_archive(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = fresh_topics(kafka_bootstrap)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    root, ends, before = archived_and_trimmed(settings, tmp_path)
    topic = settings.topics.turn_events

    # Another member's progress: each partition committed a quarter in, inside the archive
    # (below the topic's log start now), with the group's bound of the range.
    name = f"g-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "member.jsonl"
    fingerprint = ReplayRequest(RangeSpec(), archive=str(root)).fingerprint(
        topic, ReplayTarget.file("jsonl", out)
    )
    progress = {p: ends[p] // 4 for p in ends}
    committer = KafkaConsumer(settings, topic, group_id=group_id(settings.topics.prefix, name))
    try:
        committer.commit(progress, {p: bound_metadata(fingerprint, 0, ends[p]) for p in ends})
    finally:
        committer.close()

    archive = ["--archive", str(root), "--timeout", "30"]
    assert main(["replay", *archive, "--group", name, "--into", f"jsonl:{out}"]) == 0
    rest = [line for line in before if line["offset"] >= progress[line["partition"]]]
    assert by_position(lines(out)) == by_position(rest)
    assert len(lines(out)) < len(before)
