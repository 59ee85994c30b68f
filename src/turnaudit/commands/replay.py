"""``turnaudit replay``: a bounded range of the stream, decoded by today's reader, into a file."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from turnaudit.argparsing import add_range_arguments
from turnaudit.cluster import connect
from turnaudit.consumers.replay import MetricsReplayOutput
from turnaudit.consumers.replay_htir import htir_outputs
from turnaudit.replay import (
    ReplayCheckpoint,
    ReplayRequest,
    ReplayTarget,
    parse_partitions,
    replay,
)
from turnaudit.serialization.decoders import decoder_for
from turnaudit.settings import KafkaSettings
from turnaudit.verify import RangeSpec


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a bounded range of the stream into a file, reproducibly and resumably",
        description="Reads partitions in ascending order, each by offset, by manual assignment "
        "(no consumer group, nothing committed). The end bound is fixed at the start and "
        "recorded in OUTPUT.replay-checkpoint.json; re-running the same command after an "
        "interruption resumes from it.",
    )
    parser.add_argument("--into", required=True, metavar="KIND:PATH",
                        help="where to write: jsonl:PATH (decoded events, canonical JSON lines) or "
                        "metrics:PATH (the verdict metrics as OpenMetrics text, "
                        "job=turnaudit-replay)")
    add_range_arguments(
        parser, to_help="end of the range (exclusive; default: the high-water marks now)"
    )
    parser.add_argument("--partitions", metavar="P,…", help="only these partitions, e.g. 0,2")
    parser.add_argument("--topic", help="topic to replay (default: the configured turn events)")
    parser.add_argument("--batch-size", type=int, default=500,
                        help="events between checkpoints (default 500)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds a partition's range may take to read")
    parser.set_defaults(handler=_replay)


def _replay(args: argparse.Namespace) -> int:
    target = ReplayTarget.parse(args.into)
    request = ReplayRequest(
        RangeSpec(args.since, args.until, args.from_offsets, args.to_offsets),
        parse_partitions(args.partitions) if args.partitions else None,
        args.topic,
    )
    settings, _ = connect(KafkaSettings.from_env(), start_local=False)

    progress = Progress(terminal=sys.stderr.isatty())
    decode = decoder_for(settings)
    label = request.fingerprint(args.topic or settings.topics.turn_events, target)[:12]
    outputs = {"metrics": lambda: MetricsReplayOutput(decode, label),
               **htir_outputs(settings, decode, target)}  # htir:PATH, htir-topic:NAME
    summary = replay(settings, decode, request, target, batch_size=args.batch_size,
                     timeout=args.timeout, after_batch=progress, outputs=outputs)
    progress.close()
    print(summary.human())
    return 0


class Progress:
    """On a terminal a progress bar (events, rate, ETA); otherwise one line per batch."""

    def __init__(self, *, terminal: bool) -> None:
        self._terminal = terminal
        self._bar: tqdm | None = None
        self._shown = 0

    def __call__(self, state: ReplayCheckpoint) -> None:
        total = sum(state.end[p] - state.start[p] for p in state.end)
        if not self._terminal:
            print(f"replay: {state.events}/{total} events", file=sys.stderr, flush=True)
            return
        if self._bar is None:
            self._bar = tqdm(total=total, unit="events", file=sys.stderr, dynamic_ncols=True)
        self._bar.update(state.events - self._shown)
        self._shown = state.events

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
