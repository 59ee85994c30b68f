"""TurnEvent v4's joins to the runtime's telemetry: the trace context of the
current OpenTelemetry span (or the one given), the response id and the model,
written by the adapter and read back as they were; breaches start empty."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import trace as trace_api

from tests.support.turns import main_turn_kwargs
from turnaudit.producers.adapter import (
    Model,
    RuntimeInfo,
    Trace,
    TurnContext,
    TurnEventBuilder,
    current_trace,
)
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer

CATALOG = shipped_catalog()
BUILDER = TurnEventBuilder(RuntimeInfo("rt", "1.0", "i-1"))
hex_ids = st.integers(1, 2**128 - 1).map(lambda n: f"{n:032x}")
span_ids = st.integers(1, 2**64 - 1).map(lambda n: f"{n:016x}")


def built(ctx: TurnContext) -> dict[str, object]:
    event = dict(BUILDER.main_turn(ctx, **main_turn_kwargs()))
    event.update(event_id="e-1", sequence=0, producer_id="p", prev_hash="0" * 64)
    payload = SingleObjectSerializer(CATALOG.latest)(event)
    return dict(TurnEventDeserializer(CATALOG)(payload).event)


def test_the_builder_writes_the_newest_version() -> None:
    assert CATALOG.latest.version == 5 == BUILDER.schema_version


@given(trace_id=hex_ids, span_id=span_ids, sampled=st.booleans())
def test_the_active_span_is_recorded_and_read_back(
    trace_id: str, span_id: str, sampled: bool
) -> None:
    context = trace_api.SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=False,
        trace_flags=trace_api.TraceFlags(1 if sampled else 0),
    )
    with trace_api.use_span(trace_api.NonRecordingSpan(context)):
        assert current_trace() == Trace(trace_id, span_id, sampled)
        read = built(TurnContext("s-1", "general", "howto", 0))
    assert read["trace_context"] == {
        "trace_id": trace_id,
        "span_id": span_id,
        "trace_flags": 1 if sampled else 0,
    }
    assert read["breaches"] == []


def test_without_a_span_the_turn_has_no_trace_and_an_explicit_one_wins() -> None:
    assert current_trace() is None
    assert built(TurnContext("s-1", "general", "howto", 0))["trace_context"] is None
    given_trace = Trace("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    model = Model("ollama", "llama3.2:1b", "llama3.2:1b-q4")
    read = built(
        TurnContext(
            "s-1", "general", "howto", 0, trace=given_trace, response_id="resp-7", model=model
        )
    )
    assert read["trace_context"] == given_trace.to_avro()
    assert read["response_id"] == "resp-7"
    assert read["model"] == {
        "provider": "ollama",
        "request_model": "llama3.2:1b",
        "response_model": "llama3.2:1b-q4",
    }


@given(st.text(max_size=40))
def test_a_malformed_trace_id_is_refused(text: str) -> None:
    if len(text) == 32 and not text.strip("0123456789abcdef") and text != "0" * 32:
        return  # a well-formed id: nothing to refuse
    with pytest.raises(ValueError, match="trace_id must be 32 lower-case hex digits"):
        Trace(text, "b7ad6b7169203331")


def test_older_writers_carry_none_of_the_v4_fields() -> None:
    for version in (1, 2, 3):
        event = TurnEventBuilder(RuntimeInfo("rt", "1.0", "i-1"), version).main_turn(
            TurnContext(
                "s-1",
                "general",
                "howto",
                0,
                trace=Trace("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"),
            ),
            **main_turn_kwargs(),
        )
        assert not {"breaches", "trace_context", "response_id", "model"} & set(event)
