"""Redriving parked messages: what ``turnaudit dlq redrive`` writes back, and why not.

Pure: :func:`plan_redrive` decides, letter by letter (:class:`turnaudit.dlq.Letter`),
what goes back to its topic, with the headers that mark it redriven; what earlier
redrives wrote (:class:`RedrivenMarks`) makes a second redrive of the same letters
skip them; a letter today's decoder still refuses, or one with no origin, is
refused with its reason.

Only what can be proved to have been on the topic goes back: the letter's bytes and
key must be the very message stored at its origin (re-read while retention keeps it),
or, once retention took the origin, a turn whose chain hash a valid signed checkpoint
names at its position. Anyone who may write the dead-letter topic can write a letter:
a crafted one is refused (``not_the_original``, ``unprovable``), never written.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypedDict

from turnaudit.dead_letters import (
    REDRIVEN_EVENT_ID_HEADER,
    REDRIVEN_FROM_HEADER,
    REDRIVEN_ORIGIN_HEADER,
)
from turnaudit.dlq import (
    REDRIVABLE,
    Letter,
    Origin,
    Position,
    header_text,
    parse_position,
    whole_number,
)


class Refusal(enum.StrEnum):
    """Why a selected letter is not redriven (a closed set; a decode failure that
    persists is reported with its own reason instead)."""

    NO_ORIGIN = "no_origin"  # no origin position: the runtime parked it (or headers lost)
    OTHER_TOPIC = "other_topic"  # read from a topic other than the one redriven into
    NOT_A_DECODE_FAILURE = "not_a_decode_failure"  # a contract breach, or a reason unknown
    TRUNCATED = "truncated"  # the letter holds only the start of the original
    NOT_THE_ORIGINAL = "not_the_original"  # its origin holds other bytes, or nothing
    UNPROVABLE = "unprovable"  # its origin is gone and no valid checkpoint signs it


class StoredOriginal(NamedTuple):
    """The message re-read at a letter's origin."""

    key: bytes | None
    value: bytes | None


# What a letter's origin holds now: the message, or GONE (below the log start: time
# retention or a deletion took it); an origin missing from the mapping holds nothing.
GONE = "gone"
Originals = Mapping[Origin, StoredOriginal | str]
# Whether a valid signed checkpoint names this turn's bytes at its position.
SignedCheck = Callable[[bytes | None], bool]


class StillFailing(NamedTuple):
    """The current decoder's verdict on a letter's bytes: it fails still."""

    reason: str
    error: str


# A letter's value through today's decoder: its event id, or why it still fails.
DecodeCheck = Callable[[bytes | None], str | StillFailing]


_REDRIVE_HEADERS = frozenset(
    {REDRIVEN_FROM_HEADER, REDRIVEN_ORIGIN_HEADER, REDRIVEN_EVENT_ID_HEADER}
)


def reparked(letter: Letter) -> bool:
    """A redriven copy that a consumer parked again (it failed there once more)."""
    return any(name == REDRIVEN_FROM_HEADER for name, _ in letter.headers)


class RedrivenMarks:
    """What earlier redrives wrote, as read back from the target topic's headers."""

    def __init__(self) -> None:
        self.letters: set[Position] = set()
        self.origins: set[Origin] = set()
        self.event_ids: set[str] = set()

    def add(self, headers: Sequence[tuple[str, bytes | None]]) -> None:
        for name, raw in headers:
            text = header_text(raw)
            if name == REDRIVEN_FROM_HEADER and text.startswith("dlq:"):
                try:
                    self.letters.add(parse_position(text[4:]))
                except ValueError:
                    continue
            elif name == REDRIVEN_EVENT_ID_HEADER and text:
                self.event_ids.add(text)
            elif name == REDRIVEN_ORIGIN_HEADER:
                topic, _, rest = text.rpartition(":")
                topic, _, partition = topic.rpartition(":")
                p, o = whole_number(partition), whole_number(rest)
                if topic and p is not None and o is not None:
                    self.origins.add((topic, p, o))

    def holds(self, letter: Letter) -> bool:
        return (letter.partition, letter.offset) in self.letters or (
            letter.origin is not None and letter.origin in self.origins
        )


@dataclass(frozen=True, slots=True)
class Redrive:
    """One original to write back: the letter it is taken from, and its event id."""

    letter: Letter
    event_id: str
    topic: str

    def headers(self) -> list[tuple[str, bytes | None]]:
        origin = self.letter.origin
        assert origin is not None  # plan_redrive redrives only letters with an origin
        own = [(n, v) for n, v in self.letter.headers if n not in _REDRIVE_HEADERS]
        return [
            *own,
            (REDRIVEN_FROM_HEADER, f"dlq:{self.letter.position}".encode()),
            (REDRIVEN_ORIGIN_HEADER, "{}:{}:{}".format(*origin).encode()),
            (REDRIVEN_EVENT_ID_HEADER, self.event_id.encode()),
        ]


