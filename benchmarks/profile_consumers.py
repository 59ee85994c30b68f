"""Per-event cost of the consumer services' path, in process, no broker (µs/event).

    PYTHONPATH=. .venv/bin/python benchmarks/profile_consumers.py  # the table
    PYTHONPATH=. .venv/bin/python benchmarks/profile_consumers.py --cprofile metrics  # one row

The same simulated events the throughput benchmark publishes (schema v1 and v2,
200 sessions; ``--versions 3`` for v3 with turn identity), encoded once, then
handed in 500-message batches to each stage: plain fastavro decode (the bare
loop's), the project's decoder, the stream tracker and the contract checks
each alone (on records decoded beforehand), the validation (decode, contracts,
stream tracking), and each service's whole batch path (``ConsumerService`` batch
handling with its sink), with messages standing in for confluent-kafka's. The
metrics service, the log sink, the HTIR feeder and the OTel sink (its requests
dropped, no collector) twice: as they run (their ordinary turns
by the native batch step, ``ConsumeStep``) and record by record (the sink behind one that
only takes turns). The feeder produces its traces into a producer that acknowledges each
at once (no broker).
Rounds in rotated order; median (min-max) CPU µs per event (the thread's
own clock, so other load on the machine counts less); ratios to the plain
decode of the same round. Nothing here touches the network: it isolates the
Python cost the throughput benchmark measures together with librdkafka's.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable

from bench_consumers import NoSink  # the same no-sink row as the throughput benchmark
from fastavro import schemaless_reader
from prometheus_client import CollectorRegistry

from tests.support.acking_producer import AcknowledgingProducer
from turnaudit.consumers.htir_feeder import HtirFeederSink
from turnaudit.consumers.log_sink import LogSink, log_sink_service, service_logging
from turnaudit.consumers.metrics import VerdictMetricsSink, verdict_metrics_service
from turnaudit.consumers.otel_sink import OtelSink
from turnaudit.consumers.runtime import ConsumedTurn, ConsumerService, Sink
from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics
from turnaudit.consumers.runtime.gc_sizing import batch_sized_gc
from turnaudit.consumers.runtime.otel_settings import OtlpSettings
from turnaudit.consumers.runtime.settings import LogSinkSettings, ServiceName, ServiceSettings
from turnaudit.consumers.runtime.validation import TurnEventValidation
from turnaudit.contracts import check_event, check_key
from turnaudit.identity import StreamTracker, TurnStamper
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

TOPIC = "profile.turn-events"
BATCH = 500


class FakeMessage:
    """What the runtime reads of a consumed message."""

    __slots__ = ("_key", "_offset", "_partition", "_value")

    def __init__(self, value: bytes, key: bytes, partition: int, offset: int) -> None:
        self._value, self._key, self._partition, self._offset = value, key, partition, offset

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes:
        return self._key

    def headers(self) -> None:
        return None


def messages(count: int, versions: tuple[int, ...]) -> list[FakeMessage]:
    catalog = shipped_catalog()
    serializers = {s.version: SingleObjectSerializer(s) for s in catalog.versions}
    stamper = TurnStamper()
    sim = TurnRuntimeSimulator(1, schema_versions=versions, concurrent_sessions=200)
    out: list[FakeMessage] = []
    offsets = [0, 0, 0]
    for event in sim.events(count):
        stamper.stamp(event)
        value = serializers[event["verdicts"]["schema_version"]](event)
        stamper.commit(event, value)
        key = event["session_id"].encode()
        partition = hash(key) % 3
        out.append(FakeMessage(value, key, partition, offsets[partition]))
        offsets[partition] += 1
    return out


def _settings(tmp: str, service: ServiceName) -> ServiceSettings:
    from pathlib import Path  # noqa: PLC0415

    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1", topics=TopicNames("profile."))
    return ServiceSettings(
        service=service,
        kafka=kafka,
        group_id="profile",
        log=LogSinkSettings(file=Path(tmp) / "turns.jsonl"),
    )


class OneByOne(Sink):
    """A sink handed every turn through ``take`` (no native tallies): the service's
    record-by-record path, for the before/after row."""

    def __init__(self, sink: Sink) -> None:
        self.take = sink.take  # type: ignore[method-assign]  # the inner sink's, no extra call
        self.flush = sink.flush  # type: ignore[method-assign]  # likewise
        self.tick = sink.tick  # type: ignore[method-assign]  # likewise (the feeder's expiry)
        self.held_offsets = sink.held_offsets  # type: ignore[method-assign]  # likewise

    def take(self, turn: ConsumedTurn) -> None:
        raise AssertionError("replaced in __init__")

    def flush(self) -> None:
        raise AssertionError("replaced in __init__")


class NoCollector:
    """An OTLP transport that drops every request: the OTel sink's own cost."""

    def send(self, request: bytes) -> None:
        return

    def close(self) -> None:
        return


