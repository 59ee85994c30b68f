"""``eval rebuild --archive`` on the real broker: simulated turns (every schema version, tasks
with ground truth) published and archived, then each partition deleted to another point of
the archive (``delete_records``). The rebuild from the archive and the topic, read as
``replay --archive`` reads them, is the rebuild from the whole topic taken before the
deletion: the same traces byte for byte, the same cases and verdicts (latencies are
measured afresh by each rebuild: no live worker recorded them). The topic alone no longer
holds the tasks the deletion cut."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.archive import archive_up_to, broker_records
from tests.support.streams import publish_simulated
from tests.support.verify_helpers import fresh_topics
from turnaudit.cli import main
from turnaudit.evaluation.files import load_evidence, write_json
from turnaudit.kafka.offsets import delete_records_before

pytestmark = pytest.mark.broker

VerdictsOf = list[tuple[str, str, list[tuple[int, str, str | None]]]]


def rebuild(
    capsys: pytest.CaptureFixture[str], folder: Path, truth: Path, *command: str
) -> tuple[dict[str, Any], bytes, VerdictsOf]:
    """``command`` (``eval rebuild`` and its range) into ``folder``: its summary, traces
    and each case's verdicts."""
    folder.mkdir()
    capsys.readouterr()
    code = main(
        [
            *command,
            "--labels",
            str(truth),
            "--output",
            str(folder / "evidence.json"),
            "--traces",
            str(folder / "traces.htir.jsonl"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    summary = json.loads(out.split("rebuilt ", 1)[1])
    cases = load_evidence(folder / "evidence.json").cases
    verdicts = [
        (
            c.task_id,
            json.dumps(c.trace.to_json(), sort_keys=True),
            [(o.prefix_end, o.verdict, o.tier) for o in c.observations or ()],
        )
        for c in cases
    ]
    return summary, (folder / "traces.htir.jsonl").read_bytes(), verdicts


def test_a_rebuild_from_the_archive_after_deletion_is_the_rebuild_from_the_whole_topic(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = fresh_topics(kafka_bootstrap)
    topic = settings.topics.turn_events
    truth = publish_simulated(settings, 900, tmp_path / "spool", seed=23)
    truth_path = tmp_path / "truth.json"
    write_json(truth_path, truth.as_json())
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    command = ("eval", "rebuild")
    summary, traces, verdicts = rebuild(capsys, tmp_path / "whole", truth_path, *command)
    assert summary["cases"] > 0
    assert summary["traces"] == traces.count(b"\n") > 0

    # The archive holds each partition's first three quarters, as the archiver writes them.
    ends, records = broker_records(settings, topic)
    archived_to = {p: ends[p] * 3 // 4 for p in ends}
    root = tmp_path / "archive"
    archive_up_to(root, records, archived_to, window_ms=300)
    # Deleted: to the archive's end, to within it, to just before its last offset.
    cut = {0: archived_to[0], 1: archived_to[1] // 2, 2: archived_to[2] - 1}
    assert delete_records_before(settings, topic, cut) == cut

    from_archive = rebuild(
        capsys, tmp_path / "archived", truth_path, *command, "--archive", str(root)
    )
    got_summary, got_traces, got_verdicts = from_archive
    assert got_traces == traces
    assert got_verdicts == verdicts
    assert got_summary["range"] == summary["range"]
    assert got_summary["cases"] == summary["cases"]

    # The topic alone has lost the turns before the cut: fewer traces, another range.
    topic_summary, topic_traces, _ = rebuild(capsys, tmp_path / "topic-only", truth_path, *command)
    assert topic_traces != traces
    assert topic_summary["range"]["start"] == {str(p): o for p, o in sorted(cut.items())}
