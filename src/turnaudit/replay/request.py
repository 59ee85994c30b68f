"""What to replay (``ReplayRequest``) and where to (``ReplayTarget``): the arguments, whose
digest ties a checkpoint to the replay that wrote it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

from turnaudit.errors import ConfigurationError
from turnaudit.kafka.offsets import RangeSpec
from turnaudit.redaction import DROPPED, Redaction, SurfacePolicy
from turnaudit.replay import order
from turnaudit.replay.canonical import by_partition, canonical_json

CHECKPOINT_SUFFIX = ".replay-checkpoint.json"


class KnownOutputKind(Protocol):
    @property
    def writes_file(self) -> bool: ...


class OutputKindLookup(Protocol):
    """The output kinds ``--into`` may name: ``turnaudit.replay.outputs.OutputKinds``."""

    def get(self, name: str) -> KnownOutputKind | None: ...

    def names(self) -> list[str]: ...


@dataclass(frozen=True)
class ReplayTarget:
    """Where a replay writes: ``KIND:WHERE`` and the checkpoint file that records its progress."""

    kind: str
    where: str
    checkpoint: Path

    @property
    def path(self) -> Path:
        return Path(self.where)

    @classmethod
    def parse(
        cls, text: str, kinds: OutputKindLookup, checkpoint: Path | None = None
    ) -> ReplayTarget:
        kind, sep, where = text.partition(":")
        if not sep or not where:
            raise ConfigurationError(f"--into {text!r}: write KIND:WHERE, e.g. jsonl:out.jsonl")
        found = kinds.get(kind)
        if found is None:
            raise ConfigurationError(
                f"--into {text!r}: unknown sink kind {kind!r}; choose {', '.join(kinds.names())}"
            )
        if checkpoint is None:
            # A topic output records its progress in the working folder.
            base = Path(where) if found.writes_file else Path(f"{kind}-{where}")
            checkpoint = base.with_name(base.name + CHECKPOINT_SUFFIX)
        return cls(kind, where, checkpoint)

    @classmethod
    def file(cls, kind: str, path: Path) -> ReplayTarget:
        """A file output with its checkpoint beside it (``PATH.replay-checkpoint.json``)."""
        return cls(kind, str(path), path.with_name(path.name + CHECKPOINT_SUFFIX))


@dataclass(frozen=True)
class ReplayRequest:
    """What to replay; the same request resumes the same replay.

    ``event_time``: ``spec.since``/``spec.until`` select events by their
    ``occurred_at``, read from the broker range ``[since - slack, until +
    slack)`` by broker time, or the whole retained stream without ``slack``.
    """

    spec: RangeSpec = field(default_factory=RangeSpec)
    partitions: tuple[int, ...] | None = None
    topic: str | None = None
    event_time: bool = False
    slack: timedelta | None = None
    # What the outputs write of surfaces and tool I/O (``turnaudit.redaction``).
    surfaces: Redaction = DROPPED
    # ``--step``: metrics outputs write one timestamped sample per step of event time.
    step: timedelta | None = None
    # ``--archive``: an archive (``turnaudit archive run``) in front of the topic.
    archive: str | None = None

    def fingerprint(self, topic: str, target: ReplayTarget) -> str:
        """A digest of the arguments: a checkpoint resumes only the replay it was written by."""

        def when(moment: datetime | None) -> str | None:
            return moment.isoformat() if moment is not None else None

        def offsets(found: Mapping[int, int] | None) -> dict[str, int] | None:
            return by_partition(found) if found is not None else None

        described = {
            "topic": topic,
            "kind": target.kind,
            "since": when(self.spec.since),
            "until": when(self.spec.until),
            "from_offsets": offsets(self.spec.from_offsets),
            "to_offsets": offsets(self.spec.to_offsets),
            "partitions": list(self.partitions) if self.partitions is not None else None,
            "event_time": self.event_time,
            "slack_s": None if self.slack is None else self.slack.total_seconds(),
            "block": order.BLOCK_MESSAGES,
            # Only when not the default, so a checkpoint of a default replay still resumes.
            **(
                {}
                if self.surfaces.policy is SurfacePolicy.DROP
                else {"surfaces": self.surfaces.label}
            ),
            **({} if self.step is None else {"step_s": self.step.total_seconds()}),
            # Whether, not where: an archive moved elsewhere still resumes its replay.
            **({} if self.archive is None else {"archive": True}),
        }
        return hashlib.sha256(canonical_json(described)).hexdigest()


def parse_partitions(text: str) -> tuple[int, ...]:
    try:
        found = tuple(sorted({int(p) for p in text.split(",") if p.strip()}))
    except ValueError:
        raise ConfigurationError(f"--partitions {text!r}: write a list like 0,2") from None
    if not found or min(found) < 0:
        raise ConfigurationError(f"--partitions {text!r}: partitions are >= 0")
    return found
