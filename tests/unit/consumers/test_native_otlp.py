"""The OTel sink's native records (``ConsumeStep``'s ``otlp`` outlet, a scanned message
read in place) against the record-by-record path and the SDK path.

``TurnEventValidation.examine_batch`` (ordinary turns' records written by the step, every
other message through ``examine``/``conclude`` and ``take``) sends the collector the same
requests as ``hand_over`` record by record, and as the OpenTelemetry SDK path (the rule
as it was in Python, ``LoggerProvider``, the official ``encode_logs``) sends for the turns
the record-by-record path took: over any batches of the native batch test's kinds (every
shipped version, a learned schema, garbage, wrong keys, duplicates, gaps, breaches,
redriven headers, forgotten partitions) and over chained turns with any verdicts, texts,
model and trace context. Observed times are each path's clock (not compared); the SDK's
``telemetry.sdk.*`` resource attributes are its own (``comparable``).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.otel_reference import comparable, sdk_request
from tests.unit.consumers.test_native_batch import (
    SERIALIZERS,
    Message,
    ServiceUnderTest,
    batches,
    chained_turns,
    tracker_state,
)
from tests.unit.consumers.test_otel_records import mutate
from turnaudit.consumers.otel_sink import RECORDS_TOTAL, OtelSink
from turnaudit.consumers.runtime.handover import HandedBatch
from turnaudit.consumers.runtime.otel_settings import OtlpSettings
from turnaudit.identity import TurnStamper
from turnaudit.producers.simulator import TurnRuntimeSimulator


class Capture:
    """A transport that keeps every request it is given."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, request: bytes) -> None:
        self.sent.append(request)

    def close(self) -> None:
        return


class OtelService(ServiceUnderTest):
    """One OTel sink service; its requests kept."""

    sink: OtelSink

    def __init__(self, native: bool) -> None:
        self.transport = Capture()
        super().__init__(
            native,
            lambda registry: OtelSink(
                OtlpSettings(), registry, transport=self.transport, clock=lambda: 5
            ),
        )


def both() -> tuple[OtelService, OtelService]:
    return OtelService(False), OtelService(True)


def same_requests(reference: OtelService, native: OtelService) -> None:
    # A flush's requests go at once, so they arrive in any order: the records compared as
    # a whole (each request's own are in order; otlp_requests' property holds the cut).
    sent = comparable(native.transport.sent, in_order=False)
    assert sent == comparable(reference.transport.sent, in_order=False)
    assert sent == comparable([sdk_request(reference.taken)], in_order=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_the_native_records_are_the_record_by_record_and_the_sdk_paths_requests(
    drawn: tuple[list[list[Message]], list[set[int]]],
) -> None:
    cut, forgotten = drawn
    reference, native = both()
    for records, forget in zip(cut, forgotten, strict=True):
        assert native.batch(records) == reference.batch(records)
        assert native.rejections == reference.rejections
        for service in (reference, native):
            service.validation.forget_partitions(forget)
    same_requests(reference, native)
    assert native.samples() == reference.samples()
    assert tracker_state(native) == tracker_state(reference)


@st.composite
def mutated_chained(draw: st.DrawFn) -> list[Message]:
    """Chained turns of the scanned versions, each mutated (``mutate``), in one partition."""
    count = draw(st.integers(1, 8))
    sim = TurnRuntimeSimulator(draw(st.integers(0, 100)), schema_versions=(5,))
    stamper = TurnStamper()
    out = []
    for i, event in enumerate(sim.events(count)):
        mutate(draw, event)
        version = draw(st.sampled_from([3, 4, 5]))
        event["verdicts"]["schema_version"] = version
        stamper.stamp(event)
        value = SERIALIZERS[version](event)
        stamper.commit(event, value)
        out.append(Message(value, event["session_id"].encode(), 0, i))
    return out


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated_chained())
def test_any_verdicts_texts_model_and_trace_context_read_in_place_are_the_sdk_paths(
    records: list[Message],
) -> None:
    reference, native = both()
    assert native.batch(records) == reference.batch(records)
    same_requests(reference, native)


def test_ordinary_turns_of_every_scanned_version_are_written_natively() -> None:
    turns = chained_turns(7, 30, [3, 4, 5] * 10)
    records = [Message(v, k, 0, i) for i, (k, v) in enumerate(turns)]
    reference, native = both()
    assert native.batch(records) == HandedBatch(next_offsets={0: 30}, handed=30)
    reference.batch(records)
    assert native.taken == []  # every record was the step's
    same_requests(reference, native)
    assert native.samples() == reference.samples()
    assert native.registry.get_sample_value(RECORDS_TOTAL.removesuffix("_total") + "_total")
