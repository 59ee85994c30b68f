"""Every reader of turns opens sealed ones through the one ``TurnOpener`` and then applies
its surface policy; without the key it writes placeholders and the verdicts, and never fails.

Readers: replay's ``jsonl``, ``logs`` and ``htir`` outputs, the HTIR feeder (its
manifest; the evidence rebuild the auditor replays goes through the ``htir`` output's
sink). Inputs: one whole simulated task whose every surface, token and tool text carries
a planted text, as written in the clear, sealed and read with the keyring, sealed and
read without it, and sealed with the session erased (its data key tombstoned).
"""

from __future__ import annotations

import copy
import json
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.support.acking_producer import AcknowledgingProducer
from tests.support.events import encode
from tests.unit.sealing.support import KeyTopic, keyring, sealer
from turnaudit.consumers.htir_feeder import HtirFeederSink
from turnaudit.consumers.replay.htir import TraceReplaySink, trace_line
from turnaudit.consumers.replay.logs import LogReplayOutput
from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.consumers.runtime.settings import LogSinkSettings
from turnaudit.contracts import SequenceCheck, SequenceOutcome
from turnaudit.errors import ConfigurationError
from turnaudit.events import OutgoingTurnEvent
from turnaudit.htir import HtirTrace
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.records import StoredRecord
from turnaudit.redaction import HASH_PREFIX, Redaction, SurfacePolicy
from turnaudit.replay.jsonl import jsonl_line
from turnaudit.sealing import SURFACE_KEYRING_ENV, FileKeyring, KeyDirectory, placeholder
from turnaudit.sealing.opening import TurnOpener, turn_opener
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

DECODE = TurnEventDeserializer(shipped_catalog())
KEEP = Redaction.keep()
HASH = Redaction(SurfacePolicy.HASH, b"reader-test-key")


def whole_task() -> list[dict[str, Any]]:
    """The turns of one whole simulated v5 task with tool calls, one session."""
    sim = TurnRuntimeSimulator(9, schema_versions=(5,), concurrent_sessions=4)
    by_task: dict[str, list[dict[str, Any]]] = {}
    for event in sim.events(2000):
        if event["task"] is not None:
            by_task.setdefault(event["task"]["task_id"], []).append(dict(event))
    for events in by_task.values():
        if (
            events[0]["task"]["step"] == 0
            and events[-1]["task"]["end_of_task"]
            and sum(len(e["tool_steps"]) for e in events) >= 2
        ):
            for i, event in enumerate(events):
                event["sequence"], event["event_id"], event["producer_id"] = i, f"e{i}", "p"
            return events
    raise AssertionError("no whole task with tool calls in the simulated run")


TASK = whole_task()
SESSION = TASK[0]["session_id"].encode()  # the key of its turns' records


@dataclass(frozen=True)
class Input:
    messages: list[bytes]  # the turns as a reader reads them off the topic
    opener: TurnOpener | None
    planted: list[str]


def planted_task(noise: Callable[[], str]) -> tuple[list[Any], list[str]]:
    events, texts = copy.deepcopy(TASK), []

    def text(where: str) -> str:
        texts.append(f"{noise()}<planted {where}>{noise()}")
        return texts[-1]

    for i, event in enumerate(events):
        if event["path"] == "MAIN":  # a stub turn's fixed text is checked by contract
            for name in ("surface", "walk_surface", "articulation_surface"):
                event[name] = text(f"{name}-{i}")
        event["input_tokens"] = [text(f"token-{i}")]
        event["tool_steps"] = [
            {**call, "arguments": text(f"args-{i}-{j}"), "result": text(f"result-{i}-{j}")}
            for j, call in enumerate(event["tool_steps"])
        ]
    return events, texts


