"""The surface policy end to end on the real broker: simulated turns carrying a test card
number in every surface and tool call go through the publisher, the log sink, the HTIR
feeder (traces topic and manifest), the auditor worker, evidence rebuild and bundle, a
review pack, replays (jsonl, logs, htir) and tail. Every output is then searched for the
planted texts: none under the default policy, all of them under ``keep``. Every file
written is owner-only (0600), or the group mode ``TURNAUDIT_FILE_MODE`` sets."""

from __future__ import annotations

import io
import json
import stat
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.streams import publish_simulated
from turnaudit.commands.demo_consumers import run_consumer_stage
from turnaudit.commands.demo_evaluation import run_evaluation_stage
from turnaudit.commands.replay import OUTPUT_KINDS
from turnaudit.consumers.tail import tail_turns
from turnaudit.evaluation import review_pack
from turnaudit.files import configured_modes
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import RangeSpec, end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.redaction import SURFACE_FIELDS, Redaction, surface_redaction
from turnaudit.replay import ReplayRequest, ReplayTarget, replay
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

CARD = "4111-1111-1111-1111"
EVENTS = 1500


class MarkedSimulator(TurnRuntimeSimulator):
    """The simulator, each main turn's surfaces and tokens and every tool call's arguments
    and result carrying the card number and where it was planted (the contracts still
    hold: a text is extended, never replaced)."""

    def events(self, count: int) -> Iterator[Any]:
        for i, event in enumerate(super().events(count)):
            if event["path"] == "MAIN":
                for name in SURFACE_FIELDS:
                    event[name] = f"{event[name]} [{CARD} {name}-{i}]"
                event["input_tokens"] = [*event["input_tokens"], f"[{CARD} token-{i}]"]
            event["tool_steps"] = [  # type: ignore[typeddict-unknown-key]  # a v4 field on purpose
                {
                    **call,
                    "arguments": f'{{"card": "{CARD}", "at": "args-{i}-{j}"}}',
                    "result": f"charged [{CARD} result-{i}-{j}]",
                }
                for j, call in enumerate(event.get("tool_steps", ()))  # older schemas: none
            ]
            yield event


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings(item)


def json_strings(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [s for line in text.split("\n") if line.strip() for s in strings(json.loads(line))]
    return list(strings(json.loads(text)))


def planted(settings: KafkaSettings, before: dict[int, int]) -> tuple[set[str], set[str]]:
    """The planted texts, read back from the turn-events topic: (all, those of task turns)."""
    decode = decoder_for(settings)
    topic = settings.topics.turn_events
    every, of_tasks = set(), set()
    for msg in read_range(settings, topic, before, end_offsets(settings, topic)):
        event = decode(msg.value()).event
        texts = {s for s in strings(event) if CARD in s}
        joined = "\x1f".join(event["input_tokens"])
        every |= texts | ({joined} if CARD in joined else set())
        if event["task"] is not None:
            of_tasks |= {
                s
                for s in texts
                if s not in event["input_tokens"]
                and s not in (event["walk_surface"], event["articulation_surface"])
            }
    return every, of_tasks


def run_pipeline(
    settings: KafkaSettings, folder: Path, redaction: Redaction, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, Any], set[str], set[str]]:
    """Everything that writes turns out, on one simulated run; returns the outputs by name
    (a path or the bytes read from a topic or a stream) and the planted texts."""
    monkeypatch.setattr("turnaudit.commands.simulate.TurnRuntimeSimulator", MarkedSimulator)
    before = end_offsets(settings, settings.topics.turn_events)
    traces_before = end_offsets(settings, settings.topics.htir_traces)
    started = datetime.now(UTC) - timedelta(seconds=1)
    truth = publish_simulated(settings, EVENTS, folder / "spool", seed=41)
    end = end_offsets(settings, settings.topics.turn_events)
    out = folder / "out"
    rows = run_consumer_stage(
        settings,
        truth,
        truth.events,
        120.0,
        start_offsets=before,
        log_file=out / "logs" / "turns.jsonl",
        redaction=redaction,
    )
    assert [r for r in rows if not r.ok] == []
    outcome = run_evaluation_stage(
        settings, truth, 120.0, start_offsets=before, output_dir=out / "eval", redaction=redaction
    )
    assert all(r.ok for r in outcome.rows), outcome.rows
    review_pack.export(
        [(None, outcome.manifest_path)], out / "review" / "pack.json", redaction=redaction
    )
    request = ReplayRequest(RangeSpec(from_offsets=before, to_offsets=end), surfaces=redaction)
    for kind in ("jsonl", "logs", "htir"):
        replay(
            settings,
            decoder_for(settings),
            request,
            ReplayTarget.file(kind, out / "replay" / f"{kind}.jsonl"),
            outputs=OUTPUT_KINDS,
            timeout=60,
        )
    tailed, stop = io.StringIO(), threading.Event()
    guard = threading.Timer(60, stop.set)  # a tail that never got its lines still ends
    guard.start()
    try:
        tail_turns(
            settings,
            tailed,
            since=started,
            show_verdicts=True,
            stop=stop,
            limit=sum(end[p] - before.get(p, 0) for p in end),
        )
    finally:
        guard.cancel()
    traces = [
        msg.value()
        for msg in read_range(
            settings,
            settings.topics.htir_traces,
            traces_before,
            end_offsets(settings, settings.topics.htir_traces),
        )
    ]
    read_trace = TurnEventDeserializer(shipped_catalog("htir_trace"))
    outputs: dict[str, Any] = {
        "traces topic": (
            b"".join(traces),
            [s for value in traces for s in strings(read_trace(value).event)],
        ),
        "tail": (tailed.getvalue().encode(), [tailed.getvalue()]),
    }
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes()
        decoded = (
            json_strings(path)
            if path.suffix in (".json", ".jsonl")
            else [data.decode("utf-8", "replace")]
        )
        outputs[str(path.relative_to(out))] = (data, decoded)
    every, of_tasks = planted(settings, before)
    assert len(every) > EVENTS  # surfaces of main turns and tool I/O were planted
    assert len(of_tasks) > 100
    assert any("args-" in t for t in of_tasks)
    assert any("result-" in t for t in of_tasks)
    return outputs, every, of_tasks