class RefusedJson(TypedDict):
    position: str
    reason: str
    error: str


@dataclass(frozen=True, slots=True)
class Refused:
    letter: Letter
    reason: str  # a Refusal, or the decode reason that persists
    error: str

    def as_json(self) -> RefusedJson:
        return RefusedJson(position=self.letter.position, reason=self.reason, error=self.error)


class PlanJson(TypedDict):
    selected: int
    redriven: list[str]
    already_redriven: list[str]
    same_original: list[str]
    refused: list[RefusedJson]
    refused_by_reason: dict[str, int]


@dataclass(slots=True)
class RedrivePlan:
    redrive: list[Redrive] = field(default_factory=list)
    already: list[Letter] = field(default_factory=list)  # redriven by an earlier run
    same_original: list[Letter] = field(default_factory=list)  # another letter of one turn
    refused: list[Refused] = field(default_factory=list)

    @property
    def selected(self) -> int:
        return len(self.redrive) + len(self.already) + len(self.same_original) + len(self.refused)

    def refused_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(r.reason for r in self.refused).items()))

    def as_json(self) -> PlanJson:
        return PlanJson(
            selected=self.selected,
            redriven=[r.letter.position for r in self.redrive],
            already_redriven=[letter.position for letter in self.already],
            same_original=[letter.position for letter in self.same_original],
            refused=[r.as_json() for r in self.refused],
            refused_by_reason=self.refused_by_reason(),
        )


def plan_redrive(
    letters: Iterable[Letter],
    *,
    topic: str,
    check: DecodeCheck,
    marks: RedrivenMarks,
    originals: Originals,
    signed: SignedCheck = lambda _value: False,
) -> RedrivePlan:
    """Which letters go back to ``topic``, once per original turn.

    In order: a letter without an origin, from another topic, parked for a reason
    no fix cures, or truncated is refused; one an earlier redrive wrote back (that
    letter, its original or, unless the letter is such a copy parked again, its
    event id) is skipped; one whose bytes today's
    decoder still cannot read is refused with that reason; one that is not the message
    stored at its origin (``originals``), or whose origin is gone and no valid checkpoint
    signs (``signed``), is refused; of several letters of one original (each service
    parks its own copy) or of one event id, the first is redriven and the others are
    skipped.
    """
    plan = RedrivePlan()
    origins: set[Origin] = set()
    event_ids: set[str] = set()
    for letter in letters:
        origin = letter.origin
        refused = _never(letter, topic)
        if refused is not None or origin is None:
            plan.refused.append(refused or Refused(letter, Refusal.NO_ORIGIN, "no origin"))
        elif marks.holds(letter):
            plan.already.append(letter)
        elif origin in origins:
            plan.same_original.append(letter)
        else:
            verdict = check(letter.value)
            proof = _unproved(letter, origin, originals, signed)
            if isinstance(verdict, StillFailing):
                plan.refused.append(Refused(letter, verdict.reason, verdict.error))
            elif proof is not None:
                plan.refused.append(proof)
            elif verdict in marks.event_ids and not reparked(letter):
                plan.already.append(letter)  # this turn went back from another letter
            elif verdict in event_ids:
                plan.same_original.append(letter)
            else:
                origins.add(origin)
                event_ids.add(verdict)
                plan.redrive.append(Redrive(letter, verdict, topic))
    return plan


def _never(letter: Letter, topic: str) -> Refused | None:
    """Why ``letter`` can never go back to ``topic``, whatever its bytes (None: it may)."""
    origin = letter.origin
    if origin is None:
        return Refused(letter, Refusal.NO_ORIGIN, "no origin position")
    if origin[0] != topic:
        return Refused(letter, Refusal.OTHER_TOPIC, f"from {origin[0]}")
    if letter.reason not in REDRIVABLE:
        return Refused(letter, Refusal.NOT_A_DECODE_FAILURE, f"parked as {letter.reason}")
    if letter.truncated:
        return Refused(letter, Refusal.TRUNCATED, "only the start of the original is in the letter")
    return None


def _unproved(
    letter: Letter, origin: Origin, originals: Originals, signed: SignedCheck
) -> Refused | None:
    """Why ``letter`` cannot be proved to be what was stored at ``origin`` (None: it is)."""
    stored = originals.get(origin)
    where = "{}:{}:{}".format(*origin)
    if stored == GONE:
        if signed(letter.value):
            return None
        return Refused(
            letter,
            Refusal.UNPROVABLE,
            f"{where} is no longer retained and no valid signed checkpoint names this turn",
        )
    if not isinstance(stored, StoredOriginal):
        return Refused(letter, Refusal.NOT_THE_ORIGINAL, f"no message is stored at {where}")
    if stored.value != letter.value or stored.key != letter.key:
        return Refused(
            letter, Refusal.NOT_THE_ORIGINAL, f"the message stored at {where} is not this one"
        )
    return None
