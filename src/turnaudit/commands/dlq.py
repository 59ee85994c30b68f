"""``turnaudit dlq``: list, show, count and redrive the messages parked on the dead-letter topic.

The selection and the summary are the core's (``turnaudit.dlq``); this module reads
the dead-letter topic with an assigned reader (no consumer group, nothing
committed), decodes with today's decoder and writes redriven originals with the
reliable producer.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from tqdm import tqdm

from turnaudit.argparsing import iso_time, non_negative_int
from turnaudit.chain import chain_hash
from turnaudit.checkpoint_chain import judge_chain
from turnaudit.cluster import connect, require_access
from turnaudit.consumers.runtime.sink import Rejection
from turnaudit.consumers.runtime.validation import decode_message
from turnaudit.dlq import (
    Letter,
    LetterFilter,
    Origin,
    letter_from_record,
    parse_position,
    summarize,
)
from turnaudit.dlq_redrive import (
    GONE,
    DecodeCheck,
    RedrivenMarks,
    RedrivePlan,
    SignedCheck,
    StillFailing,
    StoredOriginal,
    plan_redrive,
)
from turnaudit.errors import BrokerError, ConfigurationError, PublishError, SerializationError
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import RangeSpec, resolve_range, watermarks
from turnaudit.kafka.producer import (
    DeliveredMessage,
    DeliveryCallback,
    DeliveryError,
    KafkaProducer,
)
from turnaudit.kafka.reading import read_offsets, read_range
from turnaudit.records import record_headers
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import load_keyring
from turnaudit.verify.kafka_reads import read_checkpoints
from turnaudit.verify.trust import signed_heads

FINDINGS_EXIT = 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "dlq",
        help="list, show, count and redrive messages parked on the dead-letter topic",
        description="Reads the dead-letter topic (<prefix>dlq) with an assigned reader: no "
        "consumer group joined, nothing committed. Letters without the headers these "
        "commands read are counted under 'unknown'.",
    )
    commands = parser.add_subparsers(dest="dlq_command", metavar="ACTION", required=True)

    listing = commands.add_parser("list", help="the selected letters, one line each")
    _add_filters(listing)
    listing.add_argument(
        "--limit",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="at most N letters, the newest (default: all)",
    )
    listing.set_defaults(handler=_list)

    show = commands.add_parser("show", help="one letter: its headers, key and value")
    show.add_argument(
        "position",
        metavar="PARTITION:OFFSET",
        help="the letter's place on the dead-letter topic, e.g. 0:42",
    )
    show.add_argument("--json", action="store_true", help="one JSON document")
    show.set_defaults(handler=_show)

    count = commands.add_parser(
        "count", help="the selected letters counted by reason, service, partition and hour"
    )
    _add_filters(count)
    count.set_defaults(handler=_count)

    redrive = commands.add_parser(
        "redrive",
        help="write the selected originals back to the topic they came from, once each",
        description="Decodes each selected letter with today's decoder first: a letter that "
        "still fails (a schema still unknown, a framing still unreadable) is not redriven "
        "and is reported with its reason, and the command exits 1. Each original goes back "
        "once, with its bytes, key and headers and turnaudit.redriven-from="
        "dlq:PARTITION:OFFSET; letters an earlier redrive wrote back (found by that header "
        "on the topic) are skipped and reported. Only what was on the topic goes back: a "
        "letter must be the message stored at its origin (re-read there), or, once "
        "retention took the origin, a turn a valid signed checkpoint names (--keyring); "
        "any other is refused (not_the_original, unprovable). Consumers count redriven "
        "turns apart from live ones (turnaudit_redriven_turns_total).",
    )
    _add_filters(redrive)
    redrive.add_argument(
        "--dry-run", action="store_true", help="say what would be redriven, write nothing"
    )
    redrive.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="seconds to wait for the broker to take the redriven messages",
    )
    redrive.add_argument(
        "--keyring",
        type=Path,
        metavar="FILE",
        help="verify's keyring: a letter whose origin retention took goes back when a "
        "valid signed checkpoint names its turn (without it, such a letter is refused)",
    )
    redrive.set_defaults(handler=_redrive)


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reason",
        action="append",
        default=[],
        metavar="REASON",
        help="only this reason (repeatable; 'contract' is every contract:*, "
        "'unknown' letters without a known reason)",
    )
    parser.add_argument(
        "--since", type=iso_time, metavar="ISO-TIME", help="parked at or after (no zone = UTC)"
    )
    parser.add_argument(
        "--until", type=iso_time, metavar="ISO-TIME", help="parked before (no zone = UTC)"
    )
    parser.add_argument(
        "--service",
        action="append",
        default=[],
        metavar="NAME",
        help="only letters this consuming service parked (its stage header, "
        "e.g. verdict-metrics, log-sink, producer; repeatable)",
    )
    parser.add_argument(
        "--partition",
        action="append",
        default=[],
        type=non_negative_int,
        metavar="P",
        help="only letters of this partition of the original topic (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document")


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


def letter_filter(args: argparse.Namespace) -> LetterFilter:
    if args.since is not None and args.until is not None and args.until <= args.since:
        raise ConfigurationError("--until must be later than --since")
    return LetterFilter(
        reasons=frozenset(args.reason),
        services=frozenset(args.service),
        partitions=frozenset(args.partition),
        since_ms=_ms(args.since),
        until_ms=_ms(args.until),
    )


def _settings() -> KafkaSettings:
    settings, _ = connect(KafkaSettings.from_env(), start_local=False)
    return settings


def read_letters(settings: KafkaSettings, args: argparse.Namespace) -> Iterator[Letter]:
    """The dead-letter topic's letters parked in ``--since``/``--until``, in offset order."""
    dlq = settings.topics.dlq
    require_access(settings, reads=[dlq])
    letters = resolve_range(settings, dlq, RangeSpec(args.since, args.until))
    for record in read_range(settings, dlq, letters.start, letters.end):
        yield letter_from_record(record)


