"""``verify --jobs`` and ``--memory-ids`` on the real broker: over a stored range with
faults injected in every partition, two processes reading the partitions, and a verifier
holding 5 event ids in memory (the rest spilled to disk), report what one process with
every id in memory does; an event id stored in two partitions is found with --jobs 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.support.verify_helpers import (
    DECODE,
    Stored,
    copy_to,
    fresh_prefix,
    fresh_topics,
    publish,
    stored_range,
)
from turnaudit.cli import main
from turnaudit.errors import BrokerError
from turnaudit.kafka.offsets import end_offsets
from turnaudit.serialization.schema_topic import announce_schema
from turnaudit.serialization.schemas import schema_from_json, shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer
from turnaudit.settings import KafkaSettings
from turnaudit.verify.id_store import IdMemory
from turnaudit.verify.jobs import VerifierOptions, verify_in_jobs

pytestmark = pytest.mark.broker

ENCODE_V3 = SingleObjectSerializer(shipped_catalog().version(3))


@pytest.fixture(scope="module")
def faulty(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[KafkaSettings, list[Stored]]:
    """A published range (v1-v3, 3 partitions) copied with faults in every partition:
    a turn removed, one stored twice, one forged at a taken position, one re-sent with
    other content, one edited, two of a stream swapped."""
    settings = fresh_topics(kafka_bootstrap)
    publish(settings, tmp_path_factory.mktemp("spool"), seed=23, events=300, versions=(1, 2, 3))
    messages = stored_range(settings)
    copy = list(messages)
    for partition in sorted({m.partition for m in messages}):
        mine = [
            i
            for i, m in enumerate(copy)
            if m.partition == partition and DECODE(m.value).writer_version == 3
        ]
        assert len(mine) > 12, "each partition needs chained turns to tamper with"
        a, b, c, d = (mine[k] for k in (2, 4, 6, 8))
        e, f = same_stream_pair(copy, mine[9:])
        event = dict(DECODE(copy[b].value).event)
        copy.append(copy[a])  # a duplicate copy
        copy.append(replace(copy[b], value=ENCODE_V3({**event, "event_id": uuid.uuid4().hex})))
        copy.append(replace(copy[b], value=ENCODE_V3({**event, "turn": event["turn"] + 7})))
        edited = dict(DECODE(copy[c].value).event)
        copy[c] = replace(copy[c], value=ENCODE_V3({**edited, "surface": "edited"}))
        copy[e], copy[f] = copy[f], copy[e]
        copy[d] = replace(copy[d], value=b"")  # an undecodable message where a turn was
    target = fresh_prefix(settings)
    copy_to(target, copy)
    return target, copy


def same_stream_pair(copy: list[Stored], indices: list[int]) -> tuple[int, int]:
    first: dict[tuple[str, str], int] = {}
    for i in indices:
        event = DECODE(copy[i].value).event
        stream = (event["session_id"], event["producer_id"])
        if stream in first:
            return first[stream], i
        first[stream] = i
    raise AssertionError("no stream with two turns in the partition")


def run_cli(
    settings: KafkaSettings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *args: str,
) -> tuple[int, dict[str, Any]]:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    capsys.readouterr()
    code = main(["verify", "--json", *args])
    out, err = capsys.readouterr()
    assert out, err
    return code, json.loads(out)


def ordered(value: Any) -> Any:
    """Lists in one order: partitions are read interleaved, in any order."""
    if isinstance(value, dict):
        return {k: ordered(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted((ordered(v) for v in value), key=json.dumps)
    return value


def private_tmp(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> Path:
    """A temporary directory of the test's own, for this process and the jobs it spawns
    (the machine's is shared with other verify runs)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TMPDIR", str(tmp))
    return tmp


class TestJobsAndMemory:
    def test_jobs_and_ids_or_streams_spilled_report_what_one_process_does(
        self,
        faulty: tuple[KafkaSettings, list[Stored]],
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
        tmp_path: Path,
    ) -> None:
        target, _ = faulty
        tmp = private_tmp(monkeypatch, tmp_path)
        code, one = run_cli(target, monkeypatch, capsys, "--jobs", "1")
        assert code == 1
        assert set(one["unexplained_by_kind"]) >= {
            "position_reused",
            "content_changed",
            "chain_break",
            "late_arrival",
        }
        assert one["duplicates"]["count"] == 3
        assert one["undecodable"] == 3
        # Ids and streams spilled too (the others to disk, read back when needed).
        for args in (
            ["--jobs", "2"],
            ["--jobs", "3", "--memory-ids", "5"],
            ["--jobs", "1", "--memory-ids", "5"],
            ["--jobs", "2", "--memory-ids", "5", "--memory-streams", "3"],
            ["--jobs", "1", "--memory-streams", "2"],
        ):
            code, other = run_cli(target, monkeypatch, capsys, *args)
            assert code == 1, args
            assert ordered(other) == ordered(one), args
        assert list(tmp.iterdir()) == []  # every spill and hand-over directory removed

    def test_an_event_id_stored_in_two_partitions_is_found_with_two_jobs(
        self,
        faulty: tuple[KafkaSettings, list[Stored]],
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        target, copy = faulty
        # Partitions 0 and 2 go to one job, 1 to the other: a copy of a partition-0 turn
        # stored in partition 1 is met only when the jobs' ids are merged.
        moved = next(
            m for m in copy if m.partition == 0 and m.value and DECODE(m.value).writer_version == 3
        )
        elsewhere = fresh_prefix(target)
        copy_to(elsewhere, [*copy, replace(moved, partition=1, key=b"another-key")])
        code, report = run_cli(elsewhere, monkeypatch, capsys, "--jobs", "2")
        assert code == 1
        event_id = DECODE(moved.value).event["event_id"]
        extra = [d for d in report["duplicates"]["examples"] if d.get("event_id") == event_id]
        assert [d["partition"] for d in extra] == [1]
        assert report["duplicates"]["count"] == 4
        assert "key_mismatch" in report["unexplained_by_kind"]

    def test_a_failing_job_fails_verify_and_leaves_no_file(
        self,
        faulty: tuple[KafkaSettings, list[Stored]],
        monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path,
    ) -> None:
        target, _ = faulty
        tmp = private_tmp(monkeypatch, tmp_path)
        topic = target.topics.turn_events
        end = end_offsets(target, topic)
        beyond = {**end, 1: end[1] + 5}  # offsets never written: that job times out
        with pytest.raises(BrokerError, match="timed out reading"):
            verify_in_jobs(
                target,
                topic,
                DECODE,
                VerifierOptions({p: 0 for p in end}, memory=IdMemory(5)),
                start={},
                end=beyond,
                jobs=2,
                timeout=3.0,
            )
        assert list(tmp.iterdir()) == []


def test_verify_json_is_json_alone_when_jobs_learn_a_writer_schema(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Turns written with a writer schema no reader ships (announced on the schemas topic):
    each job learns it at run time and logs so; with the default jobs and with two, stdout
    is the JSON report alone and the jobs' log lines go to stderr."""
    source = fresh_topics(kafka_bootstrap)
    publish(source, tmp_path / "spool", seed=31, events=120, versions=(2,))
    v2 = shipped_catalog().version(2)
    raw = json.loads(v2.schema_json)
    raw["fields"].append({"name": "deployment_note", "type": "string", "default": ""})
    extended = schema_from_json(json.dumps(raw), name=v2.name, version=v2.version)
    encode = SingleObjectSerializer(extended)
    stored = stored_range(source)
    assert len({m.partition for m in stored}) >= 2, "the jobs need two partitions"
    target = fresh_prefix(source)
    producer = Producer(target.client_config())
    announce_schema(producer.produce, target.topics.schemas, extended)
    assert producer.flush(30) == 0
    copy_to(
        target,
        [
            replace(m, value=encode({**DECODE(m.value).event, "deployment_note": "canary"}))
            for m in stored
        ],
    )
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": target.bootstrap_servers or "",
        "TURNAUDIT_TOPIC_PREFIX": target.topics.prefix,
        "TMPDIR": str(tmp_path),
    }
    for jobs, level in ([], "WARNING"), ([], "INFO"), (["--jobs", "2"], "INFO"):
        ran = subprocess.run(
            [
                sys.executable,
                "-m",
                "turnaudit.cli",
                "--log-level",
                level,
                "verify",
                "--json",
                *jobs,
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert ran.returncode == 0, ran.stderr
        report = json.loads(ran.stdout)  # the whole of stdout: nothing before or after
        assert report["counts"]["turns"] == report["messages"] == len(stored)
        if level == "INFO":
            assert "schema_read_by_fastavro" in ran.stderr
