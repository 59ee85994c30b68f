"""``turnaudit replay``: a bounded range of the stream, decoded by today's reader, into an output.

The output kinds are registered in :data:`OUTPUT_KINDS`, one ``add`` per kind:
a name, a one-line help and a factory taking the
:class:`~turnaudit.replay.outputs.OutputContext` (settings, decoder, topic, target,
request, label, recorded range) and returning a
:class:`~turnaudit.replay.outputs.ReplayOutput`.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from functools import partial
from pathlib import Path

from tqdm import tqdm

from turnaudit.archive.location import open_archive
from turnaudit.argparsing import (
    add_range_arguments,
    add_time_arguments,
    event_time_options,
    positive_int,
    positive_seconds,
)
from turnaudit.cluster import connect, require_access
from turnaudit.consumers.replay import (
    LogReplayOutput,
    MetricsReplayOutput,
    SteppedMetricsReplayOutput,
    TopicReplayOutput,
    TsdbReplayOutput,
    VerifyReplayOutput,
    register_htir_outputs,
)
from turnaudit.consumers.runtime.settings import LogSinkSettings, ServiceName, ServiceSettings
from turnaudit.errors import ConfigurationError
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import RangeSpec
from turnaudit.redaction import surface_redaction
from turnaudit.replay import (
    JsonlOutput,
    OutputKinds,
    ReplayCheckpoint,
    ReplayRequest,
    ReplayTarget,
    group_id,
    parse_partitions,
    replay,
    replay_group,
)
from turnaudit.sealing.opening import turn_opener
from turnaudit.settings import KafkaSettings

DEFAULT_STEP = timedelta(minutes=1)
STEPPED_KINDS = ("metrics", "tsdb")


def _step_ms(step: timedelta) -> int:
    return round(step.total_seconds() * 1000)


OUTPUT_KINDS = OutputKinds()
OUTPUT_KINDS.add(
    "jsonl",
    "decoded events, one canonical JSON line each",
    lambda c: JsonlOutput(
        c.target.path, c.decode, c.request.surfaces, turn_opener(c.settings, c.request.surfaces)
    ),
)
OUTPUT_KINDS.add(
    "logs",
    "the log sink's turn lines, stamped with each turn's time",
    lambda c: LogReplayOutput(
        c.target.path,
        c.decode,
        (log := _log_settings()),
        start_gaps=not c.request.event_time,
        opener=turn_opener(c.settings, log.surfaces),
    ),
)
OUTPUT_KINDS.add(
    "metrics",
    "the verdict metrics as OpenMetrics text, job=turnaudit-replay "
    "(with --step: one timestamped sample per step of event time)",
    lambda c: (
        MetricsReplayOutput(c.decode, c.label, c.target.path, start_gaps=not c.request.event_time)
        if c.request.step is None
        else SteppedMetricsReplayOutput(
            c.decode,
            c.label,
            c.target.path,
            _step_ms(c.request.step),
            start_gaps=not c.request.event_time,
        )
    ),
)
OUTPUT_KINDS.add(
    "tsdb",
    "Prometheus TSDB blocks of the verdict counters in DIR, one sample "
    "per --step of event time (promtool tsdb create-blocks-from openmetrics)",
    lambda c: TsdbReplayOutput(
        c.decode,
        c.label,
        c.target.path,
        _step_ms(c.request.step or DEFAULT_STEP),
        start_gaps=not c.request.event_time,
    ),
)
OUTPUT_KINDS.add("verify", "turnaudit verify's report over the range, as JSON", VerifyReplayOutput)
OUTPUT_KINDS.add(
    "topic",
    "the messages re-published to another topic, keyed as the source",
    TopicReplayOutput,
    writes_file=False,
)
register_htir_outputs(OUTPUT_KINDS)  # htir:PATH, htir-topic:NAME


def _log_settings() -> LogSinkSettings:
    """The log sink's surface redaction as the service has it (TURNAUDIT_LOG_SURFACES, …)."""
    return ServiceSettings.from_env(ServiceName.LOG_SINK).log


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a bounded range of the stream into an output, reproducibly and resumably",
        description="Reads every partition of the range with one consumer assigned by hand (no "
        "consumer group, nothing committed); each partition by offset, partitions interleaved "
        "in blocks of 1000 messages in ascending order. The end bound is fixed at the start and "
        "recorded in the checkpoint (OUTPUT.replay-checkpoint.json); re-running the same "
        "command after an interruption resumes from it. With --group, several processes "
        "share the range through a consumer group of their own.",
    )
    parser.add_argument(
        "--into",
        required=True,
        metavar="KIND:WHERE",
        help="where to write: " + OUTPUT_KINDS.describe(),
    )
    add_range_arguments(
        parser, to_help="end of the range (exclusive; default: the high-water marks now)"
    )
    parser.add_argument(
        "--step",
        type=positive_seconds,
        metavar="SECONDS",
        help="metrics: and tsdb: outputs: one timestamped sample of every counter per STEP "
        "seconds of event time (tsdb: default 60)",
    )
    parser.add_argument("--partitions", metavar="P,…", help="only these partitions, e.g. 0,2")
    parser.add_argument("--topic", help="topic to replay (default: the configured turn events)")
    parser.add_argument(
        "--archive",
        metavar="LOCATION",
        help="an archive (turnaudit archive run; a directory or s3://bucket/prefix): a range "
        "from the log start starts at the archive's first offset, a --from/--to by broker "
        "time is looked up in the archive and the topic; the archive's segments feed the "
        "range, the topic the rest (with --group, each member its partitions'); offsets in "
        "neither fail the replay (docs/archive.md)",
    )
    add_time_arguments(parser)
    parser.add_argument(
        "--group",
        metavar="NAME",
        help="share the range with other replay processes of the same arguments: consumer "
        "group <prefix>replay.NAME (never a live service's); each process writes its own "
        "output (jsonl, logs or topic)",
    )
    parser.add_argument(
        "--members",
        type=positive_int,
        default=1,
        metavar="N",
        help="with --group: start reading once N processes have joined, so "
        "the range is split between them from the start (default 1)",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        metavar="PATH",
        help="checkpoint file (default: OUTPUT.replay-checkpoint.json; "
        "topic outputs: topic-NAME.replay-checkpoint.json here)",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=500,
        help="events handed to the output at once (default 500)",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=positive_int,
        default=50_000,
        metavar="EVENTS",
        help="events between checkpoints (default 50000)",
    )
    parser.add_argument(
        "--checkpoint-seconds",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="at most this long between checkpoints (default 5)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds without a message before an unfinished replay gives up",
    )
    parser.set_defaults(handler=_replay)


