"""The log sink: one canonical structlog JSON line per turn (ADR-0039 open question 1).

Each line names the turn (event id, session, turn, sequence, path, pack,
domain, schema version), its verdict bundle (refusal, hedge, violated
boundary and predicate ids, safety and ethics verdicts, identity), the
verdict split (execution vs action risk, tier, output policy) and where it was
read (topic, partition, offset), then structlog's ``event``, ``logger``,
``level`` and ``timestamp`` and any structlog context-local values.

Under ``service_logging`` the sink builds each line's dict itself, with the
keys and values that configuration's processor chain gives, renders it with
orjson, and writes a batch's lines in one call: structlog's per-call chain
cost more than the JSON encoding. There, with surfaces not written and no context-local
values, an ordinary turn's line is rendered natively by the service's batch step
(``step_runner``; ``LINE_KEYS`` in order, the same bytes), stamped once per call of the
step rather than per line. Under any other structlog configuration (``capture_logs``,
say) the lines go through the configured chain, one call per turn.

Surface texts and input tokens may hold user content: by default they are not
written; ``TURNAUDIT_LOG_SURFACES`` chooses ``drop``, ``hash`` (HMAC-SHA256
with ``TURNAUDIT_LOG_HASH_KEY``, so equal texts stay comparable) or ``keep``,
the one policy of every writer (``turnaudit.redaction``). Log files, rotated
ones too, are their owner's only (``turnaudit.files``). Sealed surfaces
(docs/privacy.md) are opened first, with the keyring ``TURNAUDIT_SURFACE_KEYRING``
names, when the policy writes surfaces at all; without it a line holds the
``[sealed: <reason>]`` placeholder, hashed or kept like any text.
"""

from __future__ import annotations

import functools
import logging
import logging.handlers
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import structlog
from prometheus_client import CollectorRegistry, Counter

from turnaudit._native import ConsumeStep
from turnaudit.consumers.runtime import ConsumedTurn, ConsumerService, Sink
from turnaudit.consumers.runtime.line_files import TURN_LOGGER, TurnLineWriter
from turnaudit.consumers.runtime.settings import LogSinkSettings, ServiceSettings
from turnaudit.consumers.runtime.sink import StepOutlet, StepRun, StepStop
from turnaudit.events import EPOCH, occurred_millis, occurred_moment
from turnaudit.redaction import SURFACE_FIELDS, TOKEN_SEPARATOR, Redaction, SurfacePolicy
from turnaudit.sealing.opening import TurnOpener, turn_opener
from turnaudit.telemetry import LOG_LINES_TOTAL, TURN_LOG_EVENT

Redactor = Callable[[str], str]

# service_logging's renderer: the sink recognises its own configuration by it.
_RENDERER = structlog.processors.JSONRenderer()
# The only datetime in a line is its timestamp (occurred_at is text already).
_ORJSON_OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_APPEND_NEWLINE

