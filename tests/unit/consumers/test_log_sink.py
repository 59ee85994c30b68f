"""The log sink: one canonical JSON line per turn, redaction, outputs."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import orjson
import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from tests.support.events import encode, turn
from tests.support.sinks import deliver
from turnaudit.consumers.log_sink import (
    LogSink,
    TurnLineWriter,
    service_logging,
    turn_fields,
)
from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.consumers.runtime.settings import LogSinkSettings, SurfaceRedaction
from turnaudit.contracts import SequenceCheck, SequenceOutcome
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.telemetry import TURN_LOG_EVENT
from turnaudit.verdicts import ActionAssessment, RiskTier, SafetyVerdict, Verdict

KEY = b"test-key"
DECODE = TurnEventDeserializer(shipped_catalog())  # one reader, as a service has


def consumed(
    event: dict[str, object], offset: int = 7, outcome: SequenceOutcome = SequenceOutcome.IN_ORDER
) -> ConsumedTurn:
    decoded = DECODE(encode(dict(event)))
    return ConsumedTurn(decoded, SequenceCheck(outcome), "t.turn-events", 2, offset)


REFUSED = turn(
    "s-1",
    4,
    refusal_emitted=True,
    surface="[refusal] no",
    surface_before_hedge="[refusal] no",
    safety_verdict=SafetyVerdict(False, ("weapons",)),
    action=ActionAssessment.from_critic("deploy", Verdict.HOLD, RiskTier.HIGH, False),
)


def test_one_line_per_turn_with_the_verdicts_and_where_it_was_read() -> None:
    registry = CollectorRegistry()
    sink = LogSink(LogSinkSettings(), registry)
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        deliver(sink, [consumed(REFUSED, offset=7), consumed(turn("s-2", 0), offset=8)])
    assert [line["event"] for line in logs] == ["turn", "turn"]
    line = logs[0]
    assert line["event_id"] == "s-1-4"
    assert (line["session_id"], line["turn"], line["sequence"]) == ("s-1", 4, 4)
    assert (line["path"], line["pack_id"], line["domain"], line["schema_version"]) == (
        "MAIN",
        "medical",
        "triage",
        2,
    )
    assert line["refusal_emitted"] is True
    assert line["hedge_injected"] is False
    assert line["violated_boundary_ids"] == ["weapons"]
    assert line["safety_passed"] is False
    assert line["ethics_passed"] is True
    assert (
        line["execution_verdict"],
        line["action_risk_verdict"],
        line["risk_tier"],
        line["output_policy"],
    ) == ("SEAL", "HOLD", "HIGH", "DOMAIN_HOLD")
    assert (line["topic"], line["partition"], line["offset"]) == ("t.turn-events", 2, 7)
    assert logs[1]["offset"] == 8
    assert logs[1]["output_policy"] is None
    assert registry.get_sample_value("turnaudit_log_lines_total") == 2


def test_surface_texts_are_not_written_by_default() -> None:
    fields = turn_fields(consumed(REFUSED), None)
    assert not {k for k in fields if "surface" in k or "input_tokens" in k}
    assert "[refusal] no" not in json.dumps(fields)


def test_hash_redaction_is_a_keyed_hmac_and_full_keeps_the_text() -> None:
    hashed = LogSink(LogSinkSettings(SurfaceRedaction.HASH, KEY), CollectorRegistry())
    full = LogSink(LogSinkSettings(SurfaceRedaction.KEEP), CollectorRegistry())
    with capture_logs() as logs:
        deliver(hashed, [consumed(REFUSED)])
        deliver(full, [consumed(REFUSED)])
    expected = "hmac-sha256:" + hmac.new(KEY, b"[refusal] no", hashlib.sha256).hexdigest()
    assert logs[0]["surface_hmac"] == expected
    assert "surface" not in logs[0]
    assert "[refusal] no" not in json.dumps(logs[0])
    assert logs[1]["surface"] == "[refusal] no"
    assert logs[1]["input_tokens"] == "how\x1fmuch\x1fibuprofen"


def test_a_recognised_redelivery_is_marked() -> None:
    fields = turn_fields(consumed(REFUSED, outcome=SequenceOutcome.DUPLICATE), None)
    assert fields["redelivered"] is True


def test_file_output_rotates_by_size_and_every_line_is_json(tmp_path: Path) -> None:
    settings = LogSinkSettings(file=tmp_path / "turns.jsonl", file_max_bytes=4096, file_backups=50)
    with service_logging():
        sink = LogSink(settings, CollectorRegistry())
        deliver(sink, [consumed(turn(f"s-{n}", 0), offset=n) for n in range(40)])
        sink.close()
    files = sorted(tmp_path.glob("turns.jsonl*"))
    lines = [json.loads(t) for f in files for t in f.read_text().splitlines()]
    assert len(files) > 1
    assert all(f.stat().st_size <= 4096 for f in files)
    assert sorted(line["offset"] for line in lines) == list(range(40))
    assert {line["event"] for line in lines} == {"turn"}


def test_event_time_lines_carry_the_turns_time_and_render_the_same_bytes_twice(
    tmp_path: Path,
) -> None:
    batch = [consumed(turn(f"s-{n}", 0), offset=n) for n in range(5)]
    outputs = []
    for name in ("first.jsonl", "second.jsonl"):
        with service_logging():
            settings = LogSinkSettings(file=tmp_path / name)
            sink = LogSink(settings, CollectorRegistry(), event_time=True)
            deliver(sink, batch)
            sink.close()
        outputs.append((tmp_path / name).read_bytes())
    assert outputs[0] == outputs[1]
    lines = [json.loads(line) for line in outputs[0].splitlines()]
    assert len(lines) == 5
    for line in lines:  # the same instant, in TimeStamper's microsecond form
        stamped = datetime.fromisoformat(line["timestamp"])
        assert stamped == datetime.fromisoformat(line["occurred_at"])


def simulated_turns(count: int) -> list[ConsumedTurn]:
    """Simulated turns of both schema versions, every kind, some redelivered, some non-ASCII."""
    sim = TurnRuntimeSimulator(5, schema_versions=(1, 2), concurrent_sessions=20)
    turns = []
    for n, event in enumerate(sim.events(count)):
        event["event_id"] = f"e-{n}"
        if n % 7 == 0:
            event["surface"] = event["surface"] + ' — naïve 日本 \u2028 \u2029 \x85 "quoted" \\'
        outcome = SequenceOutcome.DUPLICATE if n % 11 == 0 else SequenceOutcome.IN_ORDER
        turns.append(consumed(event, offset=n, outcome=outcome))
    return turns


TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z$")


@pytest.mark.parametrize("redaction", list(SurfaceRedaction))
def test_lines_rendered_by_the_sink_are_the_lines_the_structlog_chain_renders(
    tmp_path: Path, redaction: SurfaceRedaction
) -> None:
    """Under service_logging the sink renders lines itself: same keys, order and values."""
    settings = LogSinkSettings(redaction, KEY, file=tmp_path / "sink.jsonl")
    turns = simulated_turns(300)
    with service_logging(), structlog.contextvars.bound_contextvars(deployment="eu-1"):
        sink = LogSink(settings, CollectorRegistry())
        deliver(sink, turns[:120])
        deliver(sink, turns[120:])
        sink.close()
        # The same turns, one structlog call each through the configured chain.
        writer = TurnLineWriter(LogSinkSettings(file=tmp_path / "chain.jsonl"))
        chain = structlog.wrap_logger(writer).bind()
        redact = LogSink(settings, CollectorRegistry())._redact
        for turn in turns:
            chain.info(
                TURN_LOG_EVENT,
                **turn_fields(turn, redact),
                topic=turn.topic,
                partition=turn.partition,
                offset=turn.offset,
            )
        writer.close()
    rendered = (tmp_path / "sink.jsonl").read_text(encoding="utf-8").splitlines()
    expected = (tmp_path / "chain.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(rendered) == len(expected) == len(turns)
    for line, chain_line in zip(rendered, expected, strict=True):
        got, want = json.loads(line), json.loads(chain_line)
        assert list(got) == list(want)
        assert TIMESTAMP.match(got.pop("timestamp"))
        assert TIMESTAMP.match(want.pop("timestamp"))
        assert got == want
        assert {type(v) for v in got.values()} == {type(v) for v in want.values()}
    first = json.loads(rendered[0])
    assert first["deployment"] == "eu-1"
    assert (first["event"], first["logger"], first["level"]) == ("turn", "turnaudit.turns", "info")
    if redaction is SurfaceRedaction.KEEP:
        assert "naïve 日本" in (tmp_path / "sink.jsonl").read_text(encoding="utf-8")


def test_lines_to_stdout_follow_what_was_printed_before(capsys: pytest.CaptureFixture[str]) -> None:
    with service_logging():
        sink = LogSink(LogSinkSettings(), CollectorRegistry())
        sys.stdout.write("before\n")
        deliver(sink, [consumed(REFUSED, offset=7), consumed(turn("s-2", 0), offset=8)])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "before"
    lines = [json.loads(text) for text in out[1:]]
    assert [(line["event"], line["offset"]) for line in lines] == [("turn", 7), ("turn", 8)]
    assert lines[0]["event_id"] == "s-1-4"


def test_a_batch_spanning_rotations_keeps_every_line_once_in_order(tmp_path: Path) -> None:
    settings = LogSinkSettings(file=tmp_path / "turns.jsonl", file_max_bytes=2048, file_backups=50)
    with service_logging():
        sink = LogSink(settings, CollectorRegistry())
        deliver(sink, [consumed(turn(f"s-{n}", 0), offset=n) for n in range(25)])
        deliver(sink, [consumed(turn(f"s-{n}", 0), offset=n) for n in range(25, 30)])
        sink.close()
    # Oldest backup first: turns.jsonl.N ... turns.jsonl.1, then turns.jsonl.
    backups = sorted(tmp_path.glob("turns.jsonl.*"), key=lambda f: -int(f.suffix.lstrip(".")))
    files = [*backups, tmp_path / "turns.jsonl"]
    offsets = [json.loads(t)["offset"] for f in files for t in f.read_text().splitlines()]
    assert offsets == list(range(30))
    assert all(0 < f.stat().st_size <= 2048 for f in files)


def test_a_restarted_log_sink_appends_after_the_last_whole_line(tmp_path: Path) -> None:
    path = tmp_path / "turns.log"
    path.write_bytes(b'{"event_id": "a"}\n{"event_id": "b", "ses')
    with service_logging():
        writer = LogSink(LogSinkSettings(file=path), CollectorRegistry())
        deliver(writer, [consumed(REFUSED)])
        writer.close()
    lines = path.read_bytes().splitlines()
    assert lines[0] == b'{"event_id": "a"}'
    assert [orjson.loads(line)["event_id"] for line in lines[1:]] == [REFUSED["event_id"]]


def test_turns_taken_are_written_at_the_flush_and_kept_until_it_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = simulated_turns(40)
    with service_logging():
        sink = LogSink(LogSinkSettings(file=tmp_path / "taken.jsonl"), CollectorRegistry())
        for t in turns[:30]:
            sink.take(t)
        assert (tmp_path / "taken.jsonl").read_bytes() == b""  # nothing before the flush
        write_block = sink._writer.write_block
        failures = iter([OSError("disk full")])

        def failing_once(block: bytearray) -> None:
            for failure in failures:
                raise failure
            write_block(block)

        monkeypatch.setattr(sink._writer, "write_block", failing_once)
        with pytest.raises(OSError, match="disk full"):
            sink.flush()
        sink.flush()  # the runtime's retry: the taken lines are still pending
        deliver(sink, turns[30:])
        sink.close()
        whole = LogSink(LogSinkSettings(file=tmp_path / "whole.jsonl"), CollectorRegistry())
        deliver(whole, turns)
        whole.close()
    taken = [json.loads(t) for t in (tmp_path / "taken.jsonl").read_text().splitlines()]
    expected = [json.loads(t) for t in (tmp_path / "whole.jsonl").read_text().splitlines()]
    for line in (*taken, *expected):
        assert TIMESTAMP.match(line.pop("timestamp"))
    assert taken == expected
    assert [line["offset"] for line in taken] == list(range(40))
    assert sink.lines._value.get() == 40


def test_occurred_at_is_written_to_the_millisecond_from_the_long_on_the_wire() -> None:
    for millis, text in [
        (0, "1970-01-01T00:00:00.000Z"),
        (1_764_000_000_123, "2025-11-24T16:00:00.123Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
        (-62_135_596_800_000, "0001-01-01T00:00:00.000Z"),
    ]:
        fields = turn_fields(consumed(turn("s-ms", 0) | {"occurred_at": millis}), None)
        assert fields["occurred_at"] == text


def rotated_as_line_by_line(batches: list[list[bytes]], limit: int) -> list[bytes]:
    """Files, oldest first, as rotating before each line that would overfill a non-empty file."""
    files, current = [], b""
    for batch in batches:
        for line in batch:
            if current and len(current) + len(line) > limit:
                files.append(current)
                current = b""
            current += line
    return [*files, current]


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.integers(1, 120).map(lambda n: b"x" * (n - 1) + b"\n"), max_size=12),
        max_size=5,
    ),
    limit=st.integers(1, 300),
)
def test_a_block_of_lines_rotates_between_lines_as_line_by_line_writing_does(
    batches: list[list[bytes]], limit: int
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "turns.jsonl"
        writer = TurnLineWriter(LogSinkSettings(file=path, file_max_bytes=limit, file_backups=500))
        for batch in batches:
            writer.write_block(bytearray(b"".join(batch)))
        writer.close()
        backups = sorted(path.parent.glob("turns.jsonl.*"), key=lambda f: -int(f.suffix[1:]))
        files = [f.read_bytes() for f in [*backups, path]]
    assert files == rotated_as_line_by_line(batches, limit)
