"""``turnaudit tail``: a live, one-line-per-turn view of the stream (ADR-0039 open question 2).

A viewer, not a service: it assigns every partition itself (no group, nothing
committed, no dead letters written) from now or from a given time, and prints
each turn as one human-readable line, filtered by pack or session. A message
it cannot decode still gets a line, so nothing on the topic is invisible.

Under a surface policy that writes surfaces (``hash``, ``keep``) the line ends with the
turn's answer and input as that policy writes them; a sealed turn is opened first with
the reader's keyring (``TurnOpener``, as the log sink and replay do), and one that does
not open (no keyring, erased, tampered) shows its placeholder, ``[sealed: <reason>]``,
which holds no one's words. Under ``drop`` (the default) nothing of a surface is shown
and nothing is opened.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, TextIO, cast

from turnaudit.contracts import check_event
from turnaudit.errors import SerializationError
from turnaudit.events import TurnEvent, occurred_moment
from turnaudit.kafka.consumer import READER, KafkaConsumer
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import (
    EventWindow,
    RangeSpec,
    event_time_range,
    offsets_at,
    resolve_range,
)
from turnaudit.records import Record
from turnaudit.redaction import DROPPED, Redaction
from turnaudit.sealing.envelope import Sealed, SealState, placeholder
from turnaudit.sealing.opening import TurnOpener
from turnaudit.serialization.wire import DecodedTurnEvent, TurnEventDeserializer
from turnaudit.settings import KafkaSettings


@dataclass(frozen=True, slots=True)
class TailFilter:
    pack: str | None = None
    session: str | None = None
    window: EventWindow | None = None  # --time event: only turns that happened in it

    def accepts(self, event: TurnEvent) -> bool:
        return (
            (self.pack is None or event["pack_id"] == self.pack)
            and (self.session is None or event["session_id"] == self.session)
            and (self.window is None or self.window.holds(event["occurred_at"]))
        )


def _when(occurred: Any) -> str:
    return occurred_moment(occurred).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _verdict_text(event: TurnEvent) -> str:
    bundle = event["verdicts"]
    safety, ethics, identity = (
        bundle["safety_verdict"],
        bundle["ethics_verdict"],
        bundle["identity_score"],
    )
    if bundle["refusal_emitted"]:
        remedy = "REFUSED"
    elif bundle["hedge_injected"]:
        remedy = "HEDGED"
    else:
        remedy = "plain"
    parts = [remedy]
    parts.append("safety=" + ("-" if safety is None else "pass" if safety["passed"] else "FAIL"))
    if safety is not None and safety["violated_boundary_ids"]:
        parts.append("boundaries=" + ",".join(safety["violated_boundary_ids"]))
    parts.append("ethics=" + ("-" if ethics is None else "pass" if ethics["passed"] else "FAIL"))
    if ethics is not None and ethics["violated_predicate_ids"]:
        parts.append("predicates=" + ",".join(ethics["violated_predicate_ids"]))
    parts.append("identity=" + ("-" if identity is None else f"{identity['score']:.2f}"))
    action = event["action_assessment"]
    if action is not None:
        human = ", human decision" if action["human_decision_required"] else ""
        parts.append(
            f"action {action['output_policy']} (risk {action['action_risk_verdict']}, "
            f"tier {action['risk_tier']}, execution {action['execution_verdict']}{human})"
        )
    breaches = check_event(event)
    if breaches:
        parts.append("BREACH " + "; ".join(map(str, breaches)))
    return " ".join(parts)


def _quoted(text: str | None) -> str:
    """A JSON string (``null`` for None): one line whatever the text holds (control
    characters, U+2028 and U+0085 escaped; other characters as they are)."""
    quoted = json.dumps(text, ensure_ascii=False)
    return (
        quoted.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("\x85", "\\u0085")
    )


def _surface_text(event: TurnEvent, surfaces: Redaction, sealing: SealState | None) -> str:
    """The answer and the input as ``surfaces`` writes them (JSON strings: one line
    whatever they hold); a turn left sealed shows its placeholder, as it is."""
    if isinstance(sealing, Sealed):
        # Every token holds the same placeholder: shown once. The answer is the
        # placeholder too (or the runtime's stub text, left in the clear).
        said = placeholder(sealing.reason) if event["input_tokens"] else ""
        return f"said={_quoted(said)} answer={_quoted(event['surface'])}"
    tokens = surfaces.tokens(event["input_tokens"])
    said = " ".join(tokens) if isinstance(tokens, list) else str(tokens)
    return f"said={_quoted(said)} answer={_quoted(surfaces.text(event['surface']))}"


def format_turn(
    decoded: DecodedTurnEvent,
    partition: int,
    offset: int,
    *,
    show_verdicts: bool,
    surfaces: Redaction = DROPPED,
    sealing: SealState | None = None,
) -> str:
    """One line: when, which turn, where it ran, (optionally) its verdict bundle, and
    its surfaces when the policy writes them (``sealing``: how the turn was opened)."""
    event = cast(TurnEvent, decoded.event)  # a TurnEvent reader decoded it
    head = (
        f"{_when(event['occurred_at'])} {event['session_id']}#{event['turn']} "
        f"seq={event['sequence']} {event['path']} {event['pack_id']}/{event['domain']} "
        f"v{decoded.writer_version}"
    )
    if show_verdicts:
        head = f"{head} | {_verdict_text(event)}"
    if surfaces.writes:
        head = f"{head} | {_surface_text(event, surfaces, sealing)}"
    return f"{head} [p{partition}@{offset}]"


def tail_turns(
    settings: KafkaSettings,
    out: TextIO,
    *,
    since: datetime | None = None,
    event_time: bool = False,
    slack: timedelta | None = None,
    filters: TailFilter = TailFilter(),
    show_verdicts: bool = True,
    surfaces: Redaction = DROPPED,
    opener: TurnOpener | None = None,
    limit: int | None = None,
    stop: threading.Event | None = None,
    on_ready: Callable[[], None] | None = None,
) -> int:
    """Print turns until ``stop`` is set or ``limit`` lines were printed; return the count.

    ``event_time``: ``since`` selects by the turns' ``occurred_at`` (``event_time_range``,
    as ``replay --time event``), not by the records' Kafka timestamps. ``surfaces``: what
    a line shows of a turn's surfaces; ``opener`` opens sealed ones first (None: left
    sealed, their placeholders shown)."""
    topic = settings.topics.turn_events
    decode = decoder_for(settings)  # both framings, every known version
    # Resolved before the caller hears "ready": from now, the end as it is now
    # (a logical end would be resolved at the first fetch and skip whatever
    # arrived in between); from a time, the first offset at or after it.
    if event_time:
        # The turns that happened from ``since`` on: read from ``since - slack`` by broker
        # time (the whole retained stream without a slack), keep those in the window.
        spec, window = event_time_range(RangeSpec(since), slack, open_end=True)
        filters = replace(filters, window=window)
        start = resolve_range(settings, topic, spec).start
    else:
        start = offsets_at(settings, topic, since)
    view = TurnView(filters, show_verdicts, surfaces, opener)  # with the window, if any
    consumer = KafkaConsumer(
        settings,
        topic,
        READER,  # a viewer: joins no group, commits nothing
        {"fetch.wait.max.ms": 100},
        on_error=lambda error: print(f"! consumer error: {error.text}", file=out),
    )
    stop = stop or threading.Event()
    printed = 0
    try:
        consumer.assign(dict(sorted(start.items())))
        if on_ready is not None:
            on_ready()
        while not stop.is_set() and (limit is None or printed < limit):
            for msg in consumer.consume(500, 0.2):
                line = view.line_for(msg, decode)
                if line is None:
                    continue
                out.write(line + "\n")
                printed += 1
                if limit is not None and printed >= limit:
                    break
            out.flush()
    finally:
        consumer.close()
    return printed


@dataclass(frozen=True, slots=True)
class TurnView:
    """What a tail line shows of a turn: which turns, the verdicts, the surfaces."""

    filters: TailFilter = TailFilter()
    show_verdicts: bool = True
    surfaces: Redaction = DROPPED
    opener: TurnOpener | None = None  # sealed turns: opened before ``surfaces`` applies

    def line_for(self, msg: Record, decode: TurnEventDeserializer) -> str | None:
        """The message's line (None: filtered out); never raises for what it holds."""
        try:
            decoded = decode(msg.value())
        except SerializationError as exc:
            # Filters cannot apply to what does not decode: show it, or it would be invisible.
            return f"! undecodable message [p{msg.partition()}@{msg.offset()}]: {exc}"
        try:
            event = cast(TurnEvent, decoded.event)
            if not self.filters.accepts(event):
                return None
            sealing = None
            if self.surfaces.writes:
                try:
                    sealing = (self.opener or _NO_KEYRING)(event)
                except Exception as exc:  # the key topic unreadable now: the turn, unopened
                    line = format_turn(
                        decoded,
                        msg.partition() or 0,
                        msg.offset() or 0,
                        show_verdicts=self.show_verdicts,
                    )
                    return f"{line} (surfaces not opened: {exc})"
            return format_turn(
                decoded,
                msg.partition() or 0,
                msg.offset() or 0,
                show_verdicts=self.show_verdicts,
                surfaces=self.surfaces,
                sealing=sealing,
            )
        except Exception as exc:  # decodes, but not shaped like a TurnEvent: still a line
            return f"! not a TurnEvent [p{msg.partition()}@{msg.offset()}]: {exc!r}"


_NO_KEYRING = TurnOpener(None)  # placeholders, no key read
