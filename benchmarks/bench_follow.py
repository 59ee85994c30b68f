"""``verify --follow`` (one worker, the command a user runs) over a topic: how fast it proves
the whole topic against a bare consume + decode loop over the same topic in the same run,
and its resident memory over time.

Each round starts the follower afresh (a new consumer group, its state topic deleted first,
so it proves everything again) as ``turnaudit verify --follow`` in a process of its own,
samples its RSS (``/proc/PID/status`` VmRSS) every ``--sample-s`` seconds, and stops it
once its ``turnaudit_verify_proved_offset`` gauges reach the end of every partition; the
bare loop is ``bench_verify.py``'s (one assigned consumer, large fetches, decode only), in
a process of its own. Rounds rotate which goes first. Printed per loop: turns/s
min/median/max, the ratio to the bare loop per round, and for the follower the RSS
samples (first, median, max, last) and how they moved over the second half of the run
(flat: the bound holds).

Each loop's CPU seconds (user + system, every thread, start-up included) are given per turn
too, and their ratio: on a machine shared with other work the wall-clock rates (and their
ratio) move with the neighbours' load, the CPU a turn far less.

The follower's rate is given twice: from its launch (interpreter start, the consumer group's
join, which waits out the broker's ``group.initial.rebalance.delay.ms``, 3 s by default, and
its control topics read) and from its first proved turn to the end, the rate it keeps up at.
Its ``/metrics`` page is read once a second until 95 % is proved, then ten times a second.
The bare loop's clock starts in its process, after its consumer is made and assigned.

    .venv/bin/python benchmarks/bench_follow.py --events 200000 --rounds 3
    # a large topic once (bench_verify.py --publish-only), then:
    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/bench_follow.py \\
        --prefix bench-xxxxxxxx. --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import TypedDict

from _broker import PROJECT_DIR, benchmark_cluster
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.topic_deletion import delete_topics
from turnaudit.local_broker import free_ports
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.settings import BOOTSTRAP_ENV, KafkaSettings
from turnaudit.topic_names import TopicNames

TURNAUDIT = str(Path(sys.executable).parent / "turnaudit")
BENCH_VERIFY = Path(__file__).with_name("bench_verify.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--sample-s", type=float, default=2.0)
    parser.add_argument("--prefix", help="measure an existing topic (with KAFKA_BOOTSTRAP_SERVERS)")
    args = parser.parse_args()
    if args.prefix:
        bootstrap = os.environ.get(BOOTSTRAP_ENV)
        if not bootstrap:
            parser.error(f"--prefix reads an existing topic: set {BOOTSTRAP_ENV}")
        rounds(
            KafkaSettings(bootstrap_servers=bootstrap, topics=TopicNames(args.prefix)),
            args.rounds,
            args.sample_s,
        )
        return
    with (
        benchmark_cluster(partitions=args.partitions) as (settings, _),
        tempfile.TemporaryDirectory(prefix="turnaudit-bench-follow-") as work,
    ):
        publisher = TurnEventPublisher(
            settings, spool_dir=Path(work) / "spool", registry=CollectorRegistry()
        )
        for event in TurnRuntimeSimulator(3, schema_versions=(3,)).events(args.events):
            publisher.publish(event)
        assert publisher.close().ok
        rounds(settings, args.rounds, args.sample_s)


class Run(TypedDict):
    count: int
    seconds: float
    rss_mib: list[float]
    # The process's CPU seconds (user + system, its threads included), start-up included:
    # a figure a machine shared with other work disturbs far less than the wall clock.
    cpu_s: float
    # From the first proved turn to the end (the follower's only): turns and seconds.
    steady: tuple[int, float] | None


def rounds(settings: KafkaSettings, rounds: int, sample_s: float) -> None:
    end = end_offsets(settings, settings.topics.turn_events)
    events = sum(end.values())
    loops = ("bare consume+decode", "verify --follow")
    found: dict[str, list[Run]] = {name: [] for name in loops}
    for round_no in range(rounds):
        for name in loops[round_no % 2 :] + loops[: round_no % 2]:
            result = bare(settings) if name.startswith("bare") else follow(settings, end, sample_s)
            assert result["count"] == events, (name, result["count"], events)
            found[name].append(result)
    print(f"{events} turns, {len(end)} partitions, {rounds} rounds (rotated), one process each")
    base = found[loops[0]]
    steady = [r["steady"] for r in found[loops[1]] if r["steady"] is not None]
    rows = [(name, [r["count"] / r["seconds"] for r in found[name]]) for name in loops]
    if len(steady) == len(base):
        rows.append(("  from first proof", [n / s for n, s in steady]))
    for name, rates in rows:
        ratios = [a / (b["count"] / b["seconds"]) for a, b in zip(rates, base, strict=True)]
        print(
            f"{name:20} turns/s median {statistics.median(rates):8.0f} (min {min(rates):.0f}, "
            f"max {max(rates):.0f}) | x bare per round median {statistics.median(ratios):.2f} "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
        )
    for n, r in enumerate(found[loops[1]]):
        if r["steady"]:
            turns, seconds = r["steady"]
            print(
                f"verify --follow round {n + 1}: first proof after "
                f"{r['seconds'] - seconds:.1f} s, then {turns} turns in {seconds:.1f} s"
            )
    cpu = [
        (f["cpu_s"] / f["count"] * 1e6, b["cpu_s"] / b["count"] * 1e6)
        for f, b in zip(found[loops[1]], base, strict=True)
    ]
    for n, (follower_us, bare_us) in enumerate(cpu):
        print(
            f"round {n + 1}: CPU us a turn, verify --follow {follower_us:.2f}, bare "
            f"{bare_us:.2f}: x bare by CPU {bare_us / follower_us:.2f}"
        )
    for n, r in enumerate(found[loops[1]]):
        rss = r["rss_mib"]
        half = rss[len(rss) // 2 :] or rss
        print(
            f"verify --follow round {n + 1}: RSS MiB first {rss[0]:.0f}, median "
            f"{statistics.median(rss):.0f}, max {max(rss):.0f}, last {rss[-1]:.0f}; second half "
            f"min {min(half):.0f} max {max(half):.0f} ({len(rss)} samples every {sample_s} s)"
        )


def bare(settings: KafkaSettings) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [
            sys.executable,
            str(BENCH_VERIFY),
            "--child",
            "bare consume+decode",
            "--bootstrap",
            settings.bootstrap_servers or "",
            "--prefix",
            settings.topics.prefix,
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=PROJECT_DIR,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    result = json.loads(out.stdout.splitlines()[-1])
    return Run(
        count=int(result["count"]),
        seconds=float(result["seconds"]),
        rss_mib=[],
        cpu_s=cpu_s,
        steady=None,
    )


def follow(settings: KafkaSettings, end: dict[int, int], sample_s: float) -> Run:
    """A fresh follower over the whole topic: seconds to prove it all, RSS samples."""
    delete_topics(settings, [settings.topics.verify_state])
    (port,) = free_ports(1)
    env = {
        **os.environ,
        BOOTSTRAP_ENV: settings.bootstrap_servers or "",
        "TURNAUDIT_TOPIC_PREFIX": settings.topics.prefix,
        "TURNAUDIT_HTTP_HOST": "127.0.0.1",
        "TURNAUDIT_HTTP_PORT": str(port),
        "TURNAUDIT_GROUP_ID": f"bench-follow-{uuid.uuid4().hex}",
        "TURNAUDIT_GROUP_INSTANCE_ID": "none",
    }
    began = time.perf_counter()
    proc = subprocess.Popen(
        [TURNAUDIT, "verify", "--follow"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=PROJECT_DIR,
    )
    total = sum(end.values())
    rss: list[float] = []
    first: tuple[int, float] | None = None  # (turns proved, when) at the first proof seen
    try:
        next_sample = began
        while True:
            now = time.perf_counter()
            if now >= next_sample:
                rss.append(vm_rss_mib(proc.pid))
                next_sample = now + sample_s
            at = proved(port)
            if first is None and sum(at.values()):
                first = (sum(at.values()), time.perf_counter())
            if all(at.get(p, 0) >= offset for p, offset in end.items() if offset):
                finished = time.perf_counter()
                seconds = finished - began
                break
            assert proc.poll() is None, "the follower stopped"
            # Each scrape costs the follower a /metrics page made under the GIL (its process
            # collector reads /proc): far from the end, once a second (Prometheus scrapes
            # every 15 s); near it, ten times a second, so the end is seen within 0.1 s.
            time.sleep(0.1 if sum(at.values()) >= 0.95 * total else 1.0)
        rss.append(vm_rss_mib(proc.pid))
        cpu_s = cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)
    steady = None if first is None else (total - first[0], finished - first[1])
    return Run(count=total, seconds=seconds, rss_mib=rss, cpu_s=cpu_s, steady=steady)


def proved(port: int) -> dict[int, int]:
    """The follower's proved offset per partition (empty until it answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
            text = reply.read().decode()
    except OSError:
        return {}
    return {
        int(s.labels["partition"]): int(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "turnaudit_verify_proved_offset"
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (``/proc/PID/stat``, every thread)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vm_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


if __name__ == "__main__":
    main()
