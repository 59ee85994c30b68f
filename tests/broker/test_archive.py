"""The archiver on the real broker: signed turns published in two halves, the archiver
SIGKILLed while its segments are open and started again, then stopped cleanly. ``archive
check`` passes; the segments hold every offset of every partition exactly once, each
record byte for byte as the topic held it (key, value, headers, timestamp). Then every
partition is deleted to its end (``delete_records``): the topic holds nothing, and the
archive still holds and proves every record."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.archive import archived_offsets
from tests.support.services import service_env, turnaudit_process
from tests.support.streams import http_get
from turnaudit.archive.segments import ArchivedRecord, decode_segment
from turnaudit.archive.store import LocalArchive
from turnaudit.checkpoints import keyring_entry_toml
from turnaudit.cli import main
from turnaudit.kafka.admin import new_admin
from turnaudit.kafka.offsets import end_offsets, watermarks
from turnaudit.kafka.reading import read_range
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import CheckpointSettings, generate_keys, load_signing_key

pytestmark = pytest.mark.broker

LONG_AGO = "2020-01-01T00:00:00Z"


def publish_signed_half(settings: KafkaSettings, spool: Path, key_file: Path, seed: int) -> None:
    key = load_signing_key(key_file, "runtime-1")
    publisher = TurnEventPublisher(
        settings,
        spool_dir=spool,
        checkpoints=CheckpointSettings(key, interval_s=0.05, max_turns=40),
    )
    sim = TurnRuntimeSimulator(seed, schema_versions=(4,), concurrent_sessions=8)
    for event in sim.events(300):
        publisher.publish(event)
    assert publisher.close().ok


def topic_records(settings: KafkaSettings) -> list[ArchivedRecord]:
    topic = settings.topics.turn_events
    return [
        ArchivedRecord.of(m)
        for m in read_range(settings, topic, None, end_offsets(settings, topic))
    ]


def wait_until(done: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


def archived(archive: LocalArchive, topic: str) -> dict[int, list[ArchivedRecord]]:
    held: dict[int, list[ArchivedRecord]] = {}
    for path in archive.files(topic):
        if "/segments/" in path:
            for record in decode_segment(archive.read(path) or b""):
                held.setdefault(record.partition, []).append(record)
    return held


def committed(settings: KafkaSettings, group: str) -> dict[int, int]:
    """The group's committed offset per partition of the turn topic (-1: none)."""
    consumer = Consumer(settings.client_config(**{"group.id": group}))
    try:
        found = consumer.committed(
            [TopicPartition(settings.topics.turn_events, p) for p in range(3)], timeout=10
        )
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def test_a_killed_archiver_restarted_archives_every_record_once_past_retention(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = kafka_settings
    topic = settings.topics.turn_events
    runtime_key = generate_keys(tmp_path / "keys", "runtime-1")
    archiver_key = generate_keys(tmp_path / "keys", "archiver-1")
    keyring = tmp_path / "keyring.toml"
    keyring.write_text(
        keyring_entry_toml("runtime-1", runtime_key.public_path.read_text(), _long_ago())
        + keyring_entry_toml("archiver-1", archiver_key.public_path.read_text(), _long_ago())
    )
    root = tmp_path / "archive"
    archive = LocalArchive(root)
    env = service_env(
        settings,
        f"{settings.topics.prefix}archive",
        TURNAUDIT_ARCHIVE_DIR=str(root),
        TURNAUDIT_ARCHIVE_KEY_FILE=str(archiver_key.private_path),
        TURNAUDIT_ARCHIVE_KEY_ID="archiver-1",
        TURNAUDIT_ARCHIVE_SEGMENT_MAX_BYTES="16000",
        TURNAUDIT_ARCHIVE_DIGEST_INTERVAL_S="0.5",
        TURNAUDIT_BATCH_SIZE="50",
    )
    log = tmp_path / "archiver.log"
    publish_signed_half(settings, tmp_path / "spool-1", runtime_key.private_path, seed=5)

    def segments_in_every_partition() -> bool:
        return all(archive.files(f"{topic}/{p}/segments") for p in range(3))

    def committed_everywhere() -> bool:
        return all(o >= 0 for o in committed(settings, env["TURNAUDIT_GROUP_ID"]).values())

    with turnaudit_process(["archive", "run"], env, log) as first:
        wait_until(segments_in_every_partition, "a segment in every partition")
        wait_until(committed_everywhere, "offsets committed for every partition")
        time.sleep(2.5)  # two more commit intervals: the offsets go as far as they will
        first.send_signal(signal.SIGKILL)  # the tail of each partition is in an open segment
        assert first.wait(30) == -signal.SIGKILL
    # What was committed never passes a record in no written segment.
    on_disk = archived(archive, topic)
    for p, offset in committed(settings, env["TURNAUDIT_GROUP_ID"]).items():
        assert offset <= on_disk[p][-1].offset + 1, f"partition {p}: committed past the archive"
    publish_signed_half(settings, tmp_path / "spool-2", runtime_key.private_path, seed=6)
    port = int(env["TURNAUDIT_HTTP_PORT"])
    ends = end_offsets(settings, topic)
    # One-second windows, cut as soon as they end: the restarted archiver writes the
    # partitions' ends without being stopped.
    quick = {**env, "TURNAUDIT_ARCHIVE_WINDOW_S": "1", "TURNAUDIT_ARCHIVE_SEAL_GRACE_S": "0"}

    def archived_to_the_end() -> bool:
        _running(second)
        offsets = archived_offsets(port)
        return all(offsets.get(p) == ends[p] - 1 for p in range(3))

    with turnaudit_process(["archive", "run"], quick, log) as second:
        wait_until(archived_to_the_end, "every partition archived to its end")
        second.send_signal(signal.SIGTERM)  # a clean stop: open segments written, digests
        assert second.wait(60) == 0, log.read_text()[-3000:]

    expected = topic_records(settings)
    assert len(expected) == 600
    held = archived(archive, topic)
    for p in range(3):
        want = [r for r in expected if r.partition == p]
        got = held.get(p, [])
        assert [r.offset for r in got] == list(range(ends[p])), f"partition {p}: gap or copy"
        assert got == want  # byte for byte: key, value, headers, timestamp
    capsys.readouterr()
    assert main(["archive", "check", str(root), "--keyring", str(keyring)]) == 0
    out = capsys.readouterr().out
    assert "findings" not in out
    assert sum(int(line.split()[1]) for line in out.splitlines()) == 600

    # Past retention: every partition deleted to its end.
    admin = new_admin(settings.client_config())
    deletions = [TopicPartition(topic, p, ends[p]) for p in range(3)]
    for future in admin.delete_records(deletions).values():
        future.result(30)
    assert watermarks(settings, topic).low == ends  # the topic holds none of them any more
    assert main(["archive", "check", str(root), "--keyring", str(keyring)]) == 0
    # verify, the range read from the archive: every turn there, once, every stream signed.
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    capsys.readouterr()
    args = ["--json", "--keyring", str(keyring), "--require-signed"]
    code = main(["verify", *args, "--archive", str(root)])
    report = json.loads(capsys.readouterr().out)
    assert (code, report["lost"], report["unexplained"]) == (0, 0, [])
    assert report["counts"]["turns"] == 600
    assert report["range"]["from_log_start"] is True
    assert {s["status"] for s in report["trust"]["streams"]} == {"signed"}
    # The topic alone holds no turn of the range any more.
    main(["verify", *args])
    assert json.loads(capsys.readouterr().out)["counts"]["turns"] == 0
    assert sorted(
        (r for rs in archived(archive, topic).values() for r in rs),
        key=lambda r: (r.partition, r.offset),
    ) == sorted(expected, key=lambda r: (r.partition, r.offset))


def _running(proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        pytest.fail(f"the archiver exited with {proc.returncode}")
    return True


def _long_ago() -> datetime:
    return datetime.fromisoformat(LONG_AGO)


def test_two_archivers_in_one_group_hand_partitions_over_and_archive_each_record_once(
    kafka_settings: KafkaSettings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second member joins while the first has open segments, so partitions move between
    them (the first writes what it holds and digests it; the second loads the partition
    from the archive); then the first stops and the second takes everything."""
    settings = kafka_settings
    topic = settings.topics.turn_events
    runtime_key = generate_keys(tmp_path / "keys", "runtime-1")
    archiver_key = generate_keys(tmp_path / "keys", "archiver-1")
    keyring = tmp_path / "keyring.toml"
    keyring.write_text(
        keyring_entry_toml("archiver-1", archiver_key.public_path.read_text(), _long_ago())
    )
    root = tmp_path / "archive"
    archive = LocalArchive(root)
    common = {
        "TURNAUDIT_ARCHIVE_DIR": str(root),
        "TURNAUDIT_ARCHIVE_KEY_FILE": str(archiver_key.private_path),
        "TURNAUDIT_ARCHIVE_KEY_ID": "archiver-1",
        "TURNAUDIT_ARCHIVE_SEGMENT_MAX_BYTES": "16000",
        "TURNAUDIT_ARCHIVE_WINDOW_S": "1",
        "TURNAUDIT_ARCHIVE_SEAL_GRACE_S": "0",
        "TURNAUDIT_ARCHIVE_DIGEST_INTERVAL_S": "0.5",
        "TURNAUDIT_BATCH_SIZE": "50",
        # Dynamic members: one that stops leaves the group at once (a static member's
        # partitions would wait out its session).
        "TURNAUDIT_GROUP_INSTANCE_ID": "none",
    }
    group = f"{settings.topics.prefix}archive"
    one = service_env(settings, group, **common)
    two = service_env(settings, group, **common)
    log = tmp_path / "archivers.log"
    publish_signed_half(settings, tmp_path / "spool-1", runtime_key.private_path, seed=8)
    with turnaudit_process(["archive", "run"], one, log) as first:
        wait_until(
            lambda: _running(first) and all(archive.files(f"{topic}/{p}") for p in range(3)),
            "the first member archiving",
        )
        with turnaudit_process(["archive", "run"], two, log) as second:
            wait_until(
                lambda: _running(second) and bool(assigned_partitions(two)),
                "the second member holding partitions",
            )
            publish_signed_half(settings, tmp_path / "spool-2", runtime_key.private_path, seed=9)
            first.send_signal(signal.SIGTERM)  # its partitions move to the second
            assert first.wait(60) == 0, log.read_text()[-3000:]
            ends = end_offsets(settings, topic)
            wait_until(
                lambda: (
                    _running(second)
                    and all(
                        archived_offsets(int(two["TURNAUDIT_HTTP_PORT"])).get(p) == ends[p] - 1
                        for p in range(3)
                    )
                ),
                "the second member archiving every partition to its end",
            )
            second.send_signal(signal.SIGTERM)
            assert second.wait(60) == 0, log.read_text()[-3000:]
    expected = topic_records(settings)
    held = archived(archive, topic)
    for p in range(3):
        assert [r.offset for r in held.get(p, [])] == list(range(ends[p])), f"partition {p}"
        assert held[p] == [r for r in expected if r.partition == p]
    capsys.readouterr()
    assert main(["archive", "check", str(root), "--keyring", str(keyring)]) == 0, (
        capsys.readouterr().out
    )


def assigned_partitions(env: dict[str, str]) -> list[int]:
    try:
        code, body = http_get(int(env["TURNAUDIT_HTTP_PORT"]), "/healthz")
    except OSError:
        return []  # not listening yet
    return list(json.loads(body)["assigned_partitions"]) if code == 200 else []
