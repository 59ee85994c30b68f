"""What bounds the HTIR feeder over the broker: its traces' produce against its assembly.

    flock /work/bench.lock .venv-bench/bin/python benchmarks/bench_htir_bound.py --rounds 5

The throughput benchmark's ceiling, log sink and feeder rows (``bench_consumers.py``: the
same N v3 messages, each row in its own spawned process and fresh group, rounds in rotated
order, ratios within a round) beside two rows that split the feeder's cost:

* ``ceiling + producing``: the ceiling loop (consume + the native decode) that also
  produces the feeder's traces, made beforehand in process from as many simulated events,
  one every N/traces messages, with the feeder's producer (``KafkaProducer.reliable``) and a
  delivery report each: the produce, its librdkafka threads and the broker's write, with no
  assembly. No feeder can beat it on these cores.
* ``htir feeder, storing nothing``: the feeder whose producer stores every trace at once
  without a broker (``tests/support/acking_producer.py``): its assembly, with no produce.

Besides events/s and the ratios: the process's CPU per event, the service thread's own
(``/proc``: the feeder's Python and the native step), and the broker JVM's CPU per event
over the row's process. Needs the local broker's jars (``make jars``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import bench_consumers as bc
import profile_consumers as pc

from tests.support.acking_producer import AcknowledgingProducer
from turnaudit.commands.simulate import publish_simulation
from turnaudit.consumers.log_sink import service_logging
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.producer import DeliveredMessage, DeliveryError, KafkaProducer
from turnaudit.local_broker import LocalBrokerSettings, LocalKafkaBroker, free_ports
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

CEILING, PRODUCING, LOG_SINK, FEEDER = (
    bc.CEILING,
    "ceiling + producing",
    "log sink",
    "htir feeder",
)
STORING_NOTHING = "htir feeder, storing nothing"
ROWS = (CEILING, PRODUCING, LOG_SINK, FEEDER, STORING_NOTHING)
Trace = tuple[bytes | None, bytes | None]  # (key, value) as the feeder produced it
TICK = os.sysconf("SC_CLK_TCK")


def captured_traces(events: int) -> list[Trace]:
    """The traces the feeder publishes for ``events`` simulated v3 events, in process."""
    sent: list[Trace] = []

    class Capturing(AcknowledgingProducer):
        def produce(
            self, topic: str, value: bytes | None, key: bytes | None = None, **kw: Any
        ) -> None:
            sent.append((key, value))
            super().produce(topic, value, key, **kw)

    original = pc.AcknowledgingProducer
    pc.AcknowledgingProducer = Capturing  # type: ignore[misc]  # the feeder row's producer
    try:
        with tempfile.TemporaryDirectory() as tmp, service_logging("WARNING"):
            pc.stage("htir feeder", pc.messages(events, (3,)), tmp)()
    finally:
        pc.AcknowledgingProducer = original  # type: ignore[misc]  # put back
    return sent


def cpu_of(pid: int | str, tid: str | None = None) -> float:
    """Seconds of CPU (user + system) of a process, or of one of its threads."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat"
    with open(path, encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def ceiling_producing(
    settings: KafkaSettings, end: dict[int, int], traces: list[Trace]
) -> bc.Measurement:
    """The ceiling loop producing ``traces`` evenly over the messages, each with a report."""
    producer = KafkaProducer.reliable(settings)
    reports: list[DeliveryError | None] = []
    decode = bc.TurnEventDeserializer(bc.shipped_catalog())
    assigned_at: list[tuple[float, float]] = []
    consumer = bc._bench_consumer(settings, "producing", assigned_at)
    total, topic = sum(end.values()), settings.topics.htir_traces
    every = total / len(traces)
    seen = produced = 0

    def report(err: DeliveryError | None, _msg: DeliveredMessage) -> None:
        reports.append(err)

    while seen < total:
        for msg in consumer.consume(500, 0.05):
            if msg.error() is None:
                decode(msg.value())
                seen += 1
                while produced < len(traces) and (produced + 1) * every <= seen:
                    key, value = traces[produced]
                    producer.produce(topic, value, key, on_delivery=report, serve_reports=False)
                    produced += 1
        producer.poll(0)
    elapsed = time.perf_counter() - assigned_at[0][0]
    cpu = time.process_time() - assigned_at[0][1]
    consumer.close()
    producer.flush(30)
    return total / elapsed, 1e6 * cpu / total


SERVICE_CPU: list[float] = []  # the service thread's CPU per event, where a row has one


def service_rate(
    service: bc.ConsumerService, end: dict[int, int], *, handed: bool = False
) -> bc.Measurement:
    """``bench_consumers.service_rate`` that also reads the service thread's own CPU."""
    tid: list[str] = []

    def run() -> None:
        tid.append(str(threading.get_native_id()))
        service.run()

    thread = threading.Thread(target=run)
    thread.start()
    service.assigned_once.wait()
    started, cpu_at, own_at = time.perf_counter(), time.process_time(), cpu_of(os.getpid(), tid[0])
    positions = service.handed_positions if handed else service.positions
    while not bc.caught_up(positions, end):
        time.sleep(0.002)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_at
    total = sum(end.values())
    SERVICE_CPU.append(1e6 * (cpu_of(os.getpid(), tid[0]) - own_at) / total)
    service.stop()
    thread.join()
    return total / elapsed, 1e6 * cpu / total


def _row_child(row: str, args: tuple[Any, ...], traces: list[Trace], out: Any) -> None:
    bc.service_rate = service_rate  # type: ignore[assignment]  # this child's rows read their thread
    bootstrap, prefix, end, workdir = args
    if row == PRODUCING:
        settings = KafkaSettings(
            bootstrap_servers=bootstrap, topics=TopicNames(prefix), partitions=3
        )
        out.put((*ceiling_producing(settings, end, traces), None))
        return
    if row == STORING_NOTHING:
        feeder_init = bc.HtirFeederSink.__init__

        def storing_nothing(self: bc.HtirFeederSink, *a: Any, **kw: Any) -> None:
            feeder_init(self, *a, **{**kw, "producer": AcknowledgingProducer()})

        bc.HtirFeederSink.__init__ = storing_nothing  # type: ignore[method-assign]  # this child's
        row = FEEDER
    rate, us = bc.measure_row(row, bootstrap, prefix, end, workdir)
    out.put((rate, us, SERVICE_CPU[-1] if SERVICE_CPU else None))


def in_child(
    row: str, args: tuple[Any, ...], traces: list[Trace], broker_pid: int
) -> tuple[float, float, float | None, float]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    broker_at = cpu_of(broker_pid)
    child = ctx.Process(
        target=_row_child, args=(row, args, traces if row == PRODUCING else [], out)
    )
    child.start()
    rate, us, own = out.get(timeout=900)
    child.join()
    broker = 1e6 * (cpu_of(broker_pid) - broker_at) / sum(args[2].values())
    return rate, us, own, broker


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    traces = captured_traces(args.events)
    size = sum(len(v or b"") for _, v in traces)
    print(
        f"{len(traces)} traces for {args.events} events, {size:,} bytes "
        f"({size / len(traces):,.0f} a trace)"
    )
    with tempfile.TemporaryDirectory(prefix="bench-htir-bound-") as tmp, service_logging("WARNING"):
        workdir = Path(tmp)
        ports = free_ports(2)
        broker = LocalKafkaBroker(
            LocalBrokerSettings(
                home=workdir / "kafka",
                jars_dir=bc.PROJECT / "deploy/kafka/target/jars",
                pom=bc.PROJECT / "deploy/kafka/pom.xml",
                port=ports[0],
                controller_port=ports[1],
                heap="768m",
            )
        )
        bootstrap = broker.start().bootstrap_servers
        try:
            broker_pid = broker.status().pid
            assert broker_pid is not None
            settings = bc.fresh_settings(bootstrap)
            publish_simulation(
                settings,
                argparse.Namespace(
                    events=args.events,
                    seed=1,
                    schema_versions=(3,),
                    sessions=200,
                    rate=0,
                    spool_dir=workdir / "spool",
                    close_timeout=30.0,
                ),
            )
            end = end_offsets(settings, settings.topics.turn_events)
            row_args = (bootstrap, settings.topics.prefix, end, str(workdir))
            got: dict[str, dict[str, list[float]]] = {
                row: {"rate": [], "cpu": [], "own": [], "broker": [], "ratio": []} for row in ROWS
            }
            for r in range(args.rounds):
                order = ROWS[r % len(ROWS) :] + ROWS[: r % len(ROWS)]
                this = {row: in_child(row, row_args, traces, broker_pid) for row in order}
                for row, (rate, us, own, broker_us) in this.items():
                    got[row]["rate"].append(rate)
                    got[row]["cpu"].append(us)
                    got[row]["broker"].append(broker_us)
                    got[row]["ratio"].append(rate / this[CEILING][0])
                    if own is not None:
                        got[row]["own"].append(own)
                print(
                    f"  round {r + 1}: "
                    + ", ".join(f"{row} {this[row][0]:,.0f}/s" for row in order),
                    flush=True,
                )
        finally:
            broker.stop()
    print(
        f"\n  {'row':<30} {'events/s':>10}  {'x ceiling, median (min-max)':>28}  "
        f"{'CPU us/event':>12}  {'service thread':>14}  {'broker JVM':>10}"
    )
    for row in ROWS:
        g = got[row]
        own = f"{statistics.median(g['own']):.1f}" if g["own"] else "-"
        print(
            f"  {row:<30} {statistics.median(g['rate']):>10,.0f}  {spread(g['ratio']):>28}  "
            f"{statistics.median(g['cpu']):>12.1f}  {own:>14}  "
            f"{statistics.median(g['broker']):>10.1f}"
        )


if __name__ == "__main__":
    sys.exit(main())