def file_modes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*")}


class TestThePipelineOnTheBroker:
    def test_the_default_policy_writes_no_planted_text_and_only_owner_only_files(
        self, kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        for name in ("TURNAUDIT_LOG_SURFACES", "TURNAUDIT_SURFACES", "TURNAUDIT_FILE_MODE"):
            monkeypatch.delenv(name, raising=False)
        configured_modes.cache_clear()
        outputs, every, _ = run_pipeline(kafka_settings, tmp_path, surface_redaction(), monkeypatch)
        assert {
            "traces topic",
            "tail",
            "logs/turns.jsonl",
            "eval/htir-manifest.jsonl",
            "eval/evidence.json",
            "eval/evidence-bundle.tar",
            "review/pack.json",
            "replay/jsonl.jsonl",
            "replay/logs.jsonl",
            "replay/htir.jsonl",
        } <= set(outputs)
        for name, (data, decoded) in outputs.items():
            assert CARD.encode() not in data, name
            assert not [s for s in decoded if CARD in s], name
            assert not [t for t in every if t.encode() in data], name
        modes = file_modes(tmp_path)
        assert modes
        for path, found in modes.items():
            wanted = 0o700 if (tmp_path / path).is_dir() else 0o600
            assert found == wanted, (path, oct(found))

    def test_keep_writes_every_planted_text_and_a_group_mode_is_applied(
        self, kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("TURNAUDIT_LOG_SURFACES", "keep")  # the replay's logs output
        monkeypatch.setenv("TURNAUDIT_FILE_MODE", "0640")
        configured_modes.cache_clear()
        try:
            outputs, every, of_tasks = run_pipeline(
                kafka_settings, tmp_path, surface_redaction(), monkeypatch
            )
            modes = file_modes(tmp_path)
        finally:
            configured_modes.cache_clear()

        def holds(name: str, texts: set[str]) -> None:
            decoded = "\n".join(outputs[name][1])
            missing = sorted(t for t in texts if t not in decoded)
            assert not missing, (name, len(missing), missing[:3])

        tool_io_and_surfaces = {t for t in of_tasks if "token-" not in t}
        holds("replay/jsonl.jsonl", every - {t for t in every if "\x1f" in t})
        holds("logs/turns.jsonl", {t for t in every if "args-" not in t and "result-" not in t})
        holds("replay/logs.jsonl", {t for t in every if "args-" not in t and "result-" not in t})
        for name in (
            "traces topic",
            "eval/htir-manifest.jsonl",
            "replay/htir.jsonl",
            "eval/rebuilt-traces.htir.jsonl",
            "review/pack.json",
        ):
            holds(name, tool_io_and_surfaces)
        assert CARD.encode() in outputs["eval/evidence.json"][0]
        assert CARD.encode() not in outputs["tail"][0]  # tail never writes a surface
        spool = tmp_path / "spool"
        for path, found in modes.items():
            if (tmp_path / path).is_dir():
                assert found == 0o750, (path, oct(found))
            elif (tmp_path / path).is_relative_to(spool):
                assert found & 0o037 == 0, (path, oct(found))  # spool data: 0600 at most 0640
            else:
                assert found == 0o640, (path, oct(found))

    def test_hash_writes_keyed_hashes_and_no_planted_text(
        self, kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("TURNAUDIT_SURFACES", "hash")  # the general name
        monkeypatch.setenv("TURNAUDIT_LOG_HASH_KEY", "broker-test-key")
        monkeypatch.delenv("TURNAUDIT_LOG_SURFACES", raising=False)
        redaction = surface_redaction()
        outputs, every, of_tasks = run_pipeline(kafka_settings, tmp_path, redaction, monkeypatch)
        for name, (data, decoded) in outputs.items():
            assert CARD.encode() not in data, name
            assert not [s for s in decoded if CARD in s], name
        for name in (
            "logs/turns.jsonl",
            "replay/logs.jsonl",
            "replay/jsonl.jsonl",
            "traces topic",
            "eval/htir-manifest.jsonl",
            "review/pack.json",
        ):
            assert b"hmac-sha256:" in outputs[name][0], name
        # Equal texts, equal hashes: each task turn's hashed surface is in the log lines.
        logged = set(outputs["logs/turns.jsonl"][1])
        traced = {s for s in outputs["traces topic"][1] if s.startswith("hmac-sha256:")}
        surfaces = {redaction.text(t) for t in of_tasks if "surface-" in t and "_surface-" not in t}
        assert surfaces
        assert surfaces <= traced
        assert surfaces <= logged
        assert every
