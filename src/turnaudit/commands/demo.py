"""``turnaudit demo``: the pipeline end to end on the local broker, summarised."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from turnaudit.cluster import connect
from turnaudit.commands.simulate import add_simulation_arguments, publish_simulation
from turnaudit.contracts import SequenceOutcome, SessionSequenceTracker, check_event
from turnaudit.errors import SerializationError
from turnaudit.kafka.reading import end_offsets, read_range
from turnaudit.kafka.topics import ensure_topics
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the pipeline end to end on the local broker and print a summary"
    )
    add_simulation_arguments(parser)
    parser.set_defaults(handler=_demo, spool_dir=Path("var/spool/demo"))


def _row(label: str, value: object, expected: object | None = None) -> str:
    check = ""
    if expected is not None:
        check = "  ok" if value == expected else f"  MISMATCH (simulator: {expected})"
    return f"  {label:<38} {value!s:>10}{check}"


def _demo(args: argparse.Namespace) -> int:
    settings, where = connect(KafkaSettings.from_env(), start_local=True)
    print(f"turn-audit demo: {where}")
    ensure_topics(settings)
    topic = settings.topics.turn_events
    before = end_offsets(settings, topic)

    sim, report, emitter, elapsed = publish_simulation(settings, args)
    truth = sim.truth
    print(
        f"published {emitter.emitted} simulated turns in {elapsed:.1f}s "
        f"(seed {args.seed}, schema versions {','.join(map(str, args.schema_versions))})"
    )

    after = end_offsets(settings, topic)
    decode = TurnEventDeserializer(shipped_catalog())
    ids: set[str] = set()
    by_path_version: Counter[tuple[str, int]] = Counter()
    by_policy: Counter[str] = Counter()
    breaches: Counter[str] = Counter()
    undecodable = refused = hedged = duplicates = gaps = 0
    sequences = SessionSequenceTracker()
    read = 0
    for msg in read_range(settings, topic, before, after):
        read += 1
        try:
            decoded = decode(msg.value())
        except SerializationError:
            undecodable += 1
            continue
        event = decoded.event
        if event["event_id"] in ids:
            duplicates += 1
            continue
        ids.add(event["event_id"])
        by_path_version[(event["path"], decoded.writer_version)] += 1
        refused += event["verdicts"]["refusal_emitted"]
        hedged += event["verdicts"]["hedge_injected"]
        if event["action_assessment"] is not None:
            by_policy[event["action_assessment"]["output_policy"]] += 1
        for breach in check_event(event):
            breaches[breach.contract.value] += 1
        if sequences.observe(event["session_id"], event["sequence"]).outcome is SequenceOutcome.GAP:
            gaps += 1

    lost = emitter.emitted - len(ids)
    print()
    print("stream (read back from " + topic + ")")
    print(_row("events published", emitter.emitted, truth.events))
    print(_row("messages read back", read))
    print(_row("distinct event ids", len(ids), truth.events))
    print(_row("sessions", len({e for e in truth.sessions}), len(truth.sessions)))
    for (path, version), n in sorted(by_path_version.items()):
        expected = None
        print(_row(f"  {path.lower()} turns, schema v{version}", n, expected))
    print(
        _row(
            "main turns",
            sum(n for (p, _), n in by_path_version.items() if p == "MAIN"),
            truth.by_path["MAIN"],
        )
    )
    print(
        _row(
            "stub turns",
            sum(n for (p, _), n in by_path_version.items() if p == "STUB"),
            truth.by_path["STUB"],
        )
    )
    for version in sorted(truth.by_schema_version):
        print(
            _row(
                f"schema v{version}",
                sum(n for (_, v), n in by_path_version.items() if v == version),
                truth.by_schema_version[version],
            )
        )
    print(_row("refused turns", refused, truth.refused))
    print(_row("hedged turns (hedge_injected)", hedged, truth.hedged))
    for policy in ("DOMAIN_SEAL", "DOMAIN_HOLD", "DOMAIN_VOID"):
        print(_row(f"action risk {policy}", by_policy[policy], truth.by_output_policy[policy]))
    print(_row("contract breaches (producer side, to DLQ)", emitter.breached, 0))
    print(_row("contract breaches (read back)", sum(breaches.values()), 0))
    print(_row("sequence gaps", gaps, 0))
    print(_row("undecodable messages", undecodable, 0))
    print(_row("redelivered duplicates (same event id)", duplicates))
    print(_row("events waiting in the spool", report.undelivered, 0))
    print(_row("events lost", lost, 0))
    ok = (
        lost == 0
        and report.ok
        and undecodable == 0
        and not breaches
        and gaps == 0
        and refused == truth.refused
        and hedged == truth.hedged
    )
    print()
    print("demo: " + ("every event accounted for" if ok else "MISMATCH: see the rows above"))
    return 0 if ok else 1
