"""The log sink's native lines against the record-by-record path.

Under ``service_logging`` with surfaces not written, ``TurnEventValidation.examine_batch``
(ordinary turns rendered by ``ConsumeStep``'s line outlet, every other message through
``examine``/``conclude`` and ``take``) writes the same log file, byte for byte, as
``hand_over`` record by record: over any batches of the native batch test's kinds
(every shipped version, a learned schema, garbage, wrong keys, duplicates, gaps, chain
breaks, breaches, recorded breaches, redriven headers, forgotten partitions), with the
same ``HandedBatch``, rejections, registry samples and tracker state; over any float
score and any session text the native lines are orjson's. The clock is pinned (the
native path stamps once per call of the step, the Python path per line).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
import structlog
import structlog.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.consumers.test_native_batch import (
    CATALOG,
    SERIALIZERS,
    Message,
    ServiceUnderTest,
    batches,
    chained_turns,
    tracker_state,
)
from turnaudit.consumers.log_sink import LINE_KEYS, LogSink, render_line, service_logging
from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.consumers.runtime.handover import HandedBatch
from turnaudit.consumers.runtime.settings import LogSinkSettings, SurfaceRedaction
from turnaudit.consumers.runtime.sink import IN_ORDER
from turnaudit.identity import TurnStamper
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.telemetry import TURN_LOG_EVENT

MOMENT = datetime(2026, 11, 1, 12, 0, 5, 123456, tzinfo=UTC)


class LogService(ServiceUnderTest):
    """One log service's validation and sink, writing a file of its own."""

    sink: LogSink

    def __init__(
        self,
        native: bool,
        directory: Path,
        *,
        redaction: SurfaceRedaction = SurfaceRedaction.DROP,
        moment: datetime = MOMENT,
        event_time: bool = False,
    ) -> None:
        self.path = directory / ("native.jsonl" if native else "reference.jsonl")
        settings = LogSinkSettings(file=self.path, redaction=redaction, hash_key=b"k" * 32)
        super().__init__(
            native,
            lambda registry: LogSink(
                settings, registry, clock=lambda: moment, event_time=event_time
            ),
        )

    def lines(self) -> bytes:
        self.sink.close()
        return self.path.read_bytes()


@pytest.fixture(autouse=True)
def _service_logging() -> Iterator[None]:
    with service_logging():
        yield


def both(directory: Path, **options: object) -> tuple[LogService, LogService]:
    return LogService(False, directory, **options), LogService(True, directory, **options)  # type: ignore[arg-type]  # the options' own types


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_the_native_lines_are_the_record_by_record_files_bytes(
    drawn: tuple[list[list[Message]], list[set[int]]],
) -> None:
    cut, forgotten = drawn
    with tempfile.TemporaryDirectory() as tmp:
        reference, native = both(Path(tmp))
        for records, forget in zip(cut, forgotten, strict=True):
            assert native.batch(records) == reference.batch(records)
            assert native.rejections == reference.rejections
            for service in (reference, native):
                service.validation.forget_partitions(forget)
        assert native.lines() == reference.lines()
        assert native.samples() == reference.samples()
        assert tracker_state(native) == tracker_state(reference)


def scored_turns(scores: list[float], sessions: list[str]) -> list[Message]:
    """Chained v5 turns, each with its drawn identity score and in its drawn session."""
    sim = TurnRuntimeSimulator(3, schema_versions=(5,), concurrent_sessions=1)
    stamper = TurnStamper()
    out = []
    for i, (event, score) in enumerate(zip(sim.events(len(scores)), scores, strict=True)):
        event["session_id"] = sessions[i % len(sessions)]
        identity = {"score": score, "threshold": 0.5}
        event["identity_score"] = identity
        event["verdicts"]["identity_score"] = dict(identity)
        stamper.stamp(event)
        value = SERIALIZERS[5](event)
        stamper.commit(event, value)
        out.append(Message(value, event["session_id"].encode(), 0, i))
    return out


# Any float, floats around every decimal exponent where orjson's layout turns
# (positional from 1e-5 to below 1e16): powers of ten and their neighbours, and floats
# whose two shortest digit strings are equally near (2**46 + 0.125 is ...64.12 or ...64.13:
# ties go to the even one), scaled by exact powers of two.
SCORES = st.one_of(
    st.floats(allow_nan=False),
    st.builds(
        lambda whole, eighths, scale: (whole + eighths / 8) * 2.0**scale,
        st.integers(2**44, 2**50),
        st.integers(0, 7),
        st.integers(-60, 30),
    ),
    st.builds(
        lambda mantissa, exponent, sign: sign * mantissa * 10.0**exponent,
        st.one_of(st.just(1.0), st.floats(1, 10)),
        st.integers(-9, 19),
        st.sampled_from([1.0, -1.0]),
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(SCORES, min_size=1, max_size=12),
    st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=3, unique=True),
)
def test_any_score_and_any_session_text_render_natively_as_orjson_writes_them(
    scores: list[float], sessions: list[str]
) -> None:
    records = scored_turns(scores, sessions)
    with tempfile.TemporaryDirectory() as tmp:
        reference, native = both(Path(tmp))
        assert native.batch(records) == reference.batch(records)
        assert native.taken == []  # every line was the step's
        assert native.lines() == reference.lines()


