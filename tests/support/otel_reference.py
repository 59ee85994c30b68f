"""The reference the native OTLP records are held to: the rule as it was written in Python
(``evaluation_records``, before it moved to native/src/verify/otlp.rs) and the
OpenTelemetry SDK path the sink took (``LoggerProvider``, the official ``encode_logs``),
so a test compares the native request with what the SDK would have sent.

What a record holds is documented in ``turnaudit.consumers.otel_records``; the names and
limits are taken from there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from opentelemetry import trace as trace_api
from opentelemetry._logs import SeverityNumber
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from turnaudit.consumers.otel_records import (
    ACTION_RISK,
    DOMAIN,
    ETHICS,
    EVALUATION_NAME,
    EVENT_ID,
    EVENT_NAME,
    EXPLANATION,
    HEDGE,
    HUMAN_DECISION,
    MAX_EXPLANATION,
    MAX_IDS,
    MAX_TEXT,
    OUTPUT_POLICY,
    PACK,
    PRODUCER_ID,
    PROVIDER_NAME,
    REDELIVERED,
    REDRIVEN,
    REFUSAL,
    REQUEST_MODEL,
    RESPONSE_ID,
    RESPONSE_MODEL,
    RISK_TIER,
    SAFETY,
    SCHEMA_VERSION,
    SCORE_LABEL,
    SCORE_VALUE,
    SEQUENCE,
    SESSION_ID,
)
from turnaudit.consumers.otel_sink import SCOPE, SERVICE_NAME
from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.events import TraceContext, occurred_millis

_ACTION_SCORES: Final = {"SEAL": 1.0, "HOLD": 0.5, "VOID": 0.0}
_HEX: Final = frozenset("0123456789abcdef")

AttributeValue = str | bool | int | float


@dataclass(frozen=True, slots=True)
class SpanParent:
    """The runtime's span a record belongs to (W3C ids as integers)."""

    trace_id: int
    span_id: int
    trace_flags: int


@dataclass(frozen=True, slots=True)
class EvaluationRecord:
    """One ``gen_ai.evaluation.result`` log record, before the SDK sees it."""

    attributes: Mapping[str, AttributeValue]
    timestamp_ns: int  # the turn's occurred_at
    parent: SpanParent | None  # None: the turn named no (well-formed) span
    body: str  # "<name>: <label>", for readers that show bodies only

    @property
    def name(self) -> str:
        return str(self.attributes[EVALUATION_NAME])


def span_parent(trace_context: TraceContext | None) -> SpanParent | None:
    """The span of v4's ``trace_context``; None when absent, malformed or all zero."""
    if trace_context is None:
        return None
    trace_id, span_id = trace_context["trace_id"], trace_context["span_id"]
    if not (_hex_id(trace_id, 32) and _hex_id(span_id, 16)):
        return None
    return SpanParent(int(trace_id, 16), int(span_id, 16), trace_context["trace_flags"] & 0xFF)


def _hex_id(value: str, digits: int) -> bool:
    return len(value) == digits and set(value) <= _HEX and value != "0" * digits


def _text(value: str) -> str:
    return value[:MAX_TEXT]


def _named(what: str, ids: Sequence[str]) -> str:
    shown = ", ".join(_text(i) for i in ids[:MAX_IDS])
    more = f" and {len(ids) - MAX_IDS} more" if len(ids) > MAX_IDS else ""
    return f"{what}: {shown}{more}"[:MAX_EXPLANATION]


def turn_attributes(turn: ConsumedTurn) -> dict[str, AttributeValue]:
    """What every record of the turn carries: the turn, its model, how it was read."""
    event = turn.event
    attributes: dict[str, AttributeValue] = {
        PACK: _text(event["pack_id"]),
        DOMAIN: _text(event["domain"]),
        SESSION_ID: _text(event["session_id"]),
        EVENT_ID: _text(event["event_id"]),
        SCHEMA_VERSION: int(turn.decoded.writer_version),
        REDELIVERED: bool(turn.sequence.redelivered),
        REDRIVEN: bool(turn.redriven),
    }
    # v1/v2 records carry no stream identity (read with an empty producer id).
    producer_id = event["producer_id"]
    if producer_id:
        attributes[PRODUCER_ID] = _text(producer_id)
        attributes[SEQUENCE] = int(event["sequence"])
    response_id = event["response_id"]
    if response_id:
        attributes[RESPONSE_ID] = _text(response_id)
    model = event["model"]
    if model is not None:
        attributes[PROVIDER_NAME] = _text(model["provider"])
        attributes[REQUEST_MODEL] = _text(model["request_model"])
        response_model = model["response_model"]
        if response_model:
            attributes[RESPONSE_MODEL] = _text(response_model)
    return attributes