# -- list, show, count ---------------------------------------------------------------------
def _list(args: argparse.Namespace) -> int:
    selected = letter_filter(args).select(read_letters(_settings(), args))
    if args.limit:
        selected = sorted(selected, key=lambda letter: letter.timestamp_ms)[-args.limit :]
    if args.json:
        print(json.dumps([letter.as_json() for letter in selected], indent=2))
    else:
        for letter in selected:
            print(letter.line())
        print(f"{len(selected)} dead letter(s)", file=sys.stderr)
    return 0


def _count(args: argparse.Namespace) -> int:
    summary = summarize(letter_filter(args).select(read_letters(_settings(), args)))
    print(json.dumps(summary.as_json(), indent=2) if args.json else summary.human())
    return 0


def _show(args: argparse.Namespace) -> int:
    try:
        partition, offset = parse_position(args.position)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None
    settings = _settings()
    dlq = settings.topics.dlq
    require_access(settings, reads=[dlq])
    marks = watermarks(settings, dlq)
    if partition not in marks.high:
        raise ConfigurationError(
            f"{dlq} has no partition {partition} (partitions 0-{len(marks.high) - 1})"
        )
    if not marks.low.get(partition, 0) <= offset < marks.high[partition]:
        raise BrokerError(
            f"no letter at {partition}:{offset}: {dlq} partition {partition} holds offsets "
            f"{marks.low.get(partition, 0)} to {marks.high[partition] - 1} "
            "(older ones are past retention)"
        )
    record = next(iter(read_range(settings, dlq, {partition: offset}, {partition: offset + 1})))
    letter = letter_from_record(record)
    headers = {
        name: (value or b"").decode(errors="replace") for name, value in record_headers(record)
    }
    if args.json:
        print(
            json.dumps(
                {**letter.as_json(), "headers": headers, "value_hex": (letter.value or b"").hex()},
                indent=2,
            )
        )
    else:
        print(letter.line())
        for name, value in headers.items():
            print(f"  {name}: {' '.join(value.split())[:300]}")
        print(f"  value: {len(letter.value or b'')} bytes")
    return 0


# -- redrive -----------------------------------------------------------------------------
def decode_check(settings: KafkaSettings) -> DecodeCheck:
    """Today's decoder on a letter's bytes: the event id, or the reason it still fails."""
    decode = decoder_for(settings)

    def check(value: bytes | None) -> str | StillFailing:
        decoded = decode_message(decode, value)
        if isinstance(decoded, Rejection):
            return StillFailing(decoded.reason.value, decoded.error)
        event_id = decoded.event.get("event_id")
        if not isinstance(event_id, str) or not event_id:
            return StillFailing("undecodable", "decodes, but not to a TurnEvent with an event id")
        return event_id

    return check


def redriven_marks(settings: KafkaSettings, topic: str, since_ms: int) -> RedrivenMarks:
    """The redrive headers on ``topic`` from ``since_ms`` (the oldest candidate letter's
    parking time: a redriven copy is always written after its letter) to its end."""
    marks = RedrivenMarks()
    since = datetime.fromtimestamp(since_ms / 1000, UTC)
    span = resolve_range(settings, topic, RangeSpec(since=since))
    for record in read_range(settings, topic, span.start, span.end):
        if record.headers() is not None:
            marks.add(record_headers(record))
    return marks


def signed_check(settings: KafkaSettings, keyring: Path | None) -> SignedCheck:
    """Whether a valid signed checkpoint names a letter's turn at its position (its chain
    hash, writer schema bound): never without a keyring."""
    if keyring is None:
        return lambda _value: False
    positions = signed_heads(judge_chain(read_checkpoints(settings).read, load_keyring(keyring)))
    decode = decoder_for(settings)

    def signed(value: bytes | None) -> bool:
        try:
            decoded = decode(value)
            event = decoded.event
            wanted = positions.positions.get((event["session_id"], event["producer_id"]), {})
            digest = chain_hash(value or b"", decode.writer_fingerprint(decoded))
            return wanted.get(int(event["sequence"])) == digest
        except (SerializationError, KeyError, TypeError, ValueError):
            return False

    return signed


