"""Avro decoders on the services' own messages: what one process can decode (µs/event).

    .venv/bin/python benchmarks/bench_decoders.py                 # schema v3 turns
    .venv/bin/python benchmarks/bench_decoders.py --versions 1 2  # the throughput topic's mix

The decode is the floor of every service's per-event cost: ``bench_consumers.py``
measures the services against a bare loop that only decodes, with plain fastavro.
This compares, on the same simulated messages, in process and without a broker:

* plain fastavro ``schemaless_reader`` (the bare loop's decode);
* the project's ``TurnEventDeserializer`` (either framing, any version, the
  trailing-bytes and timestamp-range checks), as shipped: the native decoder
  (``native/``, Rust) for every shipped version;
* the same deserializer on its fastavro path (every plan's native decoder
  removed): the project's decoder before the native one, and its reference;
* cavro (``pip install -e '.[bench]'``), a Cython Avro codec, decoding records
  to dicts, when it is installed: the one faster decoder for Python found.

Rounds in rotated order; median (min-max) CPU µs per event (the thread's own
clock) and ratios to plain fastavro of the same round. Before timing, every
message is decoded by each decoder and the records compared with fastavro's;
and each decoder is given one message with three bytes appended, to show
whether it notices.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable
from typing import Any

from fastavro import schemaless_reader
from profile_consumers import FakeMessage, messages

from turnaudit.errors import SerializationError
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer

Decode = Callable[[bytes], Any]


def plain_fastavro() -> Decode:
    readers = {s.fingerprint: s.parsed for s in shipped_catalog().versions}
    return lambda payload: schemaless_reader(io.BytesIO(payload[10:]), readers[payload[2:10]], None)


def project_decoder() -> Decode:
    decode = TurnEventDeserializer(shipped_catalog())
    if decode.stats().fastavro_schemas:
        raise RuntimeError("a shipped schema is not compiled by the native decoder")
    return lambda payload: decode(payload).event


def project_fastavro_path() -> Decode:
    decode = TurnEventDeserializer(shipped_catalog())
    for plan in decode._by_fp.values():
        plan.native = None  # the fastavro path: the project's decoder before the native one
    return lambda payload: decode(payload).event


def cavro_decoder() -> Decode | None:
    try:
        # Imported here: cavro comes from the `bench` extra, only for this comparison.
        import cavro  # type: ignore[import-not-found]  # noqa: PLC0415
    except ImportError:
        return None
    options = cavro.DEFAULT_OPTIONS.replace(record_decodes_to_dict=True)
    # The shipped .avsc files, as the bare loop reads them (timestamps as datetimes).
    schemas = {
        s.fingerprint: cavro.Schema(s.schema_json, options=options)
        for s in shipped_catalog().versions
    }
    return lambda payload: schemas[payload[2:10]].binary_decode(payload[10:])


def agreement(decoders: dict[str, Decode], msgs: list[FakeMessage]) -> None:
    reference = decoders["plain fastavro"]
    # The project's records are not compared: occurred_at is epoch ms there, and
    # fields a version lacks hold their defaults.
    for name, decode in decoders.items():
        if name.startswith("project"):
            continue
        differ = sum(decode(m.value()) != reference(m.value()) for m in msgs)
        print(f"  {name:<16} records equal to fastavro's: {len(msgs) - differ:,} of {len(msgs):,}")
    project, before = decoders["project decoder"], decoders["project, fastavro"]
    differ = sum(project(m.value()) != before(m.value()) for m in msgs)
    print(
        f"  {'project decoder':<16} records equal to its fastavro path's: "
        f"{len(msgs) - differ:,} of {len(msgs):,}"
    )
    padded = msgs[0].value() + b"\x00\x00\x00"
    for name, decode in decoders.items():
        try:
            decode(padded)
            verdict = "accepted (the three bytes go unnoticed)"
        except (SerializationError, ValueError, EOFError) as exc:
            verdict = f"refused: {exc}"[:90]
        print(f"  {name:<16} a message with 3 trailing bytes: {verdict}")


def timed(decode: Decode, msgs: list[FakeMessage]) -> float:
    payloads = [m.value() for m in msgs]
    started = time.thread_time()
    for payload in payloads:
        decode(payload)
    return 1e6 * (time.thread_time() - started) / len(payloads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--versions", type=int, nargs="+", default=[3])
    args = parser.parse_args()
    msgs = messages(args.events, tuple(args.versions))
    decoders: dict[str, Decode] = {
        "plain fastavro": plain_fastavro(),
        "project decoder": project_decoder(),
        "project, fastavro": project_fastavro_path(),
    }
    cavro = cavro_decoder()
    if cavro is None:
        print("cavro is not installed (pip install -e '.[bench]'): its row is left out")
    else:
        decoders["cavro"] = cavro
    print(
        f"{len(msgs):,} messages (schema v{', v'.join(map(str, args.versions))}), "
        f"{args.rounds} rounds, rotated"
    )
    agreement(decoders, msgs)
    names = list(decoders)
    costs: dict[str, list[float]] = {n: [] for n in names}
    ratios: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        this_round = {n: timed(decoders[n], msgs) for n in order}
        for n in names:
            costs[n].append(this_round[n])
            ratios[n].append(this_round["plain fastavro"] / this_round[n])
    print(f"  {'decoder':<16} {'µs/event median (min-max)':<30} events/s vs plain fastavro")
    for n in names:
        c, q = costs[n], ratios[n]
        print(
            f"  {n:<16} {statistics.median(c):6.1f} ({min(c):5.1f}-{max(c):5.1f})"
            f"{'':<13} {statistics.median(q):.2f}x ({min(q):.2f}-{max(q):.2f})"
        )


if __name__ == "__main__":
    main()
