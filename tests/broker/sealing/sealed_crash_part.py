"""A sealed runtime's publisher as a process to kill: ``python -m
tests.broker.sealing.sealed_crash_part BOOTSTRAP PREFIX SPOOL SEED`` (the keyring and
the publisher's settings from the environment), then lines ``publish N [wait]`` on
stdin: publishes the simulator's next N v5 turns (a new session every few turns, so
data keys are made during an outage too), waits a second (with ``wait``, until all are
delivered) and prints ``published P delivered D spooled S``. It never closes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames


def main(argv: list[str]) -> int:
    bootstrap, prefix, spool, seed = argv[0], argv[1], Path(argv[2]), int(argv[3])
    settings = KafkaSettings(bootstrap_servers=bootstrap, topics=TopicNames(prefix))
    publisher = TurnEventPublisher(settings, spool_dir=spool, probe_interval=0.2)
    simulator = TurnRuntimeSimulator(seed, schema_versions=(5,), concurrent_sessions=3)
    source = simulator.events(100_000)
    published = 0
    for line in sys.stdin:
        n = int(line.split()[1])
        for _ in range(n):
            publisher.publish(next(source))
        published += n
        time.sleep(1.0)
        deadline = time.monotonic() + 30
        while "wait" in line and publisher.stats().delivered < published:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        stats = publisher.stats()
        print(f"published {published} delivered {stats.delivered} spooled {stats.spooled}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
