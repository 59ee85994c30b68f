"""What sealing adds to publish(): the same records published with and without a surface
keyring, in the same run, rounds alternated (docs/privacy.md; goal: under 10 µs per turn
at the default surface sizes).

1. publish() of the simulator's v5 turns (their default surface sizes) by a publisher
   without ``TURNAUDIT_SURFACE_KEYRING`` and one with it, order swapped every round;
   µs per event min/median/max, the difference and the ratio of the medians, and what
   sealing added within each round (min/median/max over the rounds). Each
   sealing round starts a new publisher, so it also makes every session's data key
   (one AES-GCM wrap and one produce to <prefix>surface-keys per session).
2. The seal step alone (``SessionKeys.seal`` on a stamped copy, data keys made), per turn,
   and the same for surfaces 10x and 100x the default size.
3. A consumer that opens no surface pays nothing for sealing: the verdict metrics
   service's sink (decode with the project's deserializer, ``take``, one ``flush`` per
   500) over the same turns encoded sealed and unsealed, in process, rounds rotated;
   µs per turn min/median/max and the ratio sealed/unsealed within each round.

    .venv/bin/python benchmarks/bench_sealing.py [--events 20000] [--rounds 6]
    .venv/bin/python benchmarks/bench_sealing.py --only consumer   # no broker needed
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import benchmark_cluster

from turnaudit.consumers.metrics import VerdictMetricsSink
from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.consumers.runtime.settings import MetricsSettings
from turnaudit.contracts import SequenceCheck, SequenceOutcome
from turnaudit.events import OutgoingTurnEvent
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.sealing import SURFACE_KEYRING_ENV, FileKeyring, SessionKeys
from turnaudit.sealing.keys import new_key_entry
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.serializers import SingleObjectSerializer
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

BATCH = 500  # turns per flush, as the runtime hands a batch to a sink


def records(n: int) -> list[dict[str, Any]]:
    return [dict(e) for e in TurnRuntimeSimulator(1, schema_versions=(5,)).events(n)]


def publish_round(
    settings: KafkaSettings, batch: list[dict[str, Any]], spool: Path
) -> tuple[float, float]:
    """(wall seconds, this thread's CPU seconds) per publish() call."""
    publisher = TurnEventPublisher(settings, spool_dir=spool, registry=CollectorRegistry())
    started, cpu = time.perf_counter(), time.thread_time()
    for record in batch:
        publisher.publish(cast(OutgoingTurnEvent, record))
    elapsed, cpu = time.perf_counter() - started, time.thread_time() - cpu
    report = publisher.close(timeout=60)
    assert report.ok, report
    return elapsed / len(batch), cpu / len(batch)


def seal_alone(batch: list[dict[str, Any]], scale: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) per seal of a stamped turn, data keys made."""
    keys = SessionKeys(
        FileKeyring({"kek-1": os.urandom(32)}, "kek-1"),
        lambda _record: None,
        clock_ms=lambda: 0,
    )
    stamped = []
    for i, record in enumerate(batch):
        event = copy.deepcopy(record)
        event.update(event_id=f"{i:032x}", sequence=i, producer_id="p")
        for name in ("surface", "walk_surface", "articulation_surface"):
            event[name] = event[name] * scale
        stamped.append(event)
    started, cpu = time.perf_counter(), time.thread_time()
    for event in stamped:
        keys.seal(cast(OutgoingTurnEvent, event))
    return (
        (time.perf_counter() - started) / len(batch),
        (time.thread_time() - cpu) / len(batch),
    )


def encoded(batch: list[dict[str, Any]], sealing: bool) -> list[bytes]:
    """The turns as the publisher writes them (stamped; sealed when ``sealing``)."""
    write = SingleObjectSerializer(shipped_catalog().version(5))
    keys = SessionKeys(
        FileKeyring({"kek-1": os.urandom(32)}, "kek-1"), lambda _record: None, clock_ms=lambda: 0
    )
    out = []
    for i, record in enumerate(batch):
        event = copy.deepcopy(record)
        event.update(event_id=f"{i:032x}", sequence=i, producer_id="p", chain_hash=b"\0" * 32)
        if sealing:
            keys.seal(cast(OutgoingTurnEvent, event))
        out.append(write(event))
    return out


def metrics_round(messages: list[bytes]) -> tuple[float, float]:
    """(wall, CPU) seconds per turn: decoded and counted by the verdict metrics sink."""
    decode = TurnEventDeserializer(shipped_catalog())
    sink = VerdictMetricsSink(MetricsSettings(), CollectorRegistry())
    check = SequenceCheck(SequenceOutcome.IN_ORDER)
    started, cpu = time.perf_counter(), time.thread_time()
    for offset, value in enumerate(messages):
        sink.take(ConsumedTurn(decode(value), check, "t.turn-events", 0, offset))
        if offset % BATCH == BATCH - 1:
            sink.flush()
    sink.flush()
    return (
        (time.perf_counter() - started) / len(messages),
        (time.thread_time() - cpu) / len(messages),
    )


def consumer_rounds(source: list[dict[str, Any]], rounds: int) -> None:
    """Part 3: the metrics sink over sealed and unsealed turns, order rotated per round."""
    plain, sealed = encoded(source, False), encoded(source, True)
    size = statistics.median(len(v) for v in plain), statistics.median(len(v) for v in sealed)
    print(f"metrics sink: {len(source)} turns a round, median bytes {size[0]} -> {size[1]} sealed")
    costs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    ratios: list[tuple[float, float]] = []
    for r in range(rounds):
        this: dict[bool, tuple[float, float]] = {}
        for sealing in (False, True) if r % 2 == 0 else (True, False):
            this[sealing] = metrics_round(sealed if sealing else plain)
            costs[sealing].append(this[sealing])
        ratios.append((this[True][0] / this[False][0], this[True][1] / this[False][1]))
    for which, label in ((0, "wall"), (1, "CPU")):
        for sealing, name in ((False, "unsealed"), (True, "sealed")):
            values = [c[which] * 1e6 for c in costs[sealing]]
            print(
                f"metrics sink over {name} turns, {label}: min {min(values):.2f}  "
                f"median {statistics.median(values):.2f}  max {max(values):.2f} µs/turn"
            )
        within = [ratio[which] for ratio in ratios]
        print(
            f"  sealed/unsealed within a round ({label}): median "
            f"{statistics.median(within):.3f} (min {min(within):.3f}, max {max(within):.3f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--only", choices=("publish", "consumer"), help="one part only")
    args = parser.parse_args()
    print(_load("at the start"))
    source = records(args.events)
    if args.only != "publish":
        consumer_rounds(source, args.rounds)
    if args.only == "consumer":
        return
    sizes = [
        len(e["surface"]) + len(e["walk_surface"]) + len(e["articulation_surface"]) for e in source
    ]
    print(f"{args.events} v5 turns; surface text per turn: median {statistics.median(sizes)} chars")
    for scale in (1, 10, 100):
        runs = [seal_alone(source[:5000], scale) for _ in range(3)]
        wall, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
        print(
            f"seal step alone, surfaces x{scale}: wall {wall * 1e6:.2f}, "
            f"CPU {cpu * 1e6:.2f} µs/turn (best of 3)"
        )
    with tempfile.TemporaryDirectory() as tmp, benchmark_cluster() as (settings, _broker):
        kek = Path(tmp) / "kek.toml"
        kek.write_text('active = "kek-1"\n[keys]\n' + new_key_entry("kek-1"))
        kek.chmod(0o600)
        plain: list[tuple[float, float]] = []
        sealed: list[tuple[float, float]] = []
        for r in range(args.rounds):
            for sealing in (False, True) if r % 2 == 0 else (True, False):
                if sealing:
                    os.environ[SURFACE_KEYRING_ENV] = str(kek)
                else:
                    os.environ.pop(SURFACE_KEYRING_ENV, None)
                spool = Path(tmp) / f"spool-{r}-{sealing}"
                cost = publish_round(settings, copy.deepcopy(source), spool)
                (sealed if sealing else plain).append(cost)
        os.environ.pop(SURFACE_KEYRING_ENV, None)
    for which, label in ((0, "wall"), (1, "caller's CPU")):
        medians = []
        for name, rounds in (("without sealing", plain), ("with sealing", sealed)):
            values = [r[which] * 1e6 for r in rounds]
            medians.append(statistics.median(values))
            print(
                f"publish() {name}, {label}: min {min(values):.1f}  "
                f"median {medians[-1]:.1f}  max {max(values):.1f} µs/event"
            )
        print(
            f"  sealing adds ({label}, difference of medians): {medians[1] - medians[0]:.1f} "
            f"µs/event; ratio {medians[1] / medians[0]:.2f}x"
        )
        # Each round publishes with and without sealing back to back: its difference is
        # what sealing added under that round's load.
        adds = [(on[which] - off[which]) * 1e6 for off, on in zip(plain, sealed, strict=True)]
        print(
            f"  sealing adds ({label}, within each round): min {min(adds):.1f}  "
            f"median {statistics.median(adds):.1f}  max {max(adds):.1f} µs/event"
        )
    print(_load("at the end"))


def _load(when: str) -> str:
    """The machine's load average: on a shared machine, what the figures were taken under."""
    one, five, fifteen = os.getloadavg()
    cores = os.cpu_count()
    return f"load average {when}: {one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min), {cores} cores"


if __name__ == "__main__":
    main()
