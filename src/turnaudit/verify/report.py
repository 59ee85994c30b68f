"""The verify report: what is unexplained, its JSON (``verify --json``) and its summary.

Breaching turns (a contract broken, the turn recorded) have a section of their
own: counted as turns, listed, explained.

Pure: built from a fed ``Verifier``, the range as resolved, the range's dead
letters and the reconciliations; the JSON keys are those verify has always
written, in the same order.
"""

from __future__ import annotations

import json
import secrets
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal, NotRequired, TextIO, TypedDict

from turnaudit.verify.counts import CountsJson
from turnaudit.verify.crash import StreamEnds, StreamEndsJson
from turnaudit.verify.findings import (
    EXAMPLES,
    Finding,
    FindingJson,
    HeadJson,
    RetainedJson,
    Where,
)
from turnaudit.verify.reconciliation import (
    LogJson,
    LogReconciliation,
    MetricsJson,
    MetricsReconciliation,
)
from turnaudit.verify.trust import TrustJson, TrustReport
from turnaudit.verify.verifier import Verifier

# ``write_json``: how deep the heads are in the text (document, streams, list).
_HEAD_INDENT = " " * 6

AT_LEAST_ONCE_BOUND = (
    "at-least-once: every turn on the stream must be logged and counted; a log line or a "
    "stream copy repeated for the same event id is a redelivery (reported, never a second "
    "turn); counters must equal the stream's counts exactly (services count by event id)"
)

# The range as resolved: ``partitions`` maps a partition to [start, end).
RangeJson = TypedDict(
    "RangeJson",
    {
        "topic": str,
        "description": str,
        "partitions": dict[str, list[int]],
        "from": str | None,
        "to": str | None,
        "from_log_start": bool,
    },
)


class DeadLettersJson(TypedDict):
    count: int
    by_reason: dict[str, int]
    by_stage: dict[str, int]


@dataclass(frozen=True)
class DeadLetters:
    """The dead letters of a range: consumer-side ones at their origin ``positions``
    (partition, offset), producer-side ones counted by time."""

    count: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)
    by_stage: dict[str, int] = field(default_factory=dict)
    positions: frozenset[tuple[int, int]] = frozenset()

    def as_json(self) -> DeadLettersJson:
        return DeadLettersJson(count=self.count, by_reason=self.by_reason, by_stage=self.by_stage)


class StreamsJson(TypedDict):
    total: int
    chained: int
    legacy_v1_v2: int
    anchors_checked: int
    heads: list[HeadJson]


class DuplicatesJson(TypedDict):
    count: int
    examples: list[FindingJson]


class BreachingJson(TypedDict):
    """Turns that broke a contract: counted as the turns they are, and listed (explained)."""

    count: int
    by_contract: dict[str, int]
    by_pack: dict[str, int]
    turns: list[FindingJson]


class ReplayJson(TypedDict):
    label: str
    event_time: bool


class RetentionJson(TypedDict):
    """Where the range began at a log start retention had moved: the log starts, the
    streams whose first retained turn follows it (never lost), the anchored streams
    retention took whole."""

    log_start: dict[str, int]
    began_before_retention: int
    examples: list[RetainedJson]
    anchors_expired: int


class ReportJson(TypedDict):
    verdict: Literal["ok", "unexplained"]
    range: RangeJson
    messages: int
    counts: CountsJson
    streams: StreamsJson
    lost: int
    uncounted: int
    not_logged: int
    redeliveries: int
    duplicates: DuplicatesJson
    breaching_turns: BreachingJson
    undecodable: int
    dead_letters: DeadLettersJson
    log_sink: LogJson | None
    metrics: list[MetricsJson]
    at_least_once_bound: str
    unexplained_by_kind: dict[str, int]
    unexplained: list[FindingJson]
    # Added by a replay into ``verify:``: which replay wrote the report.
    replay: NotRequired[ReplayJson]
    # Only where a partition was read from a log start past 0.
    retention: NotRequired[RetentionJson]
    # Only with ``--time event``: the window by occurred_at, and the turns read outside it.
    event_time: NotRequired[EventTimeJson]
    # Where announced streams ended: cleanly, or cut by a crash, and the turns lost.
    stream_ends: NotRequired[StreamEndsJson]
    # Only with ``--keyring``: each chained stream's trust against the signed checkpoints.
    trust: NotRequired[TrustJson]


class EventTimeJson(TypedDict):
    window_ms: list[int]
    outside_window: int


