"""The verdict metrics service as worker processes (``--workers``): throughput,
end-to-end delay at a steady rate, and resident memory over a long run.

    .venv/bin/python benchmarks/bench_workers.py                  # 3 rounds, 5 delay runs, 10 min
    .venv/bin/python benchmarks/bench_workers.py --duration 120   # a shorter memory run
    .venv/bin/python benchmarks/bench_workers.py --only throughput --rounds 5

1. Throughput: ``turnaudit sink metrics --workers N`` for each N of ``--workers``
   (default 1, 2 and 4), each a real process tree as the CLI builds it, in a
   fresh consumer group, on the same pre-published 12-partition topic; rounds in
   rotated order, each row's ratio to the first taken within each round;
   min/median/max (goal: 2 workers >= 1.5x one). Beside each row the service's
   CPU per event and its events/s per core of its own: the scaling to expect on
   a machine with more cores.
   Each row's service settles on a fresh, empty topic (every worker holding
   partitions, from ``/healthz``), then the same pre-encoded events are
   produced at once and the clock runs to the last one counted on
   ``/metrics``: the seconds a new group waits for its members to join are
   not throughput. Printed beside it: the CPU seconds of the service's processes
   and of the whole machine over the span, which says what the limit is when
   the broker shares the cores.
2. Delay from publish to counted at a steady rate (default 5,000 events/s, the
   publisher in its own process setting ``occurred_at`` at publish time), 5
   runs, 1 and 2 workers alternating: p50/p99 from the service's own
   ``turnaudit_turn_count_delay_seconds`` histogram, warm-up (first 3 s)
   subtracted; interpolated within a bucket like Prometheus'
   ``histogram_quantile`` (the buckets step 25 ms around the 100 ms goal),
   and the share of turns counted within 100 ms, which the buckets give exactly.
   Before them, ``--warm-up-runs`` (default 1) runs of the same kind are shown
   and not counted: on a broker just started the first run measures its JVM
   compiling (p99 of 117-563 ms on the first run, 47-57 ms on the next ones).
3. Resident memory of the supervisor and each worker (``--duration`` seconds
   at the steady rate, default 600), sampled every ``--sample`` seconds, with
   the delay over the whole run (goal: flat RSS).

The single-process services are measured by ``bench_consumers.py``; this adds
the worker processes. Uses KAFKA_BOOTSTRAP_SERVERS, or starts the project's
local broker in a temporary folder (``_broker.py``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from _broker import benchmark_cluster
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import free_port
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

TURNAUDIT = str(Path(sys.executable).parent / "turnaudit")
PARTITIONS = 12  # divides evenly among 1, 2, 3, 4 and 6 workers
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


# -- a service as the CLI runs it ---------------------------------------------------------
class Service:
    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc = proc
        self.port = port

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return 0, ""

    def samples(self) -> Samples:
        code, text = self.get("/metrics")
        if code != 200:
            return {}
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def counted(self) -> int:
        return int(sum(v for (n, _), v in self.samples().items() if n == "turnaudit_turns_total"))

    def settled(self, workers: int) -> bool:
        code, text = self.get("/healthz")
        if code != 200:
            return False
        states = json.loads(text).get("worker_states")
        if states is None:  # one process: no supervisor
            return bool(json.loads(text)["assigned_partitions"] == list(range(PARTITIONS)))
        held = sorted(p for s in states for p in s.get("assigned_partitions", []))
        return (
            len(states) == workers
            and all(s.get("assigned_partitions") for s in states)
            and held == list(range(PARTITIONS))
        )

    def pids(self) -> list[int]:
        """The supervisor and its workers (or the one process)."""
        code, text = self.get("/healthz")
        states = json.loads(text).get("worker_states", []) if code in (200, 503) else []
        return [self.proc.pid, *(s["pid"] for s in states if s.get("pid"))]


@contextmanager
def metrics_service(settings: KafkaSettings, workers: int) -> Iterator[Service]:
    port = free_port()
    assert settings.bootstrap_servers is not None
    env = {
        "PATH": os.environ.get("PATH", ""),
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TURNAUDIT_TOPIC_PREFIX": settings.topics.prefix,
        "TURNAUDIT_GROUP_ID": f"bench-workers-{uuid.uuid4().hex}",
        "TURNAUDIT_GROUP_INSTANCE_ID": "none",  # fresh groups: nothing to rejoin
        "TURNAUDIT_HTTP_HOST": "127.0.0.1",
        "TURNAUDIT_HTTP_PORT": str(port),
    }
    proc = subprocess.Popen(
        [TURNAUDIT, "--log-level", "WARNING", "sink", "metrics", "--workers", str(workers)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield Service(proc, port)
    finally:
        proc.terminate()
        proc.wait(120)


def wait_until(condition: Callable[[], bool], timeout: float = 120.0, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the service did not get there in time")
        time.sleep(step)


# -- CPU accounting -------------------------------------------------------------------------
_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def machine_busy() -> float:
    """CPU seconds spent on anything but idle, all cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / _TICKS


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def spread(values: Sequence[float], unit: str = "x") -> str:
    return f"{statistics.median(values):.2f}{unit} ({min(values):.2f}-{max(values):.2f})"