def reader_input(state: str, noise: Callable[[], str]) -> Input:
    events, texts = planted_task(noise)
    if state == "in_the_clear":
        return Input([encode(e) for e in events], TurnOpener(None), texts)
    topic, provider = KeyTopic(), keyring("kek-1")
    keys = sealer(provider, topic)
    sealed = []
    for event in events:
        outgoing = copy.deepcopy(event)
        keys.seal(cast(OutgoingTurnEvent, outgoing))
        sealed.append(encode(outgoing))
    if state == "key_erased":
        for key, _ in list(topic.messages):
            topic.tombstone(key.decode())
    held: FileKeyring | None = None if state == "no_keyring" else provider
    return Input(sealed, TurnOpener(lambda: topic.directory(held)), texts)


def consumed(messages: list[bytes]) -> list[ConsumedTurn]:
    check = SequenceCheck(SequenceOutcome.IN_ORDER)
    return [ConsumedTurn(DECODE(m), check, "t.turn-events", 0, i) for i, m in enumerate(messages)]


# --- the readers: each returns what it wrote --------------------------------------------


def replay_jsonl(given: Input, policy: Redaction, _: Path) -> str:
    records = [
        StoredRecord("t.turn-events", 0, i, SESSION, m) for i, m in enumerate(given.messages)
    ]
    lines = [jsonl_line(DECODE, r, policy, given.opener) for r in records]
    assert all(decoded for _, decoded in lines)
    return b"".join(line for line, _ in lines).decode()


def replay_htir(given: Input, policy: Redaction, _: Path) -> str:
    traces: list[HtirTrace] = []
    sink = TraceReplaySink(traces.append, policy, given.opener)
    sink.write_batch(consumed(given.messages))
    sink.close()
    assert traces
    return b"".join(trace_line(t) for t in traces).decode()


def replay_logs(given: Input, policy: Redaction, folder: Path) -> str:
    path = Path(tempfile.mkdtemp(dir=folder)) / "turns.log"  # one per call
    settings = LogSinkSettings(policy.policy, policy.key)
    output = LogReplayOutput(path, DECODE, settings, opener=given.opener)
    records = [
        StoredRecord("t.turn-events", 0, i, SESSION, m) for i, m in enumerate(given.messages)
    ]
    output.open(0)
    try:
        output.write(records)
        output.finish()
    finally:
        output.close()
    return json.dumps([json.loads(line) for line in path.read_text().splitlines()])


def htir_feeder(given: Input, policy: Redaction, folder: Path) -> str:
    manifest = Path(tempfile.mkdtemp(dir=folder)) / "manifest.jsonl"  # one per call
    sink = HtirFeederSink(
        KafkaSettings(),
        registry=CollectorRegistry(),
        manifest=manifest,
        redaction=policy,
        producer=AcknowledgingProducer(),
        opener=given.opener,
    )
    sink.write_batch(consumed(given.messages))
    sink.close()
    return manifest.read_text()


READERS: dict[str, Callable[[Input, Redaction, Path], str]] = {
    "replay jsonl": replay_jsonl,
    "replay htir (and the evidence rebuild)": replay_htir,
    "replay logs": replay_logs,
    "htir feeder": htir_feeder,
}


@pytest.mark.parametrize("state", ["opened", "no_keyring", "key_erased"])
@pytest.mark.parametrize("reader", list(READERS))
@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_reader_writes_the_texts_when_it_holds_the_key_and_placeholders_when_not(
    reader: str, state: str, tmp_path: Path, seed: int
) -> None:
    """Opened: exactly the texts the reader writes of the same turns in the clear (each
    reader writes its own fields: the logs no tool I/O, a trace no tokens). Else none of
    them, and the placeholder with the reason."""
    clear = reader_input("in_the_clear", replaying(seed))
    in_the_clear = written_strings(READERS[reader](clear, KEEP, tmp_path))
    expected = [t for t in clear.planted if any(t in v for v in in_the_clear)]
    assert expected  # the reader does write texts
    given_input = reader_input(state, replaying(seed))
    values = written_strings(READERS[reader](given_input, KEEP, tmp_path))
    found = [text for text in given_input.planted if any(text in v for v in values)]
    if state == "opened":
        assert found == expected  # every text it writes, as the runtime wrote it
        assert not any("[sealed:" in v for v in values)
    else:
        assert found == []
        assert any(placeholder(state) in v for v in values)