@dataclass
class VerifyReport:
    range: RangeJson
    verifier: Verifier
    dead_letters: DeadLetters = field(default_factory=DeadLetters)
    log: LogReconciliation | None = None
    metrics: list[MetricsReconciliation] = field(default_factory=list)
    stream_ends: StreamEnds | None = None
    trust: TrustReport | None = None

    def unexplained(self) -> list[Finding]:
        v = self.verifier
        dead_lettered = self.dead_letters.positions
        found = list(v.findings) + v.lost() + v.anchor_findings()
        found += [f for f in v.undecodable if f.place not in dead_lettered]
        if self.stream_ends is not None:
            found += self.stream_ends.findings()
        if self.trust is not None:
            found += self.trust.findings()
        if self.log is not None and not self.log.agrees:
            found.append(
                Finding(
                    "not_logged",
                    f"{self.log.not_logged_count} turn(s) of the range are not in {self.log.path}",
                    {},
                )
            )
        for m in self.metrics:
            found += [
                Finding(
                    "uncounted", f"{m.url}: {gap.text()}", Where(pack=gap.pack, counter=gap.counter)
                )
                for gap in m.disagreements()
            ]
        return found

    @property
    def ok(self) -> bool:
        return not self.unexplained()

    def as_json(self, *, heads: bool = True) -> ReportJson:
        """The report as JSON; without ``heads`` the list of every chained stream's head is
        left empty (the terminal text does not show it: a million streams' heads are not
        built for it)."""
        v = self.verifier
        unexplained = self.unexplained()
        kinds = Counter(f.kind for f in unexplained)
        chained, legacy = v.stream_counts()
        document = ReportJson(
            verdict="ok" if not unexplained else "unexplained",
            range=self.range,
            messages=v.messages,
            counts=v.counts.as_json(),
            streams=StreamsJson(
                total=chained + legacy,
                chained=chained,
                legacy_v1_v2=legacy,
                anchors_checked=len(v.retained.anchors),
                heads=v.heads() if heads else [],
            ),
            lost=v.lost_positions(),
            uncounted=max([0] + [m.expected["turns"] - m.counted["turns"] for m in self.metrics]),
            not_logged=0 if self.log is None else self.log.not_logged_count,
            redeliveries=v.redeliveries,
            duplicates=DuplicatesJson(
                count=len(v.duplicates), examples=[d.as_json() for d in v.duplicates[:EXAMPLES]]
            ),
            breaching_turns=BreachingJson(
                count=len(v.breaching),
                by_contract=dict(sorted(v.breaches_by_contract.items())),
                by_pack=dict(sorted(v.breaching_by_pack.items())),
                turns=[b.as_json() for b in v.breaching[: EXAMPLES * 5]],
            ),
            undecodable=len(v.undecodable),
            dead_letters=self.dead_letters.as_json(),
            log_sink=None if self.log is None else self.log.as_json(),
            metrics=[m.as_json() for m in self.metrics],
            at_least_once_bound=AT_LEAST_ONCE_BOUND,
            unexplained_by_kind=dict(sorted(kinds.items())),
            unexplained=[f.as_json() for f in unexplained[: EXAMPLES * 5]],
        )
        if v.event_window is not None:
            document["event_time"] = EventTimeJson(
                window_ms=list(v.event_window), outside_window=v.outside_window
            )
        if self.stream_ends is not None:
            document["stream_ends"] = self.stream_ends.as_json()
        if self.trust is not None:
            document["trust"] = self.trust.as_json()
        if v.retained_from:
            document["retention"] = RetentionJson(
                log_start={str(p): v.log_start[p] for p in sorted(v.retained_from)},
                began_before_retention=v.retained.began_before_retention,
                examples=list(v.retained.examples),
                anchors_expired=v.anchors_expired(),
            )
        return document

    def write_json(self, out: TextIO) -> None:
        """``as_json()`` as ``json.dump(..., indent=2)`` writes it, byte for byte, with
        the heads list written one head at a time as the tracker hands them over (a
        million streams' heads are never held as one list of dicts and one text)."""
        document = self.as_json(heads=False)
        # A mark no event's text can hold (new random digits each time): where the heads go.
        mark = f"\x00heads-{secrets.token_hex(16)}\x00"
        document["streams"]["heads"] = mark  # type: ignore[typeddict-item]  # replaced below
        before, after = json.dumps(document, indent=2, sort_keys=False).split(json.dumps(mark), 1)
        out.write(before)
        first = True
        for session, producer, position, digest in self.verifier.chained_heads():
            head = HeadJson(
                session_id=session, producer_id=producer, position=position, hash=digest
            )
            text = json.dumps(head, indent=2).replace("\n", "\n" + _HEAD_INDENT)
            out.write(("[\n" if first else ",\n") + _HEAD_INDENT + text)
            first = False
        out.write("[]" if first else "\n" + _HEAD_INDENT[:-2] + "]")
        out.write(after)

    def human(self) -> str:
        j = self.as_json(heads=False)
        c = j["counts"]
        r = j["range"]
        lines = [
            f"turnaudit verify: {r['topic']} {r['description']}",
            f"  messages read {j['messages']}; turns {c['turns']} (main {c['main']}, stub "
            f"{c['stub']}), refused {c['refused']}, hedged {c['hedged']}",
            "  schema versions: "
            + ", ".join(f"v{k} {n}" for k, n in c["by_schema_version"].items())
            or "  (no turns)",
            "  action risk by output policy: "
            + (", ".join(f"{k} {n}" for k, n in c["action_risk_by_policy"].items()) or "none"),
            "  per pack: "
            + "; ".join(
                f"{p} {d['turns']} turns/{d['refused']} refused/{d['hedged']} hedged/"
                f"{d['stub']} stub"
                for p, d in c["per_pack"].items()
            ),
            f"  ordered streams {j['streams']['total']} ({j['streams']['chained']} chained, "
            f"{j['streams']['legacy_v1_v2']} v1/v2 without a chain)",
            f"  lost {j['lost']}, uncounted {j['uncounted']}, not logged {j['not_logged']}; "
            f"redeliveries {j['redeliveries']}, duplicate copies {j['duplicates']['count']}, "
            f"undecodable {j['undecodable']}",
            f"  dead letters in the range: {j['dead_letters']['count']} "
            + str(j["dead_letters"]["by_reason"]),
        ]
        breaching = j["breaching_turns"]
        if breaching["count"]:
            lines.append(
                f"  breaching turns {breaching['count']} (counted as turns, explained): "
                + ", ".join(f"{k} {n}" for k, n in breaching["by_contract"].items())
                + "; per pack "
                + ", ".join(f"{k} {n}" for k, n in breaching["by_pack"].items())
            )
            for f in self.verifier.breaching[:EXAMPLES]:
                at = ", ".join(f"{k} {v}" for k, v in f.where.items() if k != "positions")
                lines.append(f"  BREACHING {f.detail} [{at}]")
            if breaching["count"] > EXAMPLES:
                lines.append(f"  … {breaching['count'] - EXAMPLES} more breaching turns (--json)")
        event_time = j.get("event_time")
        if event_time is not None:
            lines.append(
                f"  by event time: {event_time['outside_window']} turn(s) read from the "
                "broker range happened outside the window (left out)"
            )
        ends = j.get("stream_ends")
        if ends is not None:
            lines.append(
                f"  stream ends announced {ends['announced']}: {ends['ended_cleanly']} ended "
                f"cleanly, {ends['cut']} cut by a crash, lost in crash {ends['lost_in_crash']} "
                f"(exact up to the last head write: head interval {ends['head_interval_ms']} ms); "
                f"{ends['open']} open, {len(ends['vanished'])} producer(s) vanished, "
                f"lost with them {ends['lost_vanished']}"
            )
        if self.trust is not None:
            lines.append(self.trust.human())
        retention = j.get("retention")
        if retention is not None:
            lines.append(
                "  retention: read from a moved log start ("
                + ", ".join(f"p{p} {o}" for p, o in retention["log_start"].items())
                + f"); {retention['began_before_retention']} stream(s) began before "
                f"retention (not lost), {retention['anchors_expired']} anchored stream(s) "
                "expired"
            )
        if self.log is not None:
            lines.append(
                f"  log sink {self.log.path}: {self.log.lines} lines, {self.log.distinct} turns, "
                f"{self.log.repeated_lines} repeated (redeliveries), "
                f"{self.log.not_logged_count} not logged: "
                + ("agrees" if self.log.agrees else "DISAGREES")
            )
        for m in self.metrics:
            lines.append(
                f"  counters {m.url}: {m.counted} vs stream {m.expected}: "
                + ("agree" if m.agrees else "DISAGREE")
            )
        lines.append(f"  bound: {AT_LEAST_ONCE_BOUND}")
        unexplained = self.unexplained()
        for f in unexplained[:EXAMPLES]:
            at = ", ".join(f"{k} {v}" for k, v in f.where.items() if k != "positions")
            lines.append(f"  UNEXPLAINED {f.kind}: {f.detail}" + (f" [{at}]" if at else ""))
        if len(unexplained) > EXAMPLES:
            lines.append(f"  … {len(unexplained) - EXAMPLES} more unexplained findings (--json)")
        lines.append(
            "verify: every turn accounted for"
            if not unexplained
            else f"verify: {len(unexplained)} unexplained finding(s): "
            + ", ".join(f"{k} {n}" for k, n in j["unexplained_by_kind"].items())
        )
        return "\n".join(lines)