def evaluation_records(turn: ConsumedTurn) -> list[EvaluationRecord]:
    """The turn's verdicts, one record each, in the order of the table above."""
    event = turn.event
    common = turn_attributes(turn)
    # Epoch ms from the service decoders; a datetime from others (occurred_millis takes both).
    timestamp_ns = occurred_millis(event["occurred_at"]) * 1_000_000
    parent = span_parent(event["trace_context"])
    bundle = event["verdicts"]
    found: list[tuple[str, float, str, str | None, dict[str, AttributeValue]]] = []
    safety = bundle["safety_verdict"]
    if safety is not None:
        passed = bool(safety["passed"])
        found.append(
            (
                SAFETY,
                float(passed),
                "pass" if passed else "fail",
                None
                if passed or not safety["violated_boundary_ids"]
                else _named("violated boundaries", safety["violated_boundary_ids"]),
                {},
            )
        )
    ethics = bundle["ethics_verdict"]
    if ethics is not None:
        passed = bool(ethics["passed"])
        found.append(
            (
                ETHICS,
                float(passed),
                "pass" if passed else "fail",
                None
                if passed or not ethics["violated_predicate_ids"]
                else _named("violated predicates", ethics["violated_predicate_ids"]),
                {},
            )
        )
    refused = bool(bundle["refusal_emitted"])
    found.append((REFUSAL, float(refused), "refused" if refused else "not_refused", None, {}))
    hedged = bool(bundle["hedge_injected"])
    found.append((HEDGE, float(hedged), "hedged" if hedged else "not_hedged", None, {}))
    action = event["action_assessment"]
    if action is not None:
        verdict = str(action["action_risk_verdict"])
        tier, policy = str(action["risk_tier"]), str(action["output_policy"])
        human = bool(action["human_decision_required"])
        why = f"risk tier {tier}, output policy {policy}" + (
            ", human decision required" if human else ""
        )
        found.append(
            (
                ACTION_RISK,
                _ACTION_SCORES.get(verdict, 0.0),
                _text(verdict.lower()),
                _text(why),
                {RISK_TIER: _text(tier), OUTPUT_POLICY: _text(policy), HUMAN_DECISION: human},
            )
        )
    records = []
    for name, value, label, explanation, own in found:
        attributes: dict[str, AttributeValue] = {
            EVALUATION_NAME: name,
            SCORE_VALUE: value,
            SCORE_LABEL: label,
        }
        if explanation is not None:
            attributes[EXPLANATION] = explanation
        attributes.update(own)
        attributes.update(common)
        records.append(EvaluationRecord(attributes, timestamp_ns, parent, f"{name}: {label}"))
    return records


def parent_context(record: EvaluationRecord) -> Context | None:
    """The runtime's span as the record's context, as the SDK path gave it."""
    parent = record.parent
    if parent is None:
        return None
    span = trace_api.SpanContext(
        parent.trace_id,
        parent.span_id,
        is_remote=True,
        trace_flags=trace_api.TraceFlags(parent.trace_flags),
    )
    return trace_api.set_span_in_context(trace_api.NonRecordingSpan(span))


def sdk_request(
    turns: Iterable[ConsumedTurn], resource: Mapping[str, str] | None = None
) -> ExportLogsServiceRequest:
    """The turns' records as the SDK path emitted them, encoded by the official encoder."""
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider(
        resource=Resource.create({"service.name": SERVICE_NAME, **(resource or {})}),
        shutdown_on_exit=False,
    )
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger(SCOPE)
    for turn in turns:
        for record in evaluation_records(turn):
            logger.emit(
                timestamp=record.timestamp_ns,
                context=parent_context(record),
                severity_number=SeverityNumber.INFO,
                severity_text="INFO",
                body=record.body,
                attributes=dict(record.attributes),
                event_name=EVENT_NAME,
            )
    provider.shutdown()
    return encode_logs(exporter.get_finished_logs())


def comparable(
    requests: Sequence[bytes | ExportLogsServiceRequest], *, in_order: bool = True
) -> ExportLogsServiceRequest:
    """Requests as one, for comparing: their records in order under the first's resource
    and scope (each must have the same), observed times cleared (each path's own clock),
    the resource's attributes by name, ``service.instance.id``'s value cleared (a fresh id
    per sink) and the SDK's own ``telemetry.sdk.*`` left out (no SDK writes the native
    requests: the one deliberate difference). ``in_order=False``: the records in one
    fixed order (requests sent in parallel arrive in any order)."""
    out = ExportLogsServiceRequest()
    for sent in requests:
        request = ExportLogsServiceRequest.FromString(sent) if isinstance(sent, bytes) else sent
        for resource_logs in request.resource_logs:
            attributes = resource_logs.resource.attributes
            kept = sorted(
                (a for a in attributes if not a.key.startswith("telemetry.sdk.")),
                key=lambda a: a.key,
            )
            for a in kept:
                if a.key == "service.instance.id":
                    assert a.value.string_value
                    a.value.string_value = ""
            del attributes[:]
            attributes.extend(kept)
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    record.observed_time_unix_nano = 0
            if not out.resource_logs:
                out.resource_logs.append(resource_logs)
                continue
            mine = out.resource_logs[0]
            assert mine.resource == resource_logs.resource
            assert len(resource_logs.scope_logs) == 1
            assert mine.scope_logs[0].scope == resource_logs.scope_logs[0].scope
            mine.scope_logs[0].log_records.extend(resource_logs.scope_logs[0].log_records)
    if not in_order and out.resource_logs:
        records = out.resource_logs[0].scope_logs[0].log_records
        ordered = sorted(records, key=lambda r: r.SerializeToString(deterministic=True))
        del records[:]
        records.extend(ordered)
    return out
