"""Signed checkpoints' cost on ``publish()``: unsigned against signed publishers, the
same records, order rotated every round.

Each round publishes the same batch through a fresh ``TurnEventPublisher`` of each kind:
``unsigned`` (no key: no checkpoints), ``signed`` at the defaults (a checkpoint every 5 s
or 10,000 turns) and ``signed, aggressive`` (every 0.05 s or 500 turns: far more
checkpoints than a runtime would write). Timed: every ``publish()`` call on the caller's
thread (signing happens on the heads thread: ``publish()`` only counts the turn and, at
the count, wakes that thread). Reported per kind: the per-event cost (median over rounds
of each round's mean), the p99.9 of single calls, the checkpoints written, and the ratio
of medians against unsigned.

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/bench_checkpoints.py \
        [--events 10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import benchmark_cluster
from bench_publish import quiet_logs

from turnaudit.checkpoints import SigningKey
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import CheckpointSettings

KEY = SigningKey(Ed25519PrivateKey.generate(), "bench")
KINDS: dict[str, CheckpointSettings] = {
    "unsigned": CheckpointSettings(None),
    "signed (5 s / 10,000 turns)": CheckpointSettings(KEY),
    "signed, aggressive (0.05 s / 500 turns)": CheckpointSettings(
        KEY, interval_s=0.05, max_turns=500
    ),
}


def records(n: int) -> list[dict[str, Any]]:
    """v4 turns (chained: v1/v2 streams carry no chain and are never checkpointed)."""
    sim = TurnRuntimeSimulator(1, schema_versions=(4,), concurrent_sessions=50)
    return [dict(event) for event in sim.events(n)]


def one_round(
    settings: KafkaSettings,
    batch: list[dict[str, Any]],
    spool: Path,
    checkpoints: CheckpointSettings,
) -> tuple[float, list[float], int]:
    publisher = TurnEventPublisher(
        settings, spool_dir=spool, registry=CollectorRegistry(), checkpoints=checkpoints
    )
    gc.collect()
    gc.freeze()  # the copied batch is not publish()'s garbage
    timings = []
    try:
        started = time.perf_counter()
        for record in batch:
            t = time.perf_counter()
            publisher.publish(record)
            timings.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - started
    finally:
        gc.unfreeze()
    report = publisher.close(timeout=60)
    assert report.ok, report
    written = publisher.checkpointer.written if publisher.checkpointer is not None else 0
    timings.sort()
    return elapsed / len(batch), timings, written


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    quiet_logs()
    source = records(args.events)
    means: dict[str, list[float]] = {k: [] for k in KINDS}
    tails: dict[str, list[float]] = {k: [] for k in KINDS}
    written: dict[str, list[int]] = {k: [] for k in KINDS}
    with tempfile.TemporaryDirectory() as tmp_name, benchmark_cluster() as (settings, _):
        tmp = Path(tmp_name)
        for name, kind in KINDS.items():  # warm-up of each
            one_round(settings, copy.deepcopy(source[:1000]), tmp / f"warm-{len(name)}", kind)
        names = list(KINDS)
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]  # rotated
            for name in order:
                mean, timings, count = one_round(
                    settings, copy.deepcopy(source), tmp / f"r{r}-{names.index(name)}", KINDS[name]
                )
                means[name].append(mean)
                tails[name].append(timings[min(len(timings) - 1, int(0.999 * len(timings)))])
                written[name].append(count)
    base = statistics.median(means["unsigned"])
    print(f"{args.events} records per round, {args.rounds} rounds, order rotated")
    for name in names:
        m = statistics.median(means[name])
        print(
            f"  {name:42s} publish() {m * 1e6:6.1f} us/event (min {min(means[name]) * 1e6:.1f}"
            f", max {max(means[name]) * 1e6:.1f}); p99.9 of calls median "
            f"{statistics.median(tails[name]) * 1e3:.3f} ms; checkpoints per round "
            f"{statistics.median(written[name]):g}; ratio {m / base:.3f}x"
        )


if __name__ == "__main__":
    main()