# -- 1. throughput ----------------------------------------------------------------------------
def publish_all(settings: KafkaSettings, events: int, spool: Path) -> None:
    publisher = TurnEventPublisher(settings, spool_dir=spool)
    for event in TurnRuntimeSimulator(1, schema_versions=(3,), concurrent_sessions=600).events(
        events
    ):
        publisher.publish(event)
    report = publisher.close(120)
    assert report.ok, report.describe()


def read_all(settings: KafkaSettings) -> list[tuple[int, bytes | None, bytes | None]]:
    """(partition, key, value) of every message on the turn-events topic."""
    end = end_offsets(settings, settings.topics.turn_events)
    return [
        (m.partition() or 0, m.key(), m.value())
        for m in read_range(settings, settings.topics.turn_events, None, end)
    ]


def one_row(
    bootstrap: str, messages: list[tuple[int, bytes | None, bytes | None]], workers: int
) -> tuple[float, float, float]:
    """(events/s, service cores, machine busy cores) for one row.

    The service starts on a fresh, empty topic and settles (every worker holds
    partitions) before the messages arrive: otherwise the first worker would
    read most of them alone while the group waits for the second to join.
    The same bytes are then produced as fast as librdkafka takes them (well
    under a second, in this process) and the clock runs from the first one
    to the last counted.
    """
    settings = KafkaSettings(
        bootstrap_servers=bootstrap,
        topics=TopicNames(f"bench-{uuid.uuid4().hex[:8]}."),
        partitions=PARTITIONS,
    )
    ensure_topics(settings)
    time.sleep(1.0)  # leaders settle
    total = len(messages)
    producer = Producer(
        settings.client_config(
            **{"linger.ms": 20, "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000}
        )
    )
    topic = settings.topics.turn_events
    with metrics_service(settings, workers) as service:
        wait_until(lambda: service.settled(workers), step=0.02)
        pids = service.pids()
        cpu0 = sum(process_cpu(p) for p in pids)
        busy0 = machine_busy()
        started = time.perf_counter()
        for partition, key, value in messages:
            producer.produce(topic, value, key, partition=partition)
            producer.poll(0)
        producer.flush(60)
        # Polled every 0.1 s: each scrape merges the workers' files in the
        # supervisor, which shares the cores with them.
        wait_until(lambda: service.counted() >= total, timeout=600, step=0.1)
        elapsed = time.perf_counter() - started
        cpu = sum(process_cpu(p) for p in pids) - cpu0
        busy = machine_busy() - busy0
    return total / elapsed, cpu / elapsed, busy / elapsed


def throughput(
    settings: KafkaSettings, events: int, rounds: int, work: Path, rows: Sequence[int] = (1, 2)
) -> None:
    publish_all(settings, events, work / "spool-throughput")
    messages = read_all(settings)
    assert settings.bootstrap_servers is not None
    print(
        f"\n1. throughput: {len(messages):,} events on {PARTITIONS} partitions, {rounds} rounds "
        "in rotated order, each row `turnaudit sink metrics --workers N` settled on a fresh "
        "topic, then the events"
    )
    rows = tuple(rows)
    rates: dict[int, list[float]] = {w: [] for w in rows}
    cores: dict[int, list[float]] = {w: [] for w in rows}
    busy: dict[int, list[float]] = {w: [] for w in rows}
    # Per round, each row's rate over the first row's (one worker, as given first).
    ratios: dict[int, list[float]] = {w: [] for w in rows[1:]}
    for r in range(rounds):
        order = rows[r % len(rows) :] + rows[: r % len(rows)]
        this: dict[int, float] = {}
        for workers in order:
            rate, service_cores, machine_cores = one_row(
                settings.bootstrap_servers, messages, workers
            )
            this[workers] = rate
            rates[workers].append(rate)
            cores[workers].append(service_cores)
            busy[workers].append(machine_cores)
        for workers in rows[1:]:
            ratios[workers].append(this[workers] / this[rows[0]])
        print(f"  round {r + 1}: " + ", ".join(f"{w} worker(s) {this[w]:,.0f}/s" for w in order))
    print(
        f"\n  {'workers':<8} {'events/s median (min-max)':>30}  {'service cores':>13}  "
        f"{'machine busy cores':>18}  {'CPU us/event':>12}  {'events/s per service core':>25}"
    )
    for workers in rows:
        # The service's CPU per event: what a core of its own buys, whatever the machine.
        per_event = [c / rate * 1e6 for c, rate in zip(cores[workers], rates[workers], strict=True)]
        per_core = [rate / c for c, rate in zip(cores[workers], rates[workers], strict=True)]
        print(
            f"  {workers:<8} {statistics.median(rates[workers]):>12,.0f} "
            f"({min(rates[workers]):>7,.0f}-{max(rates[workers]):>7,.0f})  "
            f"{statistics.median(cores[workers]):>13.2f}  "
            f"{statistics.median(busy[workers]):>18.2f}  "
            f"{statistics.median(per_event):>12.1f}  "
            f"{statistics.median(per_core):>14,.0f} ({min(per_core):,.0f}-{max(per_core):,.0f})"
        )
    for workers, each in ratios.items():
        goal = "   (goal >= 1.5x)" if workers == 2 and rows[0] == 1 else ""
        print(f"  {workers} workers / {rows[0]} worker(s), same round: {spread(each)}{goal}")
    print(
        f"  ({os.cpu_count()} CPUs; busy cores beyond the service's: the broker, this "
        "process producing, and whatever else runs on the machine; on more cores, expect "
        "N workers to reach N x the events/s per service core while the broker keeps up)"
    )


# -- 2. and 3. at a steady rate -------------------------------------------------------------
def publish_steadily(bootstrap: str, prefix: str, rate: int, seconds: float, spool: str) -> None:
    """Child process: publish at ``rate``/s, ``occurred_at`` = publish time."""
    settings = KafkaSettings(
        bootstrap_servers=bootstrap, topics=TopicNames(prefix), partitions=PARTITIONS
    )
    publisher = TurnEventPublisher(settings, spool_dir=Path(spool))
    sim = TurnRuntimeSimulator(3, schema_versions=(3,), concurrent_sessions=600)
    started = time.monotonic()
    for i, event in enumerate(sim.events(int(rate * seconds))):
        delay = started + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        event["occurred_at"] = int(time.time() * 1000)
        publisher.publish(event)
    publisher.close(60)


def delay_buckets(samples: Samples) -> list[tuple[float, float]]:
    """Cumulative (upper bound, count) of the delay histogram, summed over series."""
    buckets: dict[float, float] = {}
    for (name, labels), value in samples.items():
        if name == "turnaudit_turn_count_delay_seconds_bucket":
            le = float(dict(labels)["le"])
            buckets[le] = buckets.get(le, 0.0) + value
    return sorted(buckets.items())


def quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Like Prometheus' histogram_quantile: linear within the bucket."""
    total = buckets[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            share = (rank - lower_count) / max(count - lower_count, 1e-9)
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count = bound, count
    return buckets[-1][0]


def minus(
    after: list[tuple[float, float]], before: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    earlier = dict(before)
    return [(le, count - earlier.get(le, 0.0)) for le, count in after]


def within(buckets: list[tuple[float, float]], bound: float) -> float:
    total = buckets[-1][1]
    return dict(buckets).get(bound, 0.0) / total if total else 0.0


def steady_run(
    bootstrap: str,
    workers: int,
    rate: int,
    seconds: float,
    work: Path,
    *,
    sample_every: float = 0.0,
    warm_up: float = 3.0,
) -> tuple[float, float, float, int, list[tuple[float, list[float]]]]:
    """(p50 s, p99 s, share within 100 ms, events, RSS samples) for one run."""
    settings = KafkaSettings(
        bootstrap_servers=bootstrap,
        topics=TopicNames(f"bench-{uuid.uuid4().hex[:8]}."),
        partitions=PARTITIONS,
    )
    ensure_topics(settings)
    time.sleep(1.0)
    rss: list[tuple[float, list[float]]] = []
    with metrics_service(settings, workers) as service:
        wait_until(lambda: service.settled(workers))
        child = multiprocessing.get_context("spawn").Process(
            target=publish_steadily,
            args=(
                bootstrap,
                settings.topics.prefix,
                rate,
                seconds + warm_up,
                str(work / f"spool-{uuid.uuid4().hex[:6]}"),
            ),
        )
        child.start()
        started = time.monotonic()
        time.sleep(warm_up)
        before = delay_buckets(service.samples())
        next_sample = time.monotonic()
        while child.is_alive():
            child.join(0.5)
            if sample_every and time.monotonic() >= next_sample:
                pids = service.pids()
                rss.append((time.monotonic() - started, [rss_mib(p) for p in pids]))
                next_sample += sample_every
                print(
                    f"    {rss[-1][0]:>6.0f} s  RSS MiB: "
                    + "  ".join(f"{m:.1f}" for m in rss[-1][1]),
                    flush=True,
                )
        end = sum(end_offsets(settings, settings.topics.turn_events).values())
        try:
            wait_until(lambda: service.counted() >= end, timeout=max(300.0, seconds))
        except TimeoutError:  # fell behind on a loaded machine: say so, keep the figures
            print(
                f"    still {end - service.counted():,} events behind "
                f"{max(300.0, seconds):.0f} s after the publisher stopped",
                flush=True,
            )
        buckets = minus(delay_buckets(service.samples()), before)
    return (
        quantile(0.5, buckets),
        quantile(0.99, buckets),
        within(buckets, 0.1),
        int(buckets[-1][1]),
        rss,
    )


def latency(
    bootstrap: str, rate: int, seconds: float, runs: int, work: Path, *, warm_up_runs: int = 1
) -> None:
    print(
        f"\n2. delay publish -> counted at {rate:,}/s, {seconds:.0f} s per run (after 3 s "
        f"warm-up), {runs} runs per row, rows alternating"
    )
    # A broker's JVM compiles its hot paths during its first minutes of load; on a
    # broker just started, the first runs measure that. Shown, not counted.
    for run in range(warm_up_runs):
        p50, p99, share, n, _ = steady_run(bootstrap, 1, rate, seconds, work)
        print(
            f"  broker warm-up run {run + 1} (not counted), 1 worker: p50 {p50 * 1000:.0f} ms, "
            f"p99 {p99 * 1000:.0f} ms, {share:.2%} within 100 ms ({n:,} turns)"
        )
    p99s: dict[int, list[float]] = {1: [], 2: []}
    for run in range(runs):
        for workers in (1, 2) if run % 2 == 0 else (2, 1):
            p50, p99, share, n, _ = steady_run(bootstrap, workers, rate, seconds, work)
            p99s[workers].append(p99 * 1000)
            print(
                f"  run {run + 1}, {workers} worker(s): p50 {p50 * 1000:.0f} ms, "
                f"p99 {p99 * 1000:.0f} ms, {share:.2%} within 100 ms ({n:,} turns)"
            )
    for workers, values in p99s.items():
        met = sum(v <= 100 for v in values)
        print(
            f"  {workers} worker(s): p99 {spread(values, ' ms')}; <= 100 ms in {met} of "
            f"{len(values)} runs (goal: every run)"
        )


def memory(bootstrap: str, rate: int, duration: float, every: float, work: Path) -> None:
    print(
        f"\n3. 2 workers at {rate:,}/s for {duration:.0f} s: resident memory of the "
        "supervisor, worker 0, worker 1 (MiB)"
    )
    p50, p99, share, n, rss = steady_run(bootstrap, 2, rate, duration, work, sample_every=every)
    print(
        f"  delay over the run: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
        f"{share:.2%} within 100 ms ({n:,} turns)"
    )
    settled = [s for t, s in rss if t >= 60] or [s for _, s in rss]
    if settled:
        names = ("supervisor", "worker 0", "worker 1")
        for i, name in enumerate(names):
            values = [s[i] for s in settled if len(s) > i]
            if values:
                print(
                    f"  {name}: {values[0]:.1f} -> {values[-1]:.1f} MiB after the first "
                    f"minute (min {min(values):.1f}, max {max(values):.1f})"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000, help="throughput events")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=5, help="delay runs per row")
    parser.add_argument(
        "--warm-up-runs",
        type=int,
        default=1,
        help="delay runs before the counted ones, shown and not counted (a broker "
        "just started is still compiling; 0 counts from the first)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=600.0,
        help="seconds of the memory run (the issue's figure: 600)",
    )
    parser.add_argument("--sample", type=float, default=30.0, help="RSS sample interval, s")
    parser.add_argument("--only", choices=("throughput", "latency", "memory"))
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[1, 2, 4],
        help="the throughput rows: worker processes of each (the first is the ratios' base)",
    )
    args = parser.parse_args()
    with (
        benchmark_cluster(partitions=PARTITIONS) as (settings, _),
        tempfile.TemporaryDirectory(prefix="turnaudit-bench-workers-") as tmp,
    ):
        work = Path(tmp)
        assert settings.bootstrap_servers is not None
        print(f"broker {settings.bootstrap_servers}; {os.cpu_count()} CPUs")
        time.sleep(1.0)
        if args.only in (None, "throughput"):
            throughput(settings, args.events, args.rounds, work, args.workers)
        if args.only in (None, "latency"):
            latency(
                settings.bootstrap_servers,
                args.rate,
                args.latency_seconds,
                args.runs,
                work,
                warm_up_runs=args.warm_up_runs,
            )
        if args.only in (None, "memory"):
            memory(settings.bootstrap_servers, args.rate, args.duration, args.sample, work)


if __name__ == "__main__":
    main()