# The canonical line's keys in order under ``service_logging`` without surfaces:
# ``turn_fields(..., where=True)``'s, then ``render_line``'s own. The native step renders
# lines in this order (``LogSink.step_outlet``); a test holds ``render_line`` to it.
LINE_KEYS = (
    "event_id",
    "session_id",
    "turn",
    "sequence",
    "occurred_at",
    "path",
    "pack_id",
    "domain",
    "schema_version",
    "task_id",
    "refusal_emitted",
    "hedge_injected",
    "violated_boundary_ids",
    "violated_predicate_ids",
    "safety_passed",
    "ethics_passed",
    "identity_score",
    "flagged",
    "execution_verdict",
    "action_risk_verdict",
    "risk_tier",
    "output_policy",
    "human_decision_required",
    "redelivered",
    "breaches",
    "topic",
    "partition",
    "offset",
    "event",
    "logger",
    "level",
    "timestamp",
)
LINE_LEVEL = "info"

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The lines' clock: TimeStamper(fmt="iso", utc=True)'s moment."""
    return datetime.now(UTC)


def surface_redactor(settings: LogSinkSettings) -> Redactor | None:
    """How a surface text is written; None: it is not written at all."""
    surfaces = settings.surfaces
    if not surfaces.writes:
        return None
    if surfaces.policy is SurfacePolicy.KEEP:
        return str
    return functools.partial(_hashed, surfaces)


def _hashed(surfaces: Redaction, text: str) -> str:
    return str(surfaces.text(text))  # hash: always a text


def turn_fields(
    turn: ConsumedTurn, redact: Redactor | None, *, where: bool = False
) -> dict[str, Any]:
    """The canonical line's own fields; ``where``: then where it was read and ``event``."""
    event = turn.decoded.event
    bundle = event["verdicts"]
    safety = bundle["safety_verdict"]
    ethics = bundle["ethics_verdict"]
    identity = bundle["identity_score"]
    action = event["action_assessment"]
    task = event["task"]
    fields: dict[str, Any] = {
        "event_id": event["event_id"],
        "session_id": event["session_id"],
        "turn": event["turn"],
        "sequence": event["sequence"],
        "occurred_at": _iso(event["occurred_at"]),
        "path": event["path"],
        "pack_id": event["pack_id"],
        "domain": event["domain"],
        "schema_version": turn.decoded.writer_version,
        "task_id": None if task is None else task["task_id"],
        "refusal_emitted": bundle["refusal_emitted"],
        "hedge_injected": bundle["hedge_injected"],
        "violated_boundary_ids": [] if safety is None else safety["violated_boundary_ids"],
        "violated_predicate_ids": [] if ethics is None else ethics["violated_predicate_ids"],
        "safety_passed": None if safety is None else safety["passed"],
        "ethics_passed": None if ethics is None else ethics["passed"],
        "identity_score": None if identity is None else identity["score"],
        "flagged": event["flagged"],
        "execution_verdict": None if action is None else action["execution_verdict"],
        "action_risk_verdict": None if action is None else action["action_risk_verdict"],
        "risk_tier": None if action is None else action["risk_tier"],
        "output_policy": None if action is None else action["output_policy"],
        "human_decision_required": None if action is None else action["human_decision_required"],
        "redelivered": turn.sequence.redelivered,
        # The contracts the turn broke (``contract: detail``), empty for most turns.
        "breaches": list(turn.breaches),
    }
    if redact is not None:
        suffix = "" if redact is str else "_hmac"
        surfaces = (event["surface"], event["walk_surface"], event["articulation_surface"])
        for name, text in zip(SURFACE_FIELDS, surfaces, strict=True):
            fields[name + suffix] = redact(text)
        # Tokens joined with a separator no token contains, so the hash is of one text.
        fields["input_tokens" + suffix] = redact(TOKEN_SEPARATOR.join(event["input_tokens"]))
    if where:
        fields["topic"] = turn.topic
        fields["partition"] = turn.partition
        fields["offset"] = turn.offset
        fields["event"] = TURN_LOG_EVENT
    return fields


@functools.lru_cache(maxsize=4096)
def _second_text(seconds: int) -> str:
    # Turns of one stream mostly share their second: "2026-11-01T12:00:00" made once.
    return (EPOCH + timedelta(seconds=seconds)).isoformat()[:19]


_MILLIS_TEXT = tuple(f".{n:03d}Z" for n in range(1000))  # formatting it per line costs more


def _iso(occurred: Any) -> str:
    """An occurred_at (epoch ms; a datetime from other decoders) as "…T12:00:00.123Z"."""
    seconds, millis = divmod(occurred if type(occurred) is int else occurred_millis(occurred), 1000)
    return _second_text(seconds) + _MILLIS_TEXT[millis]


