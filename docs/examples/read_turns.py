"""Read the turn-audit stream from Python with the public reading API (turnaudit.reading).

    KAFKA_BOOTSTRAP_SERVERS=host:9092 python docs/examples/read_turns.py [--last-minutes N]

Prints one JSON line per turn (its id, session, stream position, pack, what the runtime
decided and the writer's schema version), then a summary line: turns, refusals, hedges,
messages that did not decode. It joins no consumer group and commits nothing. The suite runs
this file as written against a real broker (tests/broker/deploy/test_reading_example.py).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from datetime import UTC, datetime, timedelta

from turnaudit.reading import (
    KafkaSettings,
    RangeSpec,
    TurnEvent,
    decoder_for,
    occurred_moment,
    read_turn_events,
)


def describe(event: TurnEvent) -> dict[str, object]:
    verdicts = event["verdicts"]  # the bundle: every verdict of the turn in one field
    action = event["action_assessment"]
    return {
        "event_id": event["event_id"],  # the dedupe key
        "session_id": event["session_id"],
        "stream": [event["producer_id"], event["sequence"]],  # ordered stream and position
        "pack": event["pack_id"],
        "path": event["path"],
        "refused": verdicts["refusal_emitted"],
        "hedged": verdicts["hedge_injected"],
        # Approval is read from the action risk, never from execution_verdict.
        "action_policy": action["output_policy"] if action else None,
        "occurred_at": occurred_moment(event["occurred_at"]).isoformat(),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--last-minutes",
        type=int,
        default=0,
        help="only turns stored in the last N minutes (default: all retained)",
    )
    args = parser.parse_args()
    settings = KafkaSettings.from_env()  # KAFKA_BOOTSTRAP_SERVERS, TURNAUDIT_TOPIC_PREFIX, ...
    since = datetime.now(UTC) - timedelta(minutes=args.last_minutes) if args.last_minutes else None
    decoder = decoder_for(settings)  # both framings, every schema version
    tally: Counter[str] = Counter()
    for turn in read_turn_events(settings, RangeSpec(since=since), decoder=decoder):
        if turn.event is None:
            tally["undecodable"] += 1
            continue
        line = describe(turn.event)
        print(json.dumps({**line, "writer_version": turn.writer_version}, sort_keys=True))
        tally["turns"] += 1
        tally["refused"] += bool(line["refused"])
        tally["hedged"] += bool(line["hedged"])
    print(json.dumps({"summary": dict(sorted(tally.items()))}))


if __name__ == "__main__":
    main()
