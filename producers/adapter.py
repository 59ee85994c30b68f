"""The runtime adapter: from what a turn produced to a TurnEvent (ADR-0039).

A runtime calls ``TurnEventBuilder.main_turn`` after a real turn and
``stub_turn`` from its stub path; ``TurnAuditEmitter.emit`` checks the
pipeline's contracts and publishes (a breaching v4 turn too, carrying its
breaches). The ``correct()`` fallback, where no real
turn happened, calls ``stub_turn`` without tokens and gets ``None``: nothing
is emitted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, cast

import structlog
from opentelemetry import trace as trace_api
from prometheus_client import CollectorRegistry

from turnaudit.contracts import Breach, check_event
from turnaudit.events import (
    ModelIdentity,
    OutgoingTurnEvent,
    RuntimeIdentity,
    TaskContext,
    TraceContext,
)
from turnaudit.label_bounds import DEFAULT_LABEL_LIMIT
from turnaudit.producers.metrics import BreachMetrics
from turnaudit.verdicts import (
    UNKNOWN_DOMAIN_SURFACE,
    ActionAssessment,
    EthicsVerdict,
    IdentityScore,
    SafetyVerdict,
    TurnPath,
    TurnVerdicts,
)

log = structlog.get_logger("turnaudit.adapter")

LATEST_SCHEMA_VERSION = 5
SHIPPED_SCHEMA_VERSIONS = (1, 2, 3, 4, 5)


def inject_hedge(surface: str, hedge_prefix: str) -> str:
    """ADR-0038: prepend the hedge unless the surface already begins with it."""
    if surface.startswith(hedge_prefix):
        return surface
    return f"{hedge_prefix} {surface}"


@dataclass(frozen=True, slots=True)
class Trace:
    """A W3C trace context: the span a turn belongs to (lower-case hex ids)."""

    trace_id: str
    span_id: str
    sampled: bool = True

    def __post_init__(self) -> None:
        for name, digits in (("trace_id", 32), ("span_id", 16)):
            value = getattr(self, name)
            if len(value) != digits or value.strip("0123456789abcdef") or value == "0" * digits:
                raise ValueError(
                    f"{name} must be {digits} lower-case hex digits, not all zero: {value!r}"
                )

    def to_avro(self) -> TraceContext:
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "trace_flags": 1 if self.sampled else 0,
        }


def current_trace() -> Trace | None:
    """The OpenTelemetry span current in this context, if one is active and valid."""
    span = trace_api.get_current_span().get_span_context()
    if not span.is_valid:
        return None
    return Trace(
        f"{span.trace_id:032x}",
        f"{span.span_id:016x}",
        bool(span.trace_flags & trace_api.TraceFlags.SAMPLED),
    )


@dataclass(frozen=True, slots=True)
class Model:
    """The model behind a turn, in OpenTelemetry GenAI terms."""

    provider: str  # gen_ai.provider.name
    request_model: str  # gen_ai.request.model
    response_model: str | None = None  # gen_ai.response.model

    def to_avro(self) -> ModelIdentity:
        return {
            "provider": self.provider,
            "request_model": self.request_model,
            "response_model": self.response_model,
        }


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    name: str
    version: str
    instance_id: str = ""


@dataclass(frozen=True, slots=True)
class TaskStep:
    """Where a turn sits in a task run (HTIR traces are assembled from these)."""

    task_id: str
    task_family: str
    step: int
    end_of_task: bool = False


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str = ""
    result: str = ""
    ok: bool = True


@dataclass(frozen=True, slots=True)
class TurnContext:
    session_id: str
    pack_id: str
    domain: str
    turn: int
    occurred_at: datetime | None = None  # None: now
    task: TaskStep | None = None
    # v4: the joins to the runtime's telemetry. ``trace`` None: the OpenTelemetry
    # span current when the event is built, if one is active (``current_trace``).
    trace: Trace | None = None
    response_id: str | None = None  # gen_ai.response.id
    model: Model | None = None


class TurnEventBuilder:
    """Builds TurnEvent records for one schema version (the latest by default)."""

    def __init__(self, runtime: RuntimeInfo, schema_version: int = LATEST_SCHEMA_VERSION) -> None:
        if schema_version not in SHIPPED_SCHEMA_VERSIONS:
            raise ValueError(f"schema version {schema_version} is not shipped")
        self.schema_version = schema_version
        self._runtime: RuntimeIdentity = {
            "name": runtime.name,
            "version": runtime.version,
            "instance_id": runtime.instance_id,
        }

    def main_turn(
        self,
        ctx: TurnContext,
        *,
        input_tokens: Sequence[str],
        walk_surface: str,
        articulation_surface: str,
        surface_before_hedge: str,
        surface: str,
        identity_score: IdentityScore | None,
        cycle_cost_total: float,
        vault_hits: int,
        versor_condition: float,
        flagged: bool,
        safety_verdict: SafetyVerdict | None,
        ethics_verdict: EthicsVerdict | None,
        refusal_emitted: bool,
        action: ActionAssessment | None = None,
        tool_steps: Sequence[ToolCall] = (),
    ) -> OutgoingTurnEvent:
        """A main-path turn. ``surface_before_hedge`` is the surface after any
        refusal replaced it and before hedge injection; ``surface`` is what the
        runtime returned. ``hedge_injected`` is exactly "the runtime changed it"."""
        verdicts = TurnVerdicts(
            identity_score=identity_score,
            safety_verdict=safety_verdict,
            ethics_verdict=ethics_verdict,
            refusal_emitted=refusal_emitted,
            hedge_injected=surface != surface_before_hedge,
        )
        return self._event(
            ctx,
            TurnPath.MAIN,
            verdicts=verdicts,
            action=action,
            tool_steps=tool_steps,
            fields=_Surfaces(
                input_tokens=list(input_tokens),
                surface=surface,
                walk_surface=walk_surface,
                articulation_surface=articulation_surface,
                cycle_cost_total=float(cycle_cost_total),
                vault_hits=int(vault_hits),
                versor_condition=float(versor_condition),
                flagged=bool(flagged),
            ),
        )

    def stub_turn(
        self,
        ctx: TurnContext,
        *,
        input_tokens: Sequence[str] | None,
        versor_condition: float,
        safety_verdict: SafetyVerdict | None,
        ethics_verdict: EthicsVerdict | None,
        refusal_surface: str | None = None,
    ) -> OutgoingTurnEvent | None:
        """A stub turn (cold start, unknown domain), with ADR-0039's values.

        ``ctx.turn`` is the runtime's turn counter minus one (finalize_turn
        already ran). Without tokens this is the ``correct()`` fallback: no
        real turn happened and no event is built.
        """
        if not input_tokens:
            return None
        verdicts = TurnVerdicts(
            identity_score=None,
            safety_verdict=safety_verdict,
            ethics_verdict=ethics_verdict,
            refusal_emitted=refusal_surface is not None,
            hedge_injected=False,  # ADR-0038 prohibits a hedge on a stub turn
        )
        return self._event(
            ctx,
            TurnPath.STUB,
            verdicts=verdicts,
            action=None,
            tool_steps=(),
            fields=_Surfaces(
                input_tokens=list(input_tokens),
                surface=refusal_surface if refusal_surface is not None else UNKNOWN_DOMAIN_SURFACE,
                walk_surface=UNKNOWN_DOMAIN_SURFACE,
                articulation_surface=UNKNOWN_DOMAIN_SURFACE,
                cycle_cost_total=0.0,
                vault_hits=0,
                versor_condition=float(versor_condition),
                flagged=False,
            ),
        )

    def _event(
        self,
        ctx: TurnContext,
        path: TurnPath,
        *,
        verdicts: TurnVerdicts,
        action: ActionAssessment | None,
        tool_steps: Sequence[ToolCall],
        fields: _Surfaces,
    ) -> OutgoingTurnEvent:
        occurred = ctx.occurred_at or datetime.now(UTC)
        bundle = verdicts.to_avro(self.schema_version)
        task: TaskContext | None = None
        if ctx.task is not None:
            task = {
                "task_id": ctx.task.task_id,
                "task_family": ctx.task.task_family,
                "step": ctx.task.step,
                "end_of_task": ctx.task.end_of_task,
            }
        event: OutgoingTurnEvent = {
            "event_id": "",  # assigned by the publisher
            "session_id": ctx.session_id,
            "sequence": -1,  # assigned by the publisher
            # Turn identity (v3), assigned by the publisher: its stream and chain.
            "producer_id": "",
            "prev_hash": "",
            "occurred_at": int(occurred.timestamp() * 1000),
            "runtime": self._runtime,
            "path": path.value,
            "pack_id": ctx.pack_id,
            "domain": ctx.domain,
            "task": task,
            "turn": ctx.turn,
            "input_tokens": fields.input_tokens,
            "surface": fields.surface,
            "walk_surface": fields.walk_surface,
            "articulation_surface": fields.articulation_surface,
            "cycle_cost_total": fields.cycle_cost_total,
            "vault_hits": fields.vault_hits,
            "versor_condition": fields.versor_condition,
            "flagged": fields.flagged,
            "identity_score": bundle["identity_score"],
            "verdicts": bundle,
            "action_assessment": None if action is None else action.to_avro(),
        }
        if self.schema_version != 2:
            # v1 keeps ADR-0035's per-field verdicts beside the bundle; v3 writes
            # them again (deprecated) so that readers pinned to v1 keep their meaning.
            event["safety_verdict"] = bundle["safety_verdict"]
            event["ethics_verdict"] = bundle["ethics_verdict"]
        if self.schema_version >= 2:
            event["tool_steps"] = [
                {"name": t.name, "arguments": t.arguments, "result": t.result, "ok": t.ok}
                for t in tool_steps
            ]
        if self.schema_version >= 4:
            trace = ctx.trace or current_trace()
            event["breaches"] = []  # the emitter records what the contracts find
            event["trace_context"] = None if trace is None else trace.to_avro()
            event["response_id"] = ctx.response_id
            event["model"] = None if ctx.model is None else ctx.model.to_avro()
        if self.schema_version >= 5:
            # The publisher writes its head interval here; sealing is not built yet.
            event["liveness_interval_ms"] = None
            event["sealed"] = None
        return event


@dataclass(frozen=True, slots=True)
class _Surfaces:
    """What a turn produced, beside its context and verdicts."""

    input_tokens: list[str]
    surface: str
    walk_surface: str
    articulation_surface: str
    cycle_cost_total: float
    vault_hits: int
    versor_condition: float
    flagged: bool


class EventSink(Protocol):
    def publish(self, event: OutgoingTurnEvent) -> str: ...


BreachHandler = Callable[[OutgoingTurnEvent, list[Breach]], None]


class TurnAuditEmitter:
    """Checks PIPELINE.md's contracts 1-4, then publishes.

    A breaching turn is still a turn that happened: a v4 event is published
    like any other, carrying the contracts it broke in ``breaches`` (a copy of
    the event; the runtime's own is not changed), so consumers count it as
    the turn it is and as a breach. The breach is also reported to the
    runtime: logged, counted (``turnaudit_publisher_breaches_total{pack,
    contract}`` on ``registry``) and handed to ``on_recorded`` when given.

    An event built for v1-v3 has no ``breaches`` field: it cannot say what it
    broke, so it is never published as if valid; it goes to ``on_breach``
    (the CLI and the simulator send it to the dead-letter topic), as before.
    Without ``on_breach`` such an event is dropped, logged and counted.
    """

    def __init__(
        self,
        sink: EventSink,
        on_breach: BreachHandler | None = None,
        *,
        registry: CollectorRegistry | None = None,
        on_recorded: BreachHandler | None = None,
        max_packs: int = DEFAULT_LABEL_LIMIT,
    ) -> None:
        self._sink = sink
        self._on_breach = on_breach
        self._on_recorded = on_recorded
        self._metrics = BreachMetrics(registry, max_packs=max_packs)
        self.emitted = 0
        self.breached = 0  # breaching turns, published (v4) or dead-lettered (v1-v3)
        self.dead_lettered = 0  # breaching turns that could not carry their breaches

    def emit(self, event: OutgoingTurnEvent | None) -> str | None:
        if event is None:  # the correct() fallback: nothing happened, nothing to record
            return None
        breaches = check_event(event)
        if not breaches:
            self.emitted += 1
            return self._sink.publish(event)
        self.breached += 1
        recorded = "breaches" in event
        log.error(
            "turn_event_contract_breach",
            session_id=event["session_id"],
            turn=event["turn"],
            pack_id=event["pack_id"],
            breaches=[str(b) for b in breaches],
            recorded=recorded,
        )
        self._metrics.count(event["pack_id"], [b.contract for b in breaches])
        if not recorded:  # v1-v3: no field to carry them; the dead-letter topic, as before
            self.dead_lettered += 1
            if self._on_breach is not None:
                self._on_breach(event, breaches)
            return None
        marked = cast("OutgoingTurnEvent", dict(event))
        marked["breaches"] = list(dict.fromkeys(b.contract.value for b in breaches))
        if self._on_recorded is not None:
            self._on_recorded(marked, breaches)
        self.emitted += 1
        return self._sink.publish(marked)
