"""``replay --archive``: the range starts in the archive's segments and ends on the live
topic (docs/archive.md). A new replay's range is resolved with the archive in front of
the topic's log start (a range from the log start starts at the archive's first offset; a
time before the log start is looked up in the archive); every run (new or resumed) checks
that the archive reaches the topic's log start now, where the range still needs the
offsets between (``ArchiveGap``)."""

from __future__ import annotations

from turnaudit.archive.location import open_archive
from turnaudit.archive.reading import ArchiveFeed
from turnaudit.archive.time_range import resolve_with_archive
from turnaudit.kafka.offsets import RangeSpec, ResolvedRange, resolve_range
from turnaudit.replay.checkpoint import ReplayCheckpoint
from turnaudit.settings import KafkaSettings


def range_with_archive(
    settings: KafkaSettings, location: str, topic: str, spec: RangeSpec, timeout: float
) -> ResolvedRange:
    """The range of ``spec`` with the archive at ``location`` in front of the topic's log
    start, times looked up in both (``turnaudit.archive.time_range``)."""
    archive = open_archive(location, label="--archive")
    return resolve_with_archive(settings, topic, spec, archive, timeout).range


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
