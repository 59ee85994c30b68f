"""A runtime's publisher as its own process, for the identity tests.

``python -m tests.support.publish_part BOOTSTRAP PREFIX SPOOL SEED TOTAL FIRST END [STEP OFFSET]``
builds the simulator's first TOTAL turns (the same for every process with the
same seed, so sessions continue across processes) and publishes those with
index in [FIRST, END) and index % STEP == OFFSET, then closes and prints its
close report as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

SESSIONS = 8


def main(argv: list[str]) -> int:
    bootstrap, prefix, spool = argv[0], argv[1], Path(argv[2])
    seed, count, first, end = (int(a) for a in argv[3:7])
    step, offset = (int(argv[7]), int(argv[8])) if len(argv) > 8 else (1, 0)
    settings = KafkaSettings(bootstrap_servers=bootstrap, topics=TopicNames(prefix))
    publisher = TurnEventPublisher(settings, spool_dir=spool, probe_interval=0.2)
    sim = TurnRuntimeSimulator(seed, schema_versions=(3,), concurrent_sessions=SESSIONS)
    for i, event in enumerate(sim.events(count)):
        if first <= i < end and i % step == offset:
            publisher.publish(event)
    report = publisher.close(timeout=20.0)
    print(
        json.dumps(
            {
                "producer_id": publisher.producer_id,
                "delivered": report.delivered,
                "undelivered": report.undelivered,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
