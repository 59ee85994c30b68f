"""``run_verify``: a range of the stream read from Kafka, verified, reconciled with a
log sink's files and the change of verdict-metrics counters over the range;
``range_report`` for a range already fed."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, timedelta
from pathlib import Path

from turnaudit.archive.reading import extend_into_archive
from turnaudit.archive.store import ArchiveStore
from turnaudit.archive.time_range import resolve_with_archive
from turnaudit.checkpoint_chain import (
    RetentionStart,
    judge_chain,
)
from turnaudit.checkpoints import Keyring
from turnaudit.identity import StreamId
from turnaudit.kafka.offsets import RangeSpec, event_time_range, resolve_range
from turnaudit.kafka.topics import topic_retention_ms
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.verify.crash import stream_ends
from turnaudit.verify.files import reconcile_log
from turnaudit.verify.id_store import IdMemory
from turnaudit.verify.jobs import VerifierOptions, default_jobs, partition_sets, verify_in_jobs
from turnaudit.verify.kafka_reads import (
    ArchiveInFront,
    dead_letters_in_range,
    feed_range,
    read_checkpoints,
    stream_head_announcements,
)
from turnaudit.verify.report import RangeJson, VerifyReport
from turnaudit.verify.scrape import reconcile_metrics
from turnaudit.verify.trust import Removal, judge_streams, signed_heads
from turnaudit.verify.verifier import Verifier


def run_verify(
    settings: KafkaSettings,
    decode: TurnEventDeserializer,
    spec: RangeSpec,
    *,
    topic: str | None = None,
    log_file: Path | None = None,
    metrics_urls: Iterable[str] = (),
    metrics_before: Sequence[str | None] = (),
    metrics_settle_s: float = 10.0,
    anchors: Mapping[StreamId, tuple[int, str]] | None = None,
    timeout: float = 300.0,
    event_time: bool = False,
    slack: timedelta | None = None,
    keyring: Keyring | None = None,
    keyring_source: str = "",
    memory: IdMemory | None = None,
    jobs: int | None = 1,
    archive: ArchiveStore | None = None,
) -> VerifyReport:
    """``archive``: the range starts in the archive's segments (``turnaudit.archive``)
    where the topic's log start is later, and the live topic feeds the rest; so do the
    checkpoints and the stream heads, from the archive's folders of their topics."""
    topic = topic or settings.topics.turn_events
    broker_spec, window = spec, None
    if event_time:
        broker_spec, found = event_time_range(spec, slack)
        window = (found.low, found.high)
    # Signed checkpoints first: the verifier keeps the chain hashes at signed positions.
    chain, not_checkpoints, retention_ms = None, 0, None
    if keyring is not None:
        # A chain may begin past its first checkpoint when retention removed those before
        # (older than the turn topic's retention, so are the turns they signed).
        retention_ms = topic_retention_ms(settings, topic, timeout)
        read = read_checkpoints(settings, timeout=timeout, archive=archive)
        now_ms = int(time.time() * 1000)
        begins = RetentionStart(retention_ms, lambda: now_ms, read.log_start_moved)
        chain = judge_chain(read.read, keyring, read.offsets, begins)
        not_checkpoints = read.not_checkpoints
    archived = None
    if archive is None:
        start, end, low = resolve_range(settings, topic, broker_spec)
    else:
        # The archive in front of the topic's log start, times looked up in both.
        fronted = resolve_with_archive(settings, topic, broker_spec, archive)
        start, end, low = fronted.range
        reach = extend_into_archive(fronted.segments, start, end, low)
        archived = ArchiveInFront(archive, fronted.segments, reach, fronted.live_low)
        jobs = 1  # one reader
    # By event time a session's first turn in the window is where its stream starts for
    # the window (its earlier turns happened before it), as in ``replay --into verify:``.
    # The ids' filter sized for the range (the merging process holds every job's ids).
    memory = replace(
        memory or IdMemory(), expected_ids=sum(e - start.get(p, 0) for p, e in end.items())
    )
    options = VerifierOptions(
        low,
        anchors=anchors,
        start_gaps=not event_time,
        event_window=window,
        memory=memory,
        signed=None if chain is None else signed_heads(chain).positions,
        named_schemas=None if chain is None else chain.named_schemas(),
    )
    parts = len(partition_sets(start, end, len(end) or 1))
    jobs = min(default_jobs(parts) if jobs is None else jobs, parts)
    with ThreadPoolExecutor(1, thread_name_prefix="turnaudit-verify-heads") as aside:
        # The announced stream heads (one per stream a publisher closed: a million for a
        # million streams) are read and decoded while the jobs verify, not after them.
        # (One process has no core to spare: it reads them after the range.)
        announced = (
            aside.submit(stream_head_announcements, settings, timeout=timeout) if jobs > 1 else None
        )
        if jobs > 1:
            verifier = verify_in_jobs(
                settings, topic, decode, options, start=start, end=end, jobs=jobs, timeout=timeout
            )
        else:
            verifier = options.verifier(decode)
    with verifier:  # the spilled event ids are removed at the end, also on error
        if jobs <= 1:  # with an archive: its segments first, then the topic
            feed_range(
                settings, topic, verifier, start=start, end=end, timeout=timeout, archived=archived
            )
        report = range_report(settings, topic, spec, verifier, start=start, end=end, low=low)
        whole_stream = (
            report.range["from_log_start"]
            and not verifier.retained_from
            and all(start.get(p, 0) == 0 for p in end)
        )
        # Where each announced stream ended (cleanly or cut by a crash), against the range:
        # only a range that reaches the stream's end now can say turns never reached it.
        report.stream_ends = stream_ends(
            announced.result()
            if announced is not None
            else stream_head_announcements(settings, timeout=timeout, archive=archive),
            verifier.tracker.last_position_of(),
            whole_stream=whole_stream,
            to_end=spec.until is None and not spec.to_offsets,
        )
        if keyring is not None and chain is not None:
            to_end = spec.until is None and not spec.to_offsets and not event_time
            removal = Removal(
                now_ms=int(time.time() * 1000),
                retention_ms=retention_ms,
                moved=any(o > 0 for o in low.values()),
                whole=report.range["from_log_start"] and to_end and not event_time,
            )
            report.trust = judge_streams(
                chain,
                keyring=keyring_source,
                require_signed=keyring.require_signed,
                observed=verifier.signed_seen,
                last_seen=verifier.tracker.last_positions(),
                to_end=spec.until is None and not spec.to_offsets and not event_time,
                whole_stream=whole_stream and not event_time,
                not_checkpoints=not_checkpoints,
                facts=verifier.trust.facts() if verifier.trust is not None else None,
                removal=removal,
                allowances=keyring.allow_unsigned,
            )
        if log_file is not None:
            report.log = reconcile_log(log_file, verifier.event_ids, options.memory)
        before = list(metrics_before)
        report.metrics = [
            reconcile_metrics(
                url,
                verifier.counts,
                before=before[i] if i < len(before) else None,
                settle_s=metrics_settle_s,
            )
            for i, url in enumerate(metrics_urls)
        ]
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
    dead = dead_letters_in_range(
        settings,
        topic,
        start=start,
        end=end,
        first_ms=verifier.first_timestamp,
        last_ms=verifier.last_timestamp,
    )
    return VerifyReport(range_json(topic, spec, start, end, low), verifier, dead)


def range_json(
    topic: str,
    spec: RangeSpec,
    start: Mapping[int, int],
    end: Mapping[int, int],
    low: Mapping[int, int],
) -> RangeJson:
    return {
        "topic": topic,
        "description": describe_range(spec, start, end),
        "partitions": {str(p): [start.get(p, 0), e] for p, e in sorted(end.items())},
        "from": None if spec.since is None else spec.since.astimezone(UTC).isoformat(),
        "to": None if spec.until is None else spec.until.astimezone(UTC).isoformat(),
        "from_log_start": all(start.get(p, 0) == low.get(p, 0) for p in end),
    }


def describe_range(spec: RangeSpec, start: Mapping[int, int], end: Mapping[int, int]) -> str:
    parts = []
    if spec.since or spec.until:
        parts.append(
            f"from {spec.since.isoformat() if spec.since else 'the start'} to "
            f"{spec.until.isoformat() if spec.until else 'the end'}"
        )
    elif not (spec.from_offsets or spec.to_offsets):
        parts.append("the whole retained stream")
    parts.append(
        "offsets " + ", ".join(f"p{p} [{start.get(p, 0)}, {e})" for p, e in sorted(end.items()))
    )
    return "; ".join(parts)
