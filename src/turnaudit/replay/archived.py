"""``replay --archive``: the range starts in the archive's segments and ends on the live
topic (docs/archive.md). A new replay from the log start starts at the archive's first
offset instead; every run (new or resumed) checks that the archive reaches the topic's
log start now, where the range still needs the offsets between (``ArchiveGap``)."""

from __future__ import annotations

from collections.abc import Mapping

from turnaudit.archive.location import open_archive
from turnaudit.archive.reading import ArchiveFeed, archived_segments, extend_into_archive
from turnaudit.archive.segments import SegmentName
from turnaudit.kafka.offsets import RangeSpec, resolve_range
from turnaudit.replay.checkpoint import ReplayCheckpoint
from turnaudit.settings import KafkaSettings


def start_in_archive(
    location: str,
    topic: str,
    start: Mapping[int, int],
    end: Mapping[int, int],
    low: Mapping[int, int],
    *,
    asked: Mapping[int, int] | None = None,
) -> dict[int, int]:
    """The range's start with the archive in front of the topic's log start ``low``."""
    segments = archived_segments(open_archive(location, label="--archive"), topic)
    return archive_start(segments, start, end, low, asked)


def archive_start(
    segments: Mapping[int, list[SegmentName]],
    start: Mapping[int, int],
    end: Mapping[int, int],
    low: Mapping[int, int],
    asked: Mapping[int, int] | None = None,
) -> dict[int, int]:
    """A range from the log start starts at the archive's first offset where that is
    earlier; a partition with an offset of its own (``asked``: ``--from-offsets``; the
    topic's range clamped it up to ``low``) starts there, or at the archive's first
    offset when the archive begins later."""
    moved = extend_into_archive(segments, start, end, low).start
    for p, wanted in (asked or {}).items():
        if p in moved:
            moved[p] = max(wanted, moved[p]) if wanted < start[p] else start[p]
    return moved


def archive_feed(
    settings: KafkaSettings, location: str, state: ReplayCheckpoint, timeout: float
) -> ArchiveFeed:
    """The archive in front of ``state``'s range, checked against the topic's log start
    now: ``ArchiveGap`` when the range needs offsets that neither holds."""
    feed = ArchiveFeed.of(
        open_archive(location, label="--archive"), state.topic, state.start, state.end
    )
    live_low = resolve_range(settings, state.topic, RangeSpec(), timeout=min(timeout, 30.0))
    feed.hand_over(state.next, state.end, live_low.log_start)
    return feed