class LogSink(Sink):
    """Writes one JSON line per turn; ``flush`` returns once the lines are flushed.

    Each turn is rendered as it is taken: the batch holds bytes, not decoded
    records, until ``flush`` writes them in one call.
    """

    def __init__(
        self,
        settings: LogSinkSettings,
        registry: CollectorRegistry,
        *,
        event_time: bool = False,
        opener: TurnOpener | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self._writer = TurnLineWriter(settings)
        self._clock = clock
        # Sealed surfaces: opened (the key topic read on the first sealed turn, in the
        # worker that meets it) only when surfaces are written at all.
        self._open = opener
        # A replay stamps each line with the turn's own time, not the clock's:
        # the same range then renders the same bytes.
        self._event_time = event_time
        # Resolved against structlog's configuration once per batch (at its
        # first turn), so ``capture_logs`` sees the lines too.
        self._log = structlog.wrap_logger(self._writer)
        self._redact = surface_redactor(settings)
        self.lines = Counter(
            LOG_LINES_TOTAL,
            "Canonical turn lines written by the log sink.",
            registry=registry,
        )
        # What was taken since the last flush: under ``service_logging`` the
        # rendered lines, one after the other in one buffer kept from batch to
        # batch (500 separate line objects held until the write cost more
        # than rendering them: fresh memory for each); else the turns, for
        # the configured chain.
        self._rendered = bytearray()
        self._rendered_lines = 0
        self._chained: list[ConsumedTurn] = []
        self._context: dict[str, Any] | None = None  # set at a batch's first turn

    def take(self, turn: ConsumedTurn) -> None:
        if self._open is not None and self._redact is not None:
            self._open(turn.decoded.event)
        context = self._context
        if context is None:
            processors = structlog.get_config()["processors"]
            if not (processors and processors[-1] is _RENDERER):
                self._chained.append(turn)
                return
            # merge_contextvars, once per batch rather than per line.
            context = self._context = structlog.contextvars.get_contextvars()
        self._rendered += render_line(turn, self._redact, context, self._event_time, self._clock)
        self._rendered_lines += 1

    def step_outlet(self) -> StepOutlet:
        constants = (("event", TURN_LOG_EVENT), ("logger", TURN_LOGGER), ("level", LINE_LEVEL))
        return {"line": (LINE_KEYS, constants)}

    def step_runner(self, step: ConsumeStep) -> StepRun | None:
        """The native step's lines into this batch's buffer, when the batch's lines are
        ``service_logging``'s without surfaces, context-local values or event time (the
        native line holds no more); else None (record by record). Its lines are stamped
        once per call of the step (the clock read then), the Python path's per line."""
        if self._redact is not None or self._event_time or self._chained:
            return None
        processors = structlog.get_config()["processors"]
        if not (processors and processors[-1] is _RENDERER):
            return None
        if structlog.contextvars.get_contextvars():
            return None
        run_lines, rendered, clock = step.run_lines, self._rendered, self._clock

        def run(batch: list[Any], index: int, next_offsets: dict[int, int]) -> StepStop:
            stamp = orjson.dumps(clock(), option=orjson.OPT_UTC_Z)  # as render_line's
            stop = run_lines(batch, index, rendered, stamp, next_offsets)
            self._rendered_lines += stop[5]
            return stop

        return run

    def flush(self) -> None:
        rendered, chained = self._rendered, self._chained
        if rendered:
            self._writer.write_block(rendered)
        if chained:
            log = self._log.bind()
            for turn in chained:
                log.info(
                    TURN_LOG_EVENT,
                    **turn_fields(turn, self._redact),
                    topic=turn.topic,
                    partition=turn.partition,
                    offset=turn.offset,
                )
        self._writer.flush()  # the runtime stores offsets once this returns
        self.lines.inc(self._rendered_lines + len(chained))
        # Written: a failure above leaves them pending, and the retried write writes them.
        rendered.clear()
        self._rendered_lines, self._chained, self._context = 0, [], None

    def close(self) -> None:
        self._writer.close()


def turn_lines(
    turns: Sequence[ConsumedTurn],
    redact: Redactor | None,
    *,
    event_time: bool = False,
    clock: Clock = utc_now,
) -> list[bytes]:
    """The batch's lines as ``service_logging``'s processor chain would render them.

    Same keys in the same order, same values: the fields, where the turn was
    read, ``event``, structlog's context-local values (merged once per batch,
    not per line), logger name, level and timestamp; each line ends in a
    newline. ``event_time``: the timestamp is the turn's ``occurred_at``
    instead of the clock's time.
    """
    context = structlog.contextvars.get_contextvars()
    return [render_line(turn, redact, context, event_time, clock) for turn in turns]


def render_line(
    turn: ConsumedTurn,
    redact: Redactor | None,
    context: dict[str, Any],
    event_time: bool,
    clock: Clock = utc_now,
) -> bytes:
    """One turn's line (see ``turn_lines``), ``context`` the structlog context-local values."""
    line = turn_fields(turn, redact, where=True)
    for key, value in context.items():  # merge_contextvars: the line's own keys win
        line.setdefault(key, value)
    line["logger"] = TURN_LOGGER
    line["level"] = LINE_LEVEL
    # Rendered by orjson as TimeStamper(fmt="iso", utc=True) writes it,
    # "2026-11-01T12:00:00.123456Z", without a Python-side isoformat.
    line["timestamp"] = (
        occurred_moment(turn.decoded.event["occurred_at"]) if event_time else clock()
    )
    rendered = orjson.dumps(line, default=repr, option=_ORJSON_OPTIONS)
    if not rendered.isascii():
        rendered = _escape_line_breaks(rendered)
    return rendered


# Characters outside ASCII that Python's str.splitlines() (and some log
# shippers) take for line ends; orjson writes them as they are, json.dumps
# escaped them with everything else outside ASCII.
_UNICODE_LINE_BREAKS = (
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
    ("\x85".encode(), b"\\u0085"),
)


def _escape_line_breaks(rendered: bytes) -> bytes:
    """The line with its Unicode line separators as JSON escapes: one line stays one line.

    In UTF-8 their byte sequences cannot occur inside another character, and
    outside strings JSON is ASCII, so replacing the bytes is exact.
    """
    for raw, escaped in _UNICODE_LINE_BREAKS:
        rendered = rendered.replace(raw, escaped)
    return rendered


def log_sink_service(
    settings: ServiceSettings, *, registry: CollectorRegistry, **options: Any
) -> ConsumerService:
    """The log sink on the turn-events topic."""
    opener = turn_opener(settings.kafka, settings.log.surfaces)  # a bad keyring: one line
    sink = LogSink(settings.log, registry, opener=opener)
    return ConsumerService(settings, sink, registry=registry, **options)


@contextmanager
def service_logging(diagnostics_level: str = "INFO") -> Iterator[None]:
    """structlog renders JSON lines; diagnostics go to stderr at ``diagnostics_level``.

    Turn lines are INFO and never filtered: they go to the log sink's own
    writer, not through stdlib logging. Restores the previous configuration on
    exit, so a process that runs a service for a while (the demo) gets its
    own logging back.
    """
    previous = structlog.get_config()
    root = logging.getLogger()
    diagnostics = logging.StreamHandler(sys.stderr)
    diagnostics.setFormatter(logging.Formatter("%(message)s"))
    saved_level = root.level
    root.addHandler(diagnostics)
    root.setLevel(logging.getLevelNamesMapping().get(diagnostics_level.upper(), logging.INFO))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.add_logger_name,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _RENDERER,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        cache_logger_on_first_use=False,  # the previous configuration comes back on exit
    )
    try:
        yield
    finally:
        root.removeHandler(diagnostics)
        root.setLevel(saved_level)
        structlog.configure(**previous)
