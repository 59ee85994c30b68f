"""``verify --jobs N``: the range's partitions read in N processes, a ``Verifier`` each,
merged into one.

A session's turns are keyed by its id, so a partition holds whole streams: each job
concludes alone about its streams, and the merge adds the conclusions up. The event ids
are what crosses partitions: each job hands its ids over in one sorted run file, and
the merge (one sequential pass per job) finds an id two partitions both hold (a copy
stored under another key) as a duplicate or changed content. Jobs are spawned
processes (no fork of a process that may hold a Kafka client), each holding its own
``IdMemory`` bound.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from types import MappingProxyType

from turnaudit.identity import StreamId
from turnaudit.logconfig import cli_log_level, configure_cli_logging
from turnaudit.serialization.decoders import decoder_for
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.verify.id_store import IdMemory
from turnaudit.verify.kafka_reads import feed_range
from turnaudit.verify.retained_start import Anchors
from turnaudit.verify.verifier import Verifier


def read_only(mapping: dict[str, str]) -> MappingProxyType[str, str]:
    return MappingProxyType(mapping)


def _reduce_proxy(
    proxy: MappingProxyType[str, str],
) -> tuple[Callable[[dict[str, str]], MappingProxyType[str, str]], tuple[dict[str, str]]]:
    return read_only, (dict(proxy),)


# Settings hold read-only mappings, which pickle does not take: sent to a job as the
# mappings they wrap (only in what multiprocessing pickles).
ForkingPickler.register(MappingProxyType, _reduce_proxy)


@dataclass(frozen=True)
class VerifierOptions:
    """What every job's ``Verifier`` is built with (as ``run_verify`` builds its own)."""

    log_start_offsets: Mapping[int, int]
    anchors: Anchors | None = None
    start_gaps: bool = True
    event_window: tuple[int, int] | None = None
    signed: Mapping[StreamId, Mapping[int, str]] | None = None
    memory: IdMemory = field(default_factory=IdMemory)
    named_schemas: Mapping[str, frozenset[str]] | None = None

    def verifier(self, decode: TurnEventDeserializer) -> Verifier:
        return Verifier(
            decode,
            log_start_offsets=self.log_start_offsets,
            anchors=self.anchors,
            start_gaps=self.start_gaps,
            event_window=self.event_window,
            signed=self.signed,
            memory=self.memory,
            named_schemas=self.named_schemas,
        )


@dataclass(frozen=True)
class Job:
    settings: KafkaSettings
    topic: str
    start: dict[int, int]
    end: dict[int, int]
    options: VerifierOptions
    timeout: float
    ids: Path  # the directory the job leaves its event ids in (run files)


def default_jobs(partitions: int) -> int:
    """One job per partition, at most one per core this process may run on."""
    return max(1, min(partitions, len(os.sched_getaffinity(0))))


def partition_sets(start: Mapping[int, int], end: Mapping[int, int], jobs: int) -> list[list[int]]:
    """The partitions with messages in the range, dealt round-robin to at most ``jobs``."""
    partitions = sorted(p for p, e in end.items() if e > start.get(p, 0))
    return [s for s in (partitions[i::jobs] for i in range(jobs)) if s]


def run_job(job: Job) -> Verifier:
    """One job (in its own process): its partitions verified, its ids left in run files."""
    with job.options.verifier(decoder_for(job.settings)) as verifier:
        feed_range(
            job.settings, job.topic, verifier, start=job.start, end=job.end, timeout=job.timeout
        )
        verifier.export_for_merge(job.ids)
        return verifier


def verify_in_jobs(
    settings: KafkaSettings,
    topic: str,
    decode: TurnEventDeserializer,
    options: VerifierOptions,
    *,
    start: Mapping[int, int],
    end: Mapping[int, int],
    jobs: int,
    timeout: float,
) -> Verifier:
    """The range verified by ``jobs`` processes and merged (the caller closes it)."""
    merged = options.verifier(decode)
    try:
        with tempfile.TemporaryDirectory(
            prefix="turnaudit-verify-jobs-", dir=options.memory.spill_dir
        ) as handed:
            planned = [
                Job(
                    settings,
                    topic,
                    {p: start.get(p, 0) for p in part},
                    {p: end[p] for p in part},
                    replace(
                        options,
                        memory=replace(
                            options.memory, expected_ids=sum(end[p] - start.get(p, 0) for p in part)
                        ),
                    ),
                    timeout,
                    Path(handed) / f"job-{n}",
                )
                for n, part in enumerate(partition_sets(start, end, jobs))
            ]
            context = multiprocessing.get_context("spawn")
            # A spawned job starts with structlog's defaults (stdout): it logs as the
            # command does, so a --json report on stdout stays JSON alone.
            with context.Pool(
                len(planned), initializer=configure_cli_logging, initargs=(cli_log_level(),)
            ) as pool:
                for part in pool.imap(run_job, planned):
                    merged.absorb(part)
            # Jobs read partitions apart, so their ids rarely meet: the files are taken over
            # as they are, and rewritten (merged) only when some id is in two of them.
            merged.absorb_exported([f for job in planned for f in sorted(job.ids.iterdir())])
    except BaseException:
        merged.close()
        raise
    return merged
