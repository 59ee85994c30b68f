"""The log sink: one canonical structlog JSON line per turn (ADR-0039 open question 1).

Each line names the turn (event id, session, turn, sequence, path, pack,
domain, schema version), its verdict bundle (refusal, hedge, violated
boundary and predicate ids, safety and ethics verdicts, identity), the
verdict split (execution vs action risk, tier, output policy) and where it was
read (topic, partition, offset, bound as structlog context per message).

Surface texts and input tokens may hold user content: by default they are not
written; ``TURNAUDIT_LOG_SURFACES`` chooses ``drop``, ``hash`` (HMAC-SHA256
with ``TURNAUDIT_LOG_HASH_KEY``, so equal texts stay comparable) or ``full``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import logging.handlers
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TextIO

import structlog
from prometheus_client import CollectorRegistry, Counter

from turnaudit.consumers.runtime import ConsumedTurn, ConsumerService
from turnaudit.consumers.settings import LogSinkSettings, ServiceSettings, SurfaceRedaction
from turnaudit.contracts import SequenceOutcome

TURN_LOGGER = "turnaudit.turns"
TURN_EVENT = "turn"
SURFACE_FIELDS = ("surface", "walk_surface", "articulation_surface")

Redactor = Callable[[str], str]


def surface_redactor(settings: LogSinkSettings) -> Redactor | None:
    """How a surface text is written; None: it is not written at all."""
    if settings.redaction is SurfaceRedaction.DROP:
        return None
    if settings.redaction is SurfaceRedaction.FULL:
        return str
    key = settings.hash_key
    return lambda text: "hmac-sha256:" + hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def turn_fields(turn: ConsumedTurn, redact: Redactor | None) -> dict[str, Any]:
    """The canonical line's fields (topic, partition, offset come from the context)."""
    event = turn.event
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
        "redelivered": turn.sequence.outcome is SequenceOutcome.DUPLICATE,
    }
    if redact is not None:
        suffix = "" if redact is str else "_hmac"
        for name in SURFACE_FIELDS:
            fields[name + suffix] = redact(event[name])
        # Tokens joined with a separator no token contains, so the hash is of one text.
        fields["input_tokens" + suffix] = redact("\x1f".join(event["input_tokens"]))
    return fields


def _iso(millis: Any) -> str:
    # fastavro gives timestamp-millis as an aware datetime; raw ints come from tests.
    moment = millis if isinstance(millis, datetime) else datetime.fromtimestamp(millis / 1000, UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TurnLineWriter:
    """The structlog logger the turn lines end in: stdout, or size-rotated files.

    Rotation is ``RotatingFileHandler``'s, but lines are written to its stream
    directly and flushed once per batch: the per-record overhead of stdlib
    logging would cost more than decoding the message.
    """

    name = TURN_LOGGER  # for structlog's add_logger_name

    def __init__(self, settings: LogSinkSettings) -> None:
        self._rotating: logging.handlers.RotatingFileHandler | None = None
        self._stream: TextIO = sys.stdout
        self._size = 0  # bytes in the current file (rotation without a stat per line)
        if settings.file is not None:
            settings.file.parent.mkdir(parents=True, exist_ok=True)
            self._rotating = logging.handlers.RotatingFileHandler(
                settings.file,
                maxBytes=settings.file_max_bytes,
                backupCount=settings.file_backups,
                encoding="utf-8",
            )
            self._stream = self._rotating.stream  # type: ignore[assignment]  # open after init
            self._size = self._stream.seek(0, 2)

    def msg(self, line: str) -> None:
        if self._rotating is not None:
            size = len(line.encode()) + 1
            if self._size and self._size + size > self._rotating.maxBytes:
                self._rotating.doRollover()
                self._stream = self._rotating.stream  # type: ignore[assignment]  # reopened
                self._size = 0
            self._size += size
        self._stream.write(line + "\n")

    info = warning = error = critical = debug = msg

    def flush(self) -> None:
        self._stream.flush()

    def close(self) -> None:
        self.flush()
        if self._rotating is not None:
            self._rotating.close()


class LogSink:
    """Writes one JSON line per turn; ``write`` returns once the lines are flushed."""

    def __init__(self, settings: LogSinkSettings, registry: CollectorRegistry) -> None:
        self._writer = TurnLineWriter(settings)
        # Processors and wrapper come from structlog's configuration (see
        # ``service_logging``), so ``capture_logs`` sees the lines too; bound
        # once, so the configuration is resolved now, not per line.
        self._log = structlog.wrap_logger(self._writer).bind()
        self._redact = surface_redactor(settings)
        self.lines = Counter(
            "turnaudit_log_lines",
            "Canonical turn lines written by the log sink.",
            registry=registry,
        )

    def write(self, turns: Sequence[ConsumedTurn]) -> None:
        try:
            for turn in turns:
                structlog.contextvars.bind_contextvars(
                    topic=turn.topic, partition=turn.partition, offset=turn.offset
                )
                self._log.info(TURN_EVENT, **turn_fields(turn, self._redact))
        finally:
            structlog.contextvars.unbind_contextvars("topic", "partition", "offset")
        self._writer.flush()  # the runtime stores offsets once this returns
        self.lines.inc(len(turns))

    def close(self) -> None:
        self._writer.close()


class LogSinkService(ConsumerService):
    """The log sink on the turn-events topic."""

    def __init__(self, settings: ServiceSettings, *, registry: CollectorRegistry, **options: Any):
        self.sink = LogSink(settings.log, registry)
        super().__init__(settings, self.sink, registry=registry, **options)


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
            structlog.processors.JSONRenderer(),
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