@pytest.mark.parametrize("reader", list(READERS))
@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_reader_hashes_an_opened_turn_exactly_as_the_same_turn_in_the_clear(
    reader: str, tmp_path: Path, seed: int
) -> None:
    """Opening comes before the policy: under ``hash`` the opened turns' hashes are the
    clear turns' (the same texts, sealed or not)."""
    clear = READERS[reader](reader_input("in_the_clear", replaying(seed)), HASH, tmp_path)
    opened = READERS[reader](reader_input("opened", replaying(seed)), HASH, tmp_path)
    hashed = [v for v in written_strings(clear) if v.startswith(HASH_PREFIX)]
    assert len(hashed) >= len(TASK)  # the policy did hash texts
    assert sorted(hashed) == sorted(v for v in written_strings(opened) if v.startswith(HASH_PREFIX))


def replaying(seed: int) -> Callable[[], str]:
    """Random text around each planted marker (line breaks, escapes, non-ASCII among
    it), the same for every call with ``seed``: one turn in the clear and sealed."""
    rng = random.Random(seed)
    return lambda: "".join(chr(rng.randrange(1, 0x2FF)) for _ in range(rng.randrange(10)))


def written_strings(written: str) -> list[str]:
    """Every string value in a reader's JSON lines."""

    def strings(value: object) -> list[str]:
        if isinstance(value, str):
            return [value]
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        if isinstance(value, list):
            return [s for v in value for s in strings(v)]
        return []

    return strings([json.loads(line) for line in written.split("\n") if line])


def test_under_drop_no_reader_reads_the_key_topic_yet_a_bad_keyring_stops_it_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tmp_path / "good.toml"
    good.write_text('active = "k"\n[keys]\nk = "' + "A" * 43 + '="\n')
    good.chmod(0o600)
    monkeypatch.setenv(SURFACE_KEYRING_ENV, str(good))
    assert turn_opener(KafkaSettings(), Redaction(SurfacePolicy.DROP)) is None
    bad = tmp_path / "bad.toml"
    bad.write_text('active = "k"\n')
    bad.chmod(0o600)
    monkeypatch.setenv(SURFACE_KEYRING_ENV, str(bad))
    for policy in (Redaction(SurfacePolicy.DROP), KEEP, HASH):
        with pytest.raises(ConfigurationError) as raised:
            turn_opener(KafkaSettings(), policy)
        assert "\n" not in str(raised.value)
        assert SURFACE_KEYRING_ENV in str(raised.value)


def test_without_a_keyring_the_opener_writes_placeholders_and_reads_no_key_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SURFACE_KEYRING_ENV, raising=False)
    opener = turn_opener(KafkaSettings(bootstrap_servers="127.0.0.1:1"), KEEP)
    assert opener is not None
    given_input = reader_input("opened", replaying(1))
    event = DECODE(given_input.messages[0]).event
    state = opener(event)
    assert state is not None
    assert event["input_tokens"] == [placeholder("no_keyring")]


def test_the_opener_reads_the_key_directory_once_and_only_for_a_sealed_turn() -> None:
    asked: list[int] = []
    topic, provider = KeyTopic(), keyring("kek-1")

    def directory() -> KeyDirectory:
        asked.append(1)
        return topic.directory(provider)

    opener = TurnOpener(directory)
    clear = reader_input("in_the_clear", replaying(2))
    assert opener(DECODE(clear.messages[0]).event) is None
    assert asked == []
    keys = sealer(provider, topic)
    for event in copy.deepcopy(TASK)[:3]:
        keys.seal(cast(OutgoingTurnEvent, event))
        opener(DECODE(encode(event)).event)
    assert asked == [1]