def _service(row: str, tmp: str) -> ConsumerService:  # noqa: PLR0911 - one return per row
    registry = CollectorRegistry()
    one_by_one = row.endswith(", record by record")
    if row.startswith("verdict metrics, "):
        settings = _settings(tmp, ServiceName.VERDICT_METRICS)
        sink = OneByOne(VerdictMetricsSink(settings.metrics, registry))
        return ConsumerService(settings, sink, registry=registry, serve_http=False)
    if row.startswith("log sink, "):
        settings = _settings(tmp, ServiceName.LOG_SINK)
        sink = OneByOne(LogSink(settings.log, registry))
        return ConsumerService(settings, sink, registry=registry, serve_http=False)
    if row.startswith("htir feeder"):
        settings = _settings(tmp, ServiceName.HTIR_FEEDER)
        feeder = HtirFeederSink(settings.kafka, registry=registry, producer=AcknowledgingProducer())
        served: Sink = OneByOne(feeder) if one_by_one else feeder
        return ConsumerService(settings, served, registry=registry, serve_http=False)
    if row.startswith("otel sink"):
        settings = _settings(tmp, ServiceName.OTEL_SINK)
        otel = OtelSink(OtlpSettings(), registry, transport=NoCollector())
        served = OneByOne(otel) if one_by_one else otel
        return ConsumerService(settings, served, registry=registry, serve_http=False)
    if row == "runtime, no sink":
        return ConsumerService(
            _settings(tmp, ServiceName.LOG_SINK), NoSink(), registry=registry, serve_http=False
        )
    if row == "log sink":
        return log_sink_service(
            _settings(tmp, ServiceName.LOG_SINK), registry=registry, serve_http=False
        )
    return verdict_metrics_service(
        _settings(tmp, ServiceName.VERDICT_METRICS), registry=registry, serve_http=False
    )


def stage(row: str, msgs: list[FakeMessage], tmp: str) -> Callable[[], None]:
    """A callable that runs the whole message list through one stage, fresh state."""
    batches = [msgs[i : i + BATCH] for i in range(0, len(msgs), BATCH)]
    if row == "plain fastavro decode":
        readers = {s.fingerprint: s.parsed for s in shipped_catalog().versions}

        def plain() -> None:
            for m in msgs:
                payload = m.value()
                schemaless_reader(io.BytesIO(payload[10:]), readers[payload[2:10]], None)

        return plain
    if row == "project decoder":
        decode = TurnEventDeserializer(shipped_catalog())

        def project() -> None:
            for m in msgs:
                decode(m.value())

        return project
    if row in ("stream tracker alone", "contracts 1-4 and key alone"):
        # On records decoded beforehand (outside the clock): the piece by itself.
        decode = TurnEventDeserializer(shipped_catalog())
        decoded = [(m, decode(m.value()).event) for m in msgs]
        if row == "stream tracker alone":

            def track() -> None:
                observe = StreamTracker(max_streams=100_000, max_event_ids=500_000).observe
                for m, event in decoded:
                    observe(event, m.value(), partition=m.partition(), offset=m.offset())

            return track

        def contracts() -> None:
            for m, event in decoded:
                check_key(m.key(), event)
                check_event(event)

        return contracts
    if row == "validation":
        validation = TurnEventValidation(
            TurnEventDeserializer(shipped_catalog()), ConsumerMetrics(CollectorRegistry()), 100_000
        )

        def validate() -> None:
            examine = validation.examine
            for m in msgs:
                examine(m.value(), m.key(), TOPIC, m.partition(), m.offset())

        return validate
    service = _service(row, tmp)

    def serve() -> None:
        batch_sized_gc.enter(BATCH)  # as ``ConsumerService.run`` does
        try:
            for batch in batches:
                service._handle_batch(batch)  # type: ignore[arg-type]  # duck-typed messages
        finally:
            batch_sized_gc.exit()

    return serve


ROWS = (
    "plain fastavro decode",
    "project decoder",
    "stream tracker alone",
    "contracts 1-4 and key alone",
    "validation",
    "runtime, no sink",
    "verdict metrics, record by record",
    "verdict metrics",
    "log sink, record by record",
    "log sink",
    "htir feeder, record by record",
    "htir feeder",
    "otel sink, record by record",
    "otel sink",
)


def main() -> None:
    import tempfile  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--versions", default="1,2")
    parser.add_argument("--cprofile", choices=ROWS, help="profile one row instead")
    args = parser.parse_args()
    versions = tuple(int(v) for v in args.versions.split(","))
    msgs = messages(args.events, versions)
    with tempfile.TemporaryDirectory() as tmp, service_logging("WARNING"):
        if args.cprofile:
            run = stage(args.cprofile, msgs, tmp)
            profiler = cProfile.Profile()
            profiler.runcall(run)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
            return
        times: dict[str, list[float]] = {row: [] for row in ROWS}
        ratios: dict[str, list[float]] = {row: [] for row in ROWS}
        for r in range(args.rounds):
            order = ROWS[r % len(ROWS) :] + ROWS[: r % len(ROWS)]
            this: dict[str, float] = {}
            for row in order:
                run = stage(row, msgs, tmp)  # fresh state: every event new to the tracker
                # This thread's CPU time: other processes on the machine do not count.
                started = time.thread_time()
                run()
                this[row] = 1e6 * (time.thread_time() - started) / len(msgs)
                times[row].append(this[row])
            for row in ROWS:
                ratios[row].append(this[row] / this[ROWS[0]])
        print(f"{len(msgs)} events (schema v{args.versions}), {args.rounds} rounds, rotated")
        print(f"  {'stage':<28} {'µs/event median (min-max)':>24}  {'x plain decode':>20}")
        for row in ROWS:
            t, q = times[row], ratios[row]
            print(
                f"  {row:<28} {statistics.median(t):>6.1f} ({min(t):>5.1f}-{max(t):>5.1f})"
                f"          {statistics.median(q):>5.2f} ({min(q):.2f}-{max(q):.2f})"
            )


if __name__ == "__main__":
    main()
