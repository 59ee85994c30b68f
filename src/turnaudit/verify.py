"""``turnaudit verify``: proves, for a range of the stream, that every turn is there once
and counted (emitted = on the stream = logged = counted).

``Verifier`` is the pure part: fed every message of a range (partition, offset,
key, value), it decodes with the shared reader (every schema version), checks
contracts 1-4 and 6 on each event, and tracks every ordered stream with an
unbounded ``StreamTracker`` (dedupe by event id, gaps, late arrivals, the hash
chain). ``reconcile_log`` and ``reconcile_metrics`` compare a log-sink file
and a ``/metrics`` scrape with the stream's exact counts. ``run_verify``
reads the range from Kafka (no consumer group, nothing committed) and the
dead letters of the same range.

What counts as unexplained (exit 1): a position still missing at the end
(lost), a late arrival (a stream's events stored out of order), a chain break,
an event id with other content, another event at a taken position, a key that
is not the session id, a contract breach, an undecodable message that is not
dead-lettered, a turn the log sink did not write or the counters did not
count. Explained, reported: redeliveries and duplicate copies of the same
event (at-least-once), dead letters with their reasons.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from turnaudit.contracts import Breach, check_event, check_key
from turnaudit.errors import BrokerError, ConfigurationError, SerializationError
from turnaudit.events import occurred_millis
from turnaudit.identity import (
    LEGACY_PRODUCER,
    StreamId,
    StreamTracker,
    TrackResult,
    TurnOutcome,
    chain_hash,
)
from turnaudit.kafka.dead_letters import read_dead_letter_headers
from turnaudit.kafka.reading import read_range
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

AT_LEAST_ONCE_BOUND = (
    "at-least-once: every turn on the stream must be logged and counted; a log line or a "
    "stream copy repeated for the same event id is a redelivery (reported, never a second "
    "turn); counters must equal the stream's counts exactly (services count by event id)"
)
_EXAMPLES = 20  # findings listed per kind in the report (all are counted)


def _stream_json(stream: StreamId) -> dict[str, str]:
    return {"session_id": stream[0], "producer_id": stream[1]}


# One tally key per kind of turn: (pack, stub, refused, hedged, writer version, policy).
_TurnKind = tuple[str, bool, bool, bool, int, str | None]


@dataclass
class TurnCounts:
    """Exact counts of the distinct turns of a range.

    Each turn adds one to the tally of its kind (one dict update); the figures
    are sums over the tally, computed when asked for.
    """

    tally: dict[_TurnKind, int] = field(default_factory=dict)

    def add(self, event: Mapping[str, Any], writer_version: int) -> None:
        bundle = event["verdicts"]
        action = event["action_assessment"]
        kind = (
            event["pack_id"],
            event["path"] == "STUB",
            bool(bundle["refusal_emitted"]),
            bool(bundle["hedge_injected"]),
            writer_version,
            None if action is None else action["output_policy"],
        )
        self.tally[kind] = self.tally.get(kind, 0) + 1

    def _sum(self, position: int) -> int:
        return sum(n for kind, n in self.tally.items() if kind[position])

    @property
    def turns(self) -> int:
        return sum(self.tally.values())

    @property
    def stub(self) -> int:
        return self._sum(1)

    @property
    def main(self) -> int:
        return self.turns - self.stub

    @property
    def refused(self) -> int:
        return self._sum(2)

    @property
    def hedged(self) -> int:
        return self._sum(3)

    def as_json(self) -> dict[str, Any]:
        versions: Counter[int] = Counter()
        policies: Counter[str] = Counter()
        packs: dict[str, Counter[str]] = {}
        for (pack, stub, refused, hedged, version, policy), n in self.tally.items():
            versions[version] += n
            if policy is not None:
                policies[policy] += n
            counts = packs.setdefault(pack, Counter())
            counts["turns"] += n
            counts["refused"] += n * refused
            counts["hedged"] += n * hedged
            counts["stub"] += n * stub
        return {
            "turns": self.turns,
            "main": self.main,
            "stub": self.stub,
            "refused": self.refused,
            "hedged": self.hedged,
            "by_schema_version": {str(k): v for k, v in sorted(versions.items())},
            "action_risk_by_policy": dict(sorted(policies.items())),
            "per_pack": {p: dict(sorted(c.items())) for p, c in sorted(packs.items())},
        }


@dataclass
class _Finding:
    kind: str
    detail: str
    where: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "detail": self.detail, **self.where}


class Verifier:
    """Everything verify concludes from the messages of one range."""

    def __init__(
        self,
        decode: TurnEventDeserializer,
        *,
        log_start_offsets: Mapping[int, int] | None = None,
        anchors: Mapping[StreamId, tuple[int, str]] | None = None,
        start_gaps: bool = True,
    ) -> None:
        self._decode = decode
        # Stream heads from an earlier report: (position, chain hash) that must still be there.
        self.anchors = dict(anchors or {})
        self._anchored_hash: dict[StreamId, str] = {}
        # Unbounded: verify must be exact (memory grows with the range's event ids).
        self.tracker = StreamTracker(
            max_event_ids=1 << 62, max_streams=1 << 62, max_missing=1 << 62,
            log_start_offsets=log_start_offsets, start_gaps=start_gaps,
        )
        self.counts = TurnCounts()
        self.messages = 0
        self.redeliveries = 0
        self.duplicates: list[_Finding] = []
        self.findings: list[_Finding] = []  # unexplained
        self.undecodable: list[_Finding] = []
        self.event_ids: set[str] = set()
        self.streams: set[StreamId] = set()
        self.first_timestamp: int | None = None
        self.last_timestamp: int | None = None

    def feed(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
    ) -> None:
        self.messages += 1
        if timestamp_ms is not None and timestamp_ms > 0:
            if self.first_timestamp is None or timestamp_ms < self.first_timestamp:
                self.first_timestamp = timestamp_ms
            if self.last_timestamp is None or timestamp_ms > self.last_timestamp:
                self.last_timestamp = timestamp_ms
        try:
            decoded = self._decode(value)
        except SerializationError as exc:
            self.undecodable.append(
                _Finding("undecodable", str(exc), {"partition": partition, "offset": offset})
            )
            return
        event = decoded.event
        try:
            stream: StreamId = (event["session_id"], event.get("producer_id") or LEGACY_PRODUCER)
            result = self.tracker.observe(event, value or b"", partition=partition, offset=offset)
            breaches = check_event(event)
        except (KeyError, TypeError, ValueError) as exc:
            self.undecodable.append(_Finding("undecodable", f"not a TurnEvent: {exc!r}",
                                             {"partition": partition, "offset": offset}))
            return
        self.streams.add(stream)
        key_breach = check_key(key, event)
        ordinary = (result.outcome is TurnOutcome.NEW and result.chain_break is None
                    and key_breach is None and not breaches)
        if not ordinary:
            # Where a finding is: built only for the few messages that have one.
            where = {"partition": partition, "offset": offset, **_stream_json(stream),
                     "position": result.sequence, "event_id": event["event_id"]}
            self._report(result, key_breach, breaches, where)
            if not result.counts_as_turn:
                return
        anchor = self.anchors.get(stream)
        if anchor is not None and anchor[0] == result.sequence:
            self._anchored_hash[stream] = chain_hash(value or b"")
        # A breach is still a turn that happened: counted, and reported above.
        self.event_ids.add(event["event_id"])
        self.counts.add(event, decoded.writer_version)

    def _report(
        self, result: TrackResult, key_breach: Breach | None, breaches: list[Breach],
        where: dict[str, Any],
    ) -> None:
        if key_breach is not None:
            self.findings.append(_Finding("key_mismatch", key_breach.detail, where))
        self._classify(result, where)
        if not result.counts_as_turn:
            return
        for breach in breaches:
            self.findings.append(_Finding(f"contract:{breach.contract.value}", breach.detail,
                                          where))

    def _classify(self, result: TrackResult, where: dict[str, Any]) -> None:
        if result.outcome is TurnOutcome.REDELIVERY:
            self.redeliveries += 1
        elif result.outcome is TurnOutcome.DUPLICATE:
            self.duplicates.append(
                _Finding("duplicate", "the same event stored again (same content)", where)
            )
        elif result.outcome is TurnOutcome.CONTENT_CHANGED:
            self.findings.append(_Finding(
                "content_changed", "an event id seen before comes back with other content", where
            ))
        elif result.outcome is TurnOutcome.POSITION_REUSED:
            self.findings.append(_Finding(
                "position_reused", result.chain_break or "position already taken", where
            ))
        if result.chain_break and result.outcome is not TurnOutcome.POSITION_REUSED:
            self.findings.append(_Finding("chain_break", result.chain_break, where))
        if result.gap_closed:
            self.findings.append(_Finding(
                "late_arrival",
                f"position {result.sequence} stored after later positions of its stream",
                where,
            ))

    def heads(self) -> list[dict[str, Any]]:
        """Each chained stream's last position and its chain hash: keep them, and pass the
        report to a later ``verify --heads`` to detect a truncated or rewritten tail."""
        return [
            {**_stream_json(stream), "position": position, "hash": digest}
            for stream, (position, digest) in sorted(self.tracker.heads().items())
            if stream[1] != LEGACY_PRODUCER
        ]

    def anchor_findings(self) -> list[_Finding]:
        found = []
        heads = self.tracker.heads()
        for stream, (position, digest) in sorted(self.anchors.items()):
            where = {**_stream_json(stream), "position": position}
            if stream not in self.streams:
                found.append(_Finding("anchor_absent", "a stream an earlier report anchored has "
                                      "no event in this range", where))
            elif stream in heads and heads[stream][0] < position:
                found.append(_Finding(
                    "truncated", f"the stream ends at position {heads[stream][0]}, an earlier "
                    f"report saw it reach {position}", where))
            elif stream in self._anchored_hash and self._anchored_hash[stream] != digest:
                found.append(_Finding("rewritten", f"position {position} has another chain hash "
                                      "than an earlier report saw", where))
        return found

    def lost(self) -> list[_Finding]:
        return [
            _Finding(
                "lost",
                f"{len(positions)} position(s) never arrived: {_positions(positions)}",
                {**_stream_json(stream), "positions": positions[:_EXAMPLES]},
            )
            for stream, positions in sorted(self.tracker.missing().items())
        ]


def load_anchors(path: Path) -> dict[StreamId, tuple[int, str]]:
    """The stream heads of an earlier ``verify --json`` report."""
    try:
        heads = json.loads(path.read_text("utf-8"))["streams"]["heads"]
        return {(h["session_id"], h["producer_id"]): (int(h["position"]), str(h["hash"]))
                for h in heads}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(
            f"{path} is not a verify --json report with stream heads: {exc!r}"
        ) from exc


def _positions(positions: list[int]) -> str:
    shown = ", ".join(map(str, positions[:_EXAMPLES]))
    return shown + (f" … ({len(positions)} in all)" if len(positions) > _EXAMPLES else "")


# -- reconciliation with a log sink and with counters -----------------------------------


@dataclass
class LogReconciliation:
    path: str
    lines: int
    distinct: int
    repeated_lines: int  # extra lines for an event id already logged (redeliveries)
    not_logged: list[str]  # turns of the range the sink did not write
    outside_range: int  # logged event ids that are not turns of this range

    @property
    def agrees(self) -> bool:
        return not self.not_logged

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "lines": self.lines, "distinct_event_ids": self.distinct,
            "repeated_lines": self.repeated_lines, "not_logged": len(self.not_logged),
            "not_logged_examples": self.not_logged[:_EXAMPLES],
            "logged_outside_range": self.outside_range, "agrees": self.agrees,
        }


def reconcile_log(path: Path, turns: set[str]) -> LogReconciliation:
    """Compare a log sink's JSON lines (``event: turn``) with the range's turns."""
    counts: Counter[str] = Counter()
    lines = 0
    try:
        with path.open("rb") as handle:
            for raw in handle:
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(line, dict) and line.get("event") == "turn" and "event_id" in line:
                    lines += 1
                    counts[str(line["event_id"])] += 1
    except OSError as exc:
        raise ConfigurationError(f"cannot read the log-sink file {path}: {exc}") from exc
    logged = set(counts)
    return LogReconciliation(
        str(path), lines, len(logged), lines - len(logged),
        sorted(turns - logged), len(logged - turns),
    )


_METRIC_NAMES = {
    "turns": "turnaudit_turns_total",
    "refused": "turnaudit_refused_turns_total",
    "hedged": "turnaudit_hedged_turns_total",
    "stub": "turnaudit_stub_turns_total",
}


@dataclass
class MetricsReconciliation:
    url: str
    counted: dict[str, int]
    expected: dict[str, int]

    @property
    def agrees(self) -> bool:
        return self.counted == self.expected

    def as_json(self) -> dict[str, Any]:
        return {
            "url": self.url, "counted": self.counted, "stream": self.expected,
            "uncounted": {k: self.expected[k] - self.counted.get(k, 0) for k in self.expected},
            "agrees": self.agrees,
        }


def metric_totals(text: str) -> dict[str, int]:
    """The turn counters of a ``/metrics`` page, summed over their labels."""
    totals = dict.fromkeys(_METRIC_NAMES, 0.0)
    wanted = {v: k for k, v in _METRIC_NAMES.items()}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                totals[wanted[sample.name]] += sample.value
    return {k: int(v) for k, v in totals.items()}


def reconcile_metrics(url: str, counts: TurnCounts, text: str | None = None) -> (
    MetricsReconciliation
):
    """Compare a verdict-metrics scrape with the range's counts (the service must
    have read exactly this range since it started)."""
    if text is None:
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"metrics URL {url!r} is not http(s)")
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:  # noqa: S310 - scheme checked above
                text = reply.read().decode()
        except OSError as exc:
            raise ConfigurationError(f"cannot scrape {url}: {exc}") from exc
    expected = {"turns": counts.turns, "refused": counts.refused, "hedged": counts.hedged,
                "stub": counts.stub}
    return MetricsReconciliation(url, metric_totals(text), expected)


# -- the report ---------------------------------------------------------------------------


@dataclass
class VerifyReport:
    range: dict[str, Any]
    verifier: Verifier
    dead_letters: dict[str, Any]
    log: LogReconciliation | None = None
    metrics: list[MetricsReconciliation] = field(default_factory=list)

    def unexplained(self) -> list[_Finding]:
        v = self.verifier
        dead_lettered = set(map(tuple, self.dead_letters.get("positions", [])))
        found = list(v.findings) + v.lost() + v.anchor_findings()
        found += [f for f in v.undecodable
                  if (f.where["partition"], f.where["offset"]) not in dead_lettered]
        if self.log is not None and not self.log.agrees:
            found.append(_Finding("not_logged", f"{len(self.log.not_logged)} turn(s) of the "
                                  f"range are not in {self.log.path}", {}))
        for m in self.metrics:
            if not m.agrees:
                found.append(_Finding("uncounted", f"{m.url} counted {m.counted}, the stream "
                                      f"has {m.expected}", {}))
        return found

    @property
    def ok(self) -> bool:
        return not self.unexplained()

    def as_json(self) -> dict[str, Any]:
        v = self.verifier
        unexplained = self.unexplained()
        kinds = Counter(f.kind for f in unexplained)
        lost = sum(len(p) for p in v.tracker.missing().values())
        return {
            "verdict": "ok" if not unexplained else "unexplained",
            "range": self.range,
            "messages": v.messages,
            "counts": v.counts.as_json(),
            "streams": {
                "total": len(v.streams),
                "chained": sum(1 for s in v.streams if s[1] != LEGACY_PRODUCER),
                "legacy_v1_v2": sum(1 for s in v.streams if s[1] == LEGACY_PRODUCER),
                "anchors_checked": len(v.anchors),
                "heads": v.heads(),
            },
            "lost": lost,
            "uncounted": max(
                [0] + [m.expected["turns"] - m.counted.get("turns", 0) for m in self.metrics]
            ),
            "not_logged": 0 if self.log is None else len(self.log.not_logged),
            "redeliveries": v.redeliveries,
            "duplicates": {"count": len(v.duplicates),
                           "examples": [d.as_json() for d in v.duplicates[:_EXAMPLES]]},
            "undecodable": len(v.undecodable),
            "dead_letters": {k: w for k, w in self.dead_letters.items() if k != "positions"},
            "log_sink": None if self.log is None else self.log.as_json(),
            "metrics": [m.as_json() for m in self.metrics],
            "at_least_once_bound": AT_LEAST_ONCE_BOUND,
            "unexplained_by_kind": dict(sorted(kinds.items())),
            "unexplained": [f.as_json() for f in unexplained[: _EXAMPLES * 5]],
        }

    def human(self) -> str:
        j = self.as_json()
        c = j["counts"]
        r = j["range"]
        lines = [
            f"turnaudit verify: {r['topic']} {r['description']}",
            f"  messages read {j['messages']}; turns {c['turns']} (main {c['main']}, stub "
            f"{c['stub']}), refused {c['refused']}, hedged {c['hedged']}",
            "  schema versions: " + ", ".join(
                f"v{k} {n}" for k, n in c["by_schema_version"].items()) or "  (no turns)",
            "  action risk by output policy: " + (", ".join(
                f"{k} {n}" for k, n in c["action_risk_by_policy"].items()) or "none"),
            "  per pack: " + "; ".join(
                f"{p} {d.get('turns', 0)} turns/{d.get('refused', 0)} refused/"
                f"{d.get('hedged', 0)} hedged/{d.get('stub', 0)} stub"
                for p, d in c["per_pack"].items()),
            f"  ordered streams {j['streams']['total']} ({j['streams']['chained']} chained, "
            f"{j['streams']['legacy_v1_v2']} v1/v2 without a chain)",
            f"  lost {j['lost']}, uncounted {j['uncounted']}, not logged {j['not_logged']}; "
            f"redeliveries {j['redeliveries']}, duplicate copies {j['duplicates']['count']}, "
            f"undecodable {j['undecodable']}",
            f"  dead letters in the range: {j['dead_letters'].get('count', 0)} "
            + str(j["dead_letters"].get("by_reason", {})),
        ]
        if self.log is not None:
            lines.append(
                f"  log sink {self.log.path}: {self.log.lines} lines, {self.log.distinct} turns, "
                f"{self.log.repeated_lines} repeated (redeliveries), "
                f"{len(self.log.not_logged)} not logged: "
                + ("agrees" if self.log.agrees else "DISAGREES"))
        for m in self.metrics:
            lines.append(f"  counters {m.url}: {m.counted} vs stream {m.expected}: "
                         + ("agree" if m.agrees else "DISAGREE"))
        lines.append(f"  bound: {AT_LEAST_ONCE_BOUND}")
        unexplained = self.unexplained()
        for f in unexplained[:_EXAMPLES]:
            at = ", ".join(f"{k} {v}" for k, v in f.where.items() if k != "positions")
            lines.append(f"  UNEXPLAINED {f.kind}: {f.detail}" + (f" [{at}]" if at else ""))
        if len(unexplained) > _EXAMPLES:
            lines.append(f"  … {len(unexplained) - _EXAMPLES} more unexplained findings (--json)")
        lines.append(
            "verify: every turn accounted for" if not unexplained
            else f"verify: {len(unexplained)} unexplained finding(s): "
            + ", ".join(f"{k} {n}" for k, n in j["unexplained_by_kind"].items())
        )
        return "\n".join(lines)


# -- reading the range from Kafka --------------------------------------------------------


@dataclass(frozen=True)
class RangeSpec:
    since: datetime | None = None
    until: datetime | None = None
    from_offsets: Mapping[int, int] | None = None
    to_offsets: Mapping[int, int] | None = None


def resolve_range(
    settings: KafkaSettings, topic: str, spec: RangeSpec, timeout: float = 10.0
) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """(start, end, log start) offsets per partition for the spec."""
    consumer = Consumer(settings.client_config(**{"group.id": f"turnaudit-verify-{uuid.uuid4()}"}))
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            raise BrokerError(f"topic {topic} does not exist")
        partitions = sorted(metadata.topics[topic].partitions)
        low: dict[int, int] = {}
        high: dict[int, int] = {}
        for p in partitions:
            low[p], high[p] = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                             timeout=timeout)
        start = dict(low)
        end = dict(high)
        if spec.since is not None:
            start = _offsets_at(consumer, topic=topic, partitions=partitions,
                                millis=occurred_millis(spec.since), high=high, timeout=timeout)
        if spec.until is not None:
            end = _offsets_at(consumer, topic=topic, partitions=partitions,
                              millis=occurred_millis(spec.until), high=high, timeout=timeout)
        for p, o in (spec.from_offsets or {}).items():
            if p not in low:
                raise ConfigurationError(f"{topic} has no partition {p}")
            start[p] = max(o, low[p])
        for p, o in (spec.to_offsets or {}).items():
            if p not in high:
                raise ConfigurationError(f"{topic} has no partition {p}")
            end[p] = min(o, high[p])
        return start, end, low
    except KafkaException as exc:
        raise BrokerError(f"cannot read offsets of {topic}: {exc}") from exc
    finally:
        consumer.close()


def _offsets_at(
    consumer: Consumer,
    *, topic: str, partitions: list[int], millis: int,
    high: Mapping[int, int], timeout: float,
) -> dict[int, int]:
    found = consumer.offsets_for_times(
        [TopicPartition(topic, p, millis) for p in partitions], timeout=timeout
    )
    # -1: no message at or after the time: the partition's end.
    return {tp.partition: tp.offset if tp.offset >= 0 else high[tp.partition] for tp in found}


def dead_letters_in_range(
    settings: KafkaSettings,
    topic: str,
    *,
    start: Mapping[int, int],
    end: Mapping[int, int],
    first_ms: int | None,
    last_ms: int | None,
) -> dict[str, Any]:
    """Dead letters of the range: consumer-side ones by their origin offset, producer-side
    ones (no origin offset) by time."""
    dlq = settings.topics.dlq
    by_reason: Counter[str] = Counter()
    by_stage: Counter[str] = Counter()
    positions: set[tuple[int, int]] = set()
    count = 0
    dlq_start, dlq_end, _ = resolve_range(settings, dlq, RangeSpec())
    for msg in read_range(settings, dlq, dlq_start, dlq_end):
        headers = read_dead_letter_headers(msg.headers())
        if headers.get("topic") != topic:
            continue
        partition, offset = headers.get("partition", ""), headers.get("offset", "")
        if partition and offset:
            p, o = int(partition), int(offset)
            if not start.get(p, 0) <= o < end.get(p, 0):
                continue
            positions.add((p, o))
        else:
            _, stamp = msg.timestamp()
            if first_ms is None or last_ms is None or not first_ms <= stamp <= last_ms:
                continue
        count += 1
        by_reason[headers.get("reason", "?")] += 1
        by_stage[headers.get("stage", "?")] += 1
    return {"count": count, "by_reason": dict(sorted(by_reason.items())),
            "by_stage": dict(sorted(by_stage.items())), "positions": sorted(positions)}


def describe_range(spec: RangeSpec, start: Mapping[int, int], end: Mapping[int, int]) -> str:
    parts = []
    if spec.since or spec.until:
        parts.append(f"from {spec.since.isoformat() if spec.since else 'the start'} to "
                     f"{spec.until.isoformat() if spec.until else 'the end'}")
    elif not (spec.from_offsets or spec.to_offsets):
        parts.append("the whole retained stream")
    parts.append("offsets " + ", ".join(f"p{p} [{start.get(p, 0)}, {e})" for p, e in
                                         sorted(end.items())))
    return "; ".join(parts)


def run_verify(
    settings: KafkaSettings,
    decode: TurnEventDeserializer,
    spec: RangeSpec,
    *,
    topic: str | None = None,
    log_file: Path | None = None,
    metrics_urls: Iterable[str] = (),
    anchors: Mapping[StreamId, tuple[int, str]] | None = None,
    timeout: float = 300.0,
) -> VerifyReport:
    topic = topic or settings.topics.turn_events
    start, end, low = resolve_range(settings, topic, spec)
    verifier = Verifier(decode, log_start_offsets=low, anchors=anchors)
    for msg in read_range(settings, topic, start, end, timeout=timeout):
        _, stamp = msg.timestamp()
        verifier.feed(msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value(), stamp)
    report = range_report(settings, topic, spec, verifier, start=start, end=end, low=low)
    if log_file is not None:
        report.log = reconcile_log(log_file, verifier.event_ids)
    report.metrics = [reconcile_metrics(url, verifier.counts) for url in metrics_urls]
    return report


def range_report(
    settings: KafkaSettings,
    topic: str,
    spec: RangeSpec,
    verifier: Verifier,
    *,
    start: Mapping[int, int],
    end: Mapping[int, int],
    low: Mapping[int, int],
) -> VerifyReport:
    """The report of a range ``verifier`` has been fed, with the range's dead letters."""
    dead = dead_letters_in_range(settings, topic, start=start, end=end,
                                 first_ms=verifier.first_timestamp,
                                 last_ms=verifier.last_timestamp)
    return VerifyReport(
        {
            "topic": topic,
            "description": describe_range(spec, start, end),
            "partitions": {str(p): [start.get(p, 0), e] for p, e in sorted(end.items())},
            "from": None if spec.since is None else spec.since.astimezone(UTC).isoformat(),
            "to": None if spec.until is None else spec.until.astimezone(UTC).isoformat(),
            "from_log_start": all(start.get(p, 0) == low.get(p, 0) for p in end),
        },
        verifier,
        dead,
    )