def _replay(args: argparse.Namespace) -> int:
    target = ReplayTarget.parse(args.into, OUTPUT_KINDS, args.checkpoint)
    if args.archive is not None:
        open_archive(args.archive, label="--archive")  # a wrong one: one line, before the topic
    event_time, slack = event_time_options(args)
    request = ReplayRequest(
        RangeSpec(args.since, args.until, args.from_offsets, args.to_offsets),
        parse_partitions(args.partitions) if args.partitions else None,
        args.topic,
        event_time=event_time,
        slack=slack,
        surfaces=surface_redaction(),
        step=None if args.step is None else timedelta(seconds=args.step),
        archive=args.archive,
    )
    if request.step is not None and target.kind not in STEPPED_KINDS:
        raise ConfigurationError(
            f"--step applies to {' and '.join(STEPPED_KINDS)} outputs, not {target.kind}:"
        )
    settings, _ = connect(KafkaSettings.from_env(), start_local=False)
    require_access(
        settings,
        reads=[args.topic or settings.topics.turn_events],
        groups=[group_id(settings.topics.prefix, args.group)] if args.group else [],
    )

    progress = Progress(terminal=sys.stderr.isatty())
    decode = decoder_for(settings)
    run = partial(replay_group, group=args.group, members=args.members) if args.group else replay
    summary = run(
        settings,
        decode,
        request,
        target,
        batch_size=args.batch_size,
        timeout=args.timeout,
        after_batch=progress,
        outputs=OUTPUT_KINDS,
        checkpoint_every=args.checkpoint_every,
        checkpoint_seconds=args.checkpoint_seconds,
    )
    progress.close()
    print(summary.human())
    return 0


class Progress:
    """On a terminal a progress bar (messages read, rate, ETA); otherwise one line per batch."""

    def __init__(self, *, terminal: bool) -> None:
        self._terminal = terminal
        self._bar: tqdm | None = None
        self._shown = 0

    def __call__(self, state: ReplayCheckpoint) -> None:
        total, read = state.total, state.read
        if not self._terminal:
            print(
                f"replay: {read}/{total} messages read, {state.events} events written",
                file=sys.stderr,
                flush=True,
            )
            return
        if self._bar is None:
            self._bar = tqdm(total=total, unit="msg", file=sys.stderr, dynamic_ncols=True)
        self._bar.update(read - self._shown)
        self._shown = read

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