def test_ordinary_turns_of_every_scanned_version_are_written_natively() -> None:
    turns = chained_turns(7, 30, [3, 4, 5] * 10)
    records = [Message(v, k, 0, i) for i, (k, v) in enumerate(turns)]
    with tempfile.TemporaryDirectory() as tmp:
        reference, native = both(Path(tmp))
        assert native.batch(records) == HandedBatch(next_offsets={0: 30}, handed=30)
        reference.batch(records)
        assert native.taken == []
        assert native.lines() == reference.lines()
        assert native.sink.lines._value.get() == 30


@pytest.mark.parametrize("redaction", [SurfaceRedaction.HASH, SurfaceRedaction.KEEP])
def test_lines_that_write_surfaces_go_record_by_record(redaction: SurfaceRedaction) -> None:
    turns = chained_turns(8, 12, [5] * 12)
    records = [Message(v, k, 0, i) for i, (k, v) in enumerate(turns)]
    with tempfile.TemporaryDirectory() as tmp:
        reference, native = both(Path(tmp), redaction=redaction)
        assert native.batch(records) == reference.batch(records)
        assert len(native.taken) == 12
        assert native.lines() == reference.lines()


def test_context_local_values_send_the_batch_record_by_record() -> None:
    turns = chained_turns(9, 10, [5] * 10)
    records = [Message(v, k, 0, i) for i, (k, v) in enumerate(turns)]
    with tempfile.TemporaryDirectory() as tmp:
        reference, native = both(Path(tmp))
        with structlog.contextvars.bound_contextvars(request="r-1"):
            assert native.batch(records) == reference.batch(records)
        assert len(native.taken) == 10
        lines = native.lines()
        assert lines == reference.lines()
        assert all(orjson.loads(line)["request"] == "r-1" for line in lines.splitlines())


def test_another_structlog_chain_sends_the_batch_record_by_record() -> None:
    turns = chained_turns(12, 10, [5] * 10)
    records = [Message(v, k, 0, i) for i, (k, v) in enumerate(turns)]
    with tempfile.TemporaryDirectory() as tmp:
        native = LogService(True, Path(tmp))
        with structlog.testing.capture_logs() as captured:
            assert native.batch(records) == HandedBatch(next_offsets={0: 10}, handed=10)
        assert len(native.taken) == 10
        assert [line["event"] for line in captured] == [TURN_LOG_EVENT] * 10
        assert native.lines() == b""  # the configured chain had them, not the file


def test_event_time_lines_go_record_by_record() -> None:
    turns = chained_turns(13, 10, [5] * 10)
    records = [Message(v, k, 0, i) for i, (k, v) in enumerate(turns)]
    with tempfile.TemporaryDirectory() as tmp:
        reference, native = both(Path(tmp), event_time=True)
        assert native.batch(records) == reference.batch(records)
        assert len(native.taken) == 10
        assert native.lines() == reference.lines()


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (MOMENT, "2026-11-01T12:00:05.123456Z"),
        (datetime(2026, 11, 1, 12, 0, 5, tzinfo=UTC), "2026-11-01T12:00:05Z"),
    ],
)
def test_a_native_line_is_stamped_with_the_clock_as_the_python_path_writes_it(
    moment: datetime, text: str
) -> None:
    turns = chained_turns(10, 3, [5] * 3)
    records = [Message(v, k, 0, i) for i, (k, v) in enumerate(turns)]
    with tempfile.TemporaryDirectory() as tmp:
        native = LogService(True, Path(tmp), moment=moment)
        native.batch(records)
        assert native.taken == []
        stamps = [orjson.loads(line)["timestamp"] for line in native.lines().splitlines()]
        assert stamps == [text] * 3


def test_the_native_key_order_is_the_python_lines() -> None:
    """``LINE_KEYS`` (the native step's order) is the key order ``render_line`` writes,
    with and without a task and an action assessment."""
    decode = TurnEventDeserializer(CATALOG)
    for key, value in chained_turns(11, 30, [3, 4, 5] * 10):
        turn = ConsumedTurn(decode(value), IN_ORDER, "t", 0, 1)
        assert tuple(orjson.loads(render_line(turn, None, {}, False))) == LINE_KEYS, key
