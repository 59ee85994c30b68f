"""The TurnEvent body encoder in-process (no broker): fastavro's ``schemaless_writer``
against the native encoder, on the same simulated events of the latest version.

Each event is stamped as ``publish()`` stamps it (event id, sequence, producer
id, chain hash), so strings have their real lengths. Per round each encoder
writes every event once (header included, as the serializers do); the order of
the two rotates every round. Printed: µs per event, min/median/max over rounds,
and the ratio of medians. Every native message is checked against fastavro's
bytes before timing.

    .venv/bin/python benchmarks/bench_encode.py [--events 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import fastavro

from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization import native
from turnaudit.serialization.framing import single_object_header
from turnaudit.serialization.schemas import shipped_catalog


def stamped_events(n: int, version: int) -> list[dict[str, Any]]:
    producer = str(uuid.uuid4())
    prev = "0" * 64
    events = []
    for i, simulated in enumerate(TurnRuntimeSimulator(7, schema_versions=(version,)).events(n)):
        event = {
            **simulated,
            "event_id": f"{producer[:8]}-{i:012d}",
            "sequence": i,
            "producer_id": producer,
            "prev_hash": prev,
        }
        prev = hashlib.sha256(repr(i).encode()).hexdigest()
        events.append(event)
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    schema = shipped_catalog().latest
    header = single_object_header(schema.fingerprint)
    parsed = schema.parsed
    encoder = native.compile_encoder(schema.schema_json)
    events = stamped_events(args.events, schema.version)

    def by_fastavro(event: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        buf.write(header)
        fastavro.schemaless_writer(buf, parsed, event)
        return buf.getvalue()

    def by_native(event: dict[str, Any]) -> bytes:
        out: bytes = encoder(event, header)
        return out

    for event in events:
        if by_native(event) != by_fastavro(event):
            raise SystemExit(f"the native encoder differs from fastavro on {event['event_id']}")

    encoders: list[tuple[str, Callable[[dict[str, Any]], bytes]]] = [
        ("fastavro schemaless_writer", by_fastavro),
        ("native Encoder", by_native),
    ]
    per_event: dict[str, list[float]] = {name: [] for name, _ in encoders}
    for r in range(args.rounds):
        for name, encode in encoders[r % 2 :] + encoders[: r % 2]:
            start = time.perf_counter()
            for event in events:
                encode(event)
            per_event[name].append((time.perf_counter() - start) / len(events) * 1e6)

    print(
        f"TurnEvent v{schema.version}, {args.events} events, {args.rounds} rounds (order rotated)"
    )
    for name, samples in per_event.items():
        print(
            f"  {name:28s} µs/event  min {min(samples):6.2f}  "
            f"median {statistics.median(samples):6.2f}  max {max(samples):6.2f}"
        )
    medians = [statistics.median(per_event[name]) for name, _ in encoders]
    print(f"  fastavro / native (medians): {medians[0] / medians[1]:.1f}x")


if __name__ == "__main__":
    main()
