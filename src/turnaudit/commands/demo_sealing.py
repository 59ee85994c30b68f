"""The demo's sealed surfaces: a publisher with a surface keyring generated in the demo's
folder publishes v5 turns without tasks (signed, like the rest of the run) to the run's own
topics, beside the evaluation stage; then a reader with the keyring opens every one as published, a
reader without it sees the verdicts and placeholders, one session is erased, and verify
(with the signing keyring, signatures required) still proves the range complete.

Its rows reconcile against what this stage published, not the simulator of the main run.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

from prometheus_client import CollectorRegistry

from turnaudit.commands.demo_run import DemoRun
from turnaudit.commands.demo_summary import ReconciliationRow
from turnaudit.events import TurnEvent
from turnaudit.files import write_private
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import RangeSpec, end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.reading import read_turn_events
from turnaudit.sealing import FileKeyring, KeyDirectory, Opened, Sealed, placeholder
from turnaudit.sealing.envelope import Surfaces, surfaces_of
from turnaudit.sealing.key_topic import erase_session, load_directory
from turnaudit.sealing.keys import new_key_entry
from turnaudit.verdicts import UNKNOWN_DOMAIN_SURFACE
from turnaudit.verify.run import run_verify

SURFACE_KEYRING_FILE = "surface-keyring.toml"
SEALED_TURNS = 120
SEALED_SESSIONS = 4
ERASED_BY = "turnaudit-demo"


@dataclass(frozen=True)
class SealedOutcome:
    rows: list[ReconciliationRow]
    keyring_path: Path
    erased_session: str


def run_sealing_stage(run: DemoRun, output_dir: Path, seed: int) -> SealedOutcome:
    settings = run.settings
    keyring_path = output_dir / SURFACE_KEYRING_FILE
    write_private(
        keyring_path, ('active = "demo-kek"\n[keys]\n' + new_key_entry("demo-kek")).encode()
    )
    keyring = FileKeyring.load(keyring_path)
    topic = settings.topics.turn_events
    start = end_offsets(settings, topic)
    publisher = TurnEventPublisher(
        settings,
        spool_dir=run.spool_dir / "sealed",
        registry=CollectorRegistry(),
        checkpoints=run.checkpoints,
        surface_keys=keyring,
    )
    published: dict[str, Surfaces] = {}  # event id -> its texts as the runtime wrote them
    sessions: dict[str, list[str]] = {}
    # No tasks: the demo runs this stage beside the evaluation, whose feeder (and evidence
    # rebuild) passes task-less turns by; ``seed`` differs from the main run's (its sessions).
    simulator = TurnRuntimeSimulator(
        seed, schema_versions=(5,), concurrent_sessions=SEALED_SESSIONS, task_share=0.0
    )
    for event in simulator.events(SEALED_TURNS):
        texts = surfaces_of(event)
        event_id = publisher.publish(event)
        published[event_id] = texts
        sessions.setdefault(event["session_id"], []).append(event_id)
    publisher.close()
    spec = RangeSpec(from_offsets=dict(start), to_offsets=end_offsets(settings, topic))
    # Independent reads side by side: the demo's time stays about what it was.
    with ThreadPoolExecutor(max_workers=2) as pool:
        keys_read = pool.submit(load_directory, settings, keyring)
        raw = [r.value() or b"" for r in read_range(settings, topic, start, spec.to_offsets or {})]
        with_key = keys_read.result()
    decode = decoder_for(settings)
    opened_as_published = placeholders = sealed_on_topic = 0
    covered = placeholder("no_keyring")
    for value in raw:
        # Two copies of the turn as read: one per reader (opening writes into the event).
        keyed, keyless = (cast(TurnEvent, decode(value).event) for _ in range(2))
        sealed_on_topic += keyed.get("sealed") is not None
        state = with_key.open_in_place(keyed)
        if isinstance(state, Opened) and surfaces_of(keyed) == published[keyed["event_id"]]:
            opened_as_published += 1
        state = KeyDirectory(None).open_in_place(keyless)
        # Every sealed text a placeholder (a stub's fixed text is left in the clear).
        shown = surfaces_of(keyless).texts()
        if isinstance(state, Sealed) and all(x in (covered, UNKNOWN_DOMAIN_SURFACE) for x in shown):
            placeholders += 1
    erased = max(sessions, key=lambda s: len(sessions[s]))
    erase_session(settings, erased, erased_by=ERASED_BY, reason="the demo's erasure")
    with ThreadPoolExecutor(max_workers=1) as pool:
        verified = pool.submit(
            run_verify,
            settings,
            decoder_for(settings),
            spec,
            keyring=replace(run.keyring, require_signed=True),
            keyring_source=str(run.keyring_path),
        )
        after = list(read_turn_events(settings, spec, keys=load_directory(settings, keyring)))
        report = verified.result()
    unreadable = sum(
        isinstance(t.sealing, Sealed) and t.sealing.reason == "key_erased"
        for t in after
        if t.event is not None and t.event["session_id"] == erased
    )
    still_open = sum(
        isinstance(t.sealing, Opened)
        for t in after
        if t.event is not None and t.event["session_id"] != erased
    )
    trust = report.trust
    signed = trust.by_status().get("signed", 0) if trust is not None else 0
    erased_turns = len(sessions[erased])
    rows = [
        ReconciliationRow("turns sealed on the topic", sealed_on_topic, SEALED_TURNS),
        ReconciliationRow(
            "opened with the keyring, as published",
            opened_as_published,
            SEALED_TURNS,
            "read",
            "opened with the keyring",
        ),
        ReconciliationRow(
            "placeholders without it", placeholders, SEALED_TURNS, "read", "placeholders without"
        ),
        ReconciliationRow(
            "erased session: turns unreadable",
            unreadable,
            erased_turns,
            "one session erased",
            "its turns unreadable",
        ),
        ReconciliationRow(
            "erased session: the others' turns still open",
            still_open,
            SEALED_TURNS - erased_turns,
            "one session erased",
            "the others open",
        ),
        ReconciliationRow(
            "verify after the erasure: turns",
            report.verifier.counts.turns,
            SEALED_TURNS,
            "verify --require-signed after it",
            "turns",
        ),
        ReconciliationRow(
            "verify after the erasure: streams signed",
            signed,
            len(sessions),
            "verify --require-signed after it",
            "streams signed",
        ),
        ReconciliationRow(
            "verify after the erasure: exit code",
            0 if report.ok else 1,
            0,
            "verify --require-signed after it",
            "exit code",
        ),
    ]
    return SealedOutcome(rows, keyring_path, erased)