def _redrive(args: argparse.Namespace) -> int:
    selection = letter_filter(args)
    settings = _settings()
    topic = settings.topics.turn_events
    require_access(
        settings, reads=[settings.topics.dlq, topic], writes=[] if args.dry_run else [topic]
    )
    letters = selection.select(read_letters(settings, args))
    candidates = [
        letter.timestamp_ms
        for letter in letters
        if letter.origin is not None and letter.origin[0] == topic
    ]
    marks = redriven_marks(settings, topic, min(candidates)) if candidates else RedrivenMarks()
    wanted: dict[int, set[int]] = {}
    for name, partition, offset in (x.origin for x in letters if x.origin is not None):
        if name == topic:
            wanted.setdefault(partition, set()).add(offset)
    held, gone = read_offsets(settings, topic, wanted)
    originals: dict[Origin, StoredOriginal | str] = {(topic, *p): GONE for p in gone}
    originals.update({(topic, *p): StoredOriginal(*kv) for p, kv in held.items()})
    plan = plan_redrive(
        letters,
        topic=topic,
        check=decode_check(settings),
        marks=marks,
        originals=originals,
        signed=signed_check(settings, args.keyring),
    )
    written, failed = (0, []) if args.dry_run else _write(settings, plan, args.timeout)
    report = plan.as_json()
    if args.json:
        print(
            json.dumps(
                {**report, "dry_run": args.dry_run, "written": written, "failed": failed}, indent=2
            )
        )
    else:
        print(_human(plan, dry_run=args.dry_run, written=written, failed=failed))
    if failed:
        raise PublishError(
            f"{len(failed)} of {len(plan.redrive)} redriven message(s) were "
            f"not taken by the broker ({', '.join(failed[:5])}): run the same "
            "command again, what was written is skipped"
        )
    return FINDINGS_EXIT if plan.refused else 0


def _human(plan: RedrivePlan, *, dry_run: bool, written: int, failed: list[str]) -> str:
    verb = "would redrive" if dry_run else "redriven"
    lines = [
        f"{plan.selected} letter(s) selected; {verb}: {len(plan.redrive)}"
        + ("" if dry_run else f" ({written} written)")
    ]
    lines += [f"  {r.letter.position} -> {r.topic} event {r.event_id}" for r in plan.redrive]
    if plan.already:
        lines.append(
            f"already redriven by an earlier run, skipped: {len(plan.already)} ("
            + ", ".join(letter.position for letter in plan.already[:20])
            + ")"
        )
    if plan.same_original:
        lines.append(f"another letter of the same turn, skipped: {len(plan.same_original)}")
    if plan.refused:
        lines.append(
            f"refused (would fail again or cannot go back): {len(plan.refused)} "
            + json.dumps(plan.refused_by_reason())
        )
        lines += [
            f"  {r.letter.position} {r.reason}: {' '.join(r.error.split())[:200]}"
            for r in plan.refused
        ]
    return "\n".join(lines)


def _write(settings: KafkaSettings, plan: RedrivePlan, timeout: float) -> tuple[int, list[str]]:
    """Produce every planned original; the number taken and the letters not taken."""
    producer = KafkaProducer.reliable(settings).open()
    taken: list[str] = []
    failed: list[str] = []
    progress = RedriveProgress(len(plan.redrive), terminal=sys.stderr.isatty())

    def delivered(position: str) -> DeliveryCallback:
        def report(err: DeliveryError | None, _msg: DeliveredMessage) -> None:
            (failed if err is not None else taken).append(position)
            progress.update(len(taken))

        return report

    for redrive in plan.redrive:
        letter = redrive.letter
        producer.produce(
            redrive.topic,
            letter.value,
            letter.key,
            headers=redrive.headers(),
            on_delivery=delivered(letter.position),
        )
    producer.flush(timeout)
    progress.close()
    # Not confirmed in time: reported as not taken (a rerun skips what did land).
    unsettled = [
        r.letter.position
        for r in plan.redrive
        if r.letter.position not in taken and r.letter.position not in failed
    ]
    return len(taken), failed + unsettled


class RedriveProgress:
    """On a terminal a progress bar (messages taken by the broker); otherwise a line
    every 1000 and at the end (as ``replay``'s)."""

    def __init__(self, total: int, *, terminal: bool) -> None:
        self._total = total
        self._terminal = terminal
        self._bar: tqdm | None = None
        self._shown = 0

    def update(self, done: int) -> None:
        if not self._terminal:
            if done == self._total or done % 1000 == 0:
                print(
                    f"dlq redrive: {done}/{self._total} messages written",
                    file=sys.stderr,
                    flush=True,
                )
            return
        if self._bar is None:
            self._bar = tqdm(total=self._total, unit="msg", file=sys.stderr, dynamic_ncols=True)
        self._bar.update(done - self._shown)
        self._shown = done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
