"""``turnaudit verify`` over a retained stream: the log start moved mid-stream by
``delete_records`` (what time retention does) is no loss, and with the heads an
earlier report proved, a prefix deleted past them is still a truncation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.verify_helpers import DECODE, Stored, fresh_topics, publish, stored_range
from turnaudit.cli import main
from turnaudit.identity import StreamId, stream_of
from turnaudit.kafka.offsets import delete_records_before, watermarks
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


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
    return code, json.loads(capsys.readouterr().out)


def offsets_arg(offsets: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(offsets.items()))


def streams_by_offset(messages: list[Stored]) -> dict[StreamId, list[tuple[int, int, int]]]:
    """Per stream: (partition, offset, position) of each of its messages, in log order."""
    found: dict[StreamId, list[tuple[int, int, int]]] = {}
    for m in messages:
        event = DECODE(m.value).event
        found.setdefault(stream_of(event), []).append((m.partition, m.offset, event["sequence"]))
    return found


def test_a_log_start_moved_mid_stream_is_retention_not_loss_and_heads_still_find_truncation(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = fresh_topics(kafka_bootstrap)
    publish(settings, tmp_path / "spool", seed=23, events=1500, sessions=20)
    messages = stored_range(settings)
    topic = settings.topics.turn_events
    high = watermarks(settings, topic).high
    third = {p: h // 3 for p, h in high.items()}
    half = {p: h // 2 for p, h in high.items()}
    two_thirds = {p: 2 * h // 3 for p, h in high.items()}

    # Earlier checkpoints: heads proved over [0, 1/3) and over [0, 2/3).
    code, early = run_cli(settings, monkeypatch, capsys, "--to-offsets", offsets_arg(third))
    assert code == 0, early["unexplained"]
    code, later = run_cli(settings, monkeypatch, capsys, "--to-offsets", offsets_arg(two_thirds))
    assert code == 0, later["unexplained"]
    (tmp_path / "early.json").write_text(json.dumps(early))
    (tmp_path / "later.json").write_text(json.dumps(later))

    # Retention: every record before the middle of each partition is deleted.
    assert delete_records_before(settings, topic, half) == half
    streams = streams_by_offset(messages)
    spanning = {s for s, rows in streams.items() if rows[0][1] < half[rows[0][0]] <= rows[-1][1]}
    gone = {s for s, rows in streams.items() if rows[-1][1] < half[rows[0][0]]}
    assert spanning
    assert gone

    # The whole retained stream: nothing lost, the cut streams began before retention.
    code, report = run_cli(settings, monkeypatch, capsys)
    assert code == 0, report["unexplained"]
    assert report["lost"] == 0
    assert report["range"]["from_log_start"] is True
    retention = report["retention"]
    assert retention["log_start"] == {str(p): o for p, o in half.items()}
    assert retention["began_before_retention"] == len(spanning)
    oldest = {(e["session_id"], e["producer_id"]): e for e in retention["examples"]}
    for stream, example in oldest.items():
        first = next(r for r in streams[stream] if r[1] >= half[r[0]])
        assert (example["partition"], example["offset"], example["position"]) == first
    assert report["counts"]["turns"] == sum(high[p] - half[p] for p in high)

    # The same from offsets at the new log start.
    code, again = run_cli(settings, monkeypatch, capsys, "--from-offsets", offsets_arg(half))
    assert code == 0, again["unexplained"]
    assert again["retention"]["began_before_retention"] == len(spanning)

    # Heads proved past the cut: the deleted prefix was proved; streams taken whole expired.
    code, checked = run_cli(settings, monkeypatch, capsys, "--heads", str(tmp_path / "later.json"))
    assert code == 0, checked["unexplained"]
    anchored_gone = {(h["session_id"], h["producer_id"]) for h in later["streams"]["heads"]} & gone
    assert checked["retention"]["anchors_expired"] == len(anchored_gone)

    # Heads proved only to 1/3: what lay between them and the cut was never proved, and
    # is gone: a truncation, with its stream and positions.
    code, truncated = run_cli(
        settings, monkeypatch, capsys, "--heads", str(tmp_path / "early.json")
    )
    assert code == 1
    early_heads = {
        (h["session_id"], h["producer_id"]): h["position"] for h in early["streams"]["heads"]
    }
    expected: dict[StreamId, list[int]] = {}
    for stream, rows in streams.items():
        if stream not in early_heads or stream not in spanning:
            continue
        first = next(r for r in rows if r[1] >= half[r[0]])
        if first[2] > early_heads[stream] + 1:
            expected[stream] = list(range(early_heads[stream] + 1, first[2]))[:20]
    assert expected
    found = {
        (f["session_id"], f["producer_id"]): f["positions"]
        for f in truncated["unexplained"]
        if f["kind"] == "truncated"
    }
    assert found == expected
    assert set(truncated["unexplained_by_kind"]) == {"truncated"}
    assert truncated["lost"] == 0
