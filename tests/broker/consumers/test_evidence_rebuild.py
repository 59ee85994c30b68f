"""EVR-6 evidence pinned to the stream, on the real broker: the live feeder and worker
against ``turnaudit eval rebuild`` and the ``htir`` replay outputs of the same range."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from prometheus_client import CollectorRegistry

from tests.support.events import task_turn
from tests.support.streams import (
    consumed_everything,
    feeder,
    one_trace,
    publish_simulated,
    published_traces,
    running,
    wait_for,
)
from turnaudit.cli import main
from turnaudit.consumers.auditor_worker import AuditorEvaluationWorker, checkpoint_path
from turnaudit.evaluation.auditors import RuleBasedAuditor
from turnaudit.evaluation.errors import AuditorIdentityError
from turnaudit.evaluation.files import (
    AuditorIdentity,
    Case,
    LabelPack,
    Trace,
    load_evidence,
    write_json,
)
from turnaudit.evaluation.labels import TaskLabel, labels_from_ground_truth, load_task_labels
from turnaudit.htir import HtirTrace
from turnaudit.kafka.admin import admin_client
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.producers.simulator import GroundTruth
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def live_pipeline(
    settings: KafkaSettings, tmp_path: Path, *, events: int, seed: int
) -> tuple[GroundTruth, int]:
    """Simulated turns (every schema version) through the live feeder; (truth, traces)."""
    truth = publish_simulated(settings, events, tmp_path / "spool", seed=seed)
    end = end_offsets(settings, settings.topics.turn_events)
    service, sink = feeder(settings, f"feeder-{seed}", idle=4.0)
    with running(service):
        # Positions reach the end only once no trace is open (offsets held back till then).
        assert wait_for(consumed_everything(service, end), timeout=120)
    return truth, sink.published


def live_worker(
    settings: KafkaSettings, labels: dict[str, TaskLabel], evidence: Path, traces: int, group: str
) -> AuditorEvaluationWorker:
    worker = AuditorEvaluationWorker(
        settings,
        RuleBasedAuditor(),
        labels,
        group_id=group,
        registry=CollectorRegistry(),
        evidence_path=evidence,
    )
    worker.run(until=lambda tally: tally.traces >= traces)
    return worker


def cli_env(monkeypatch: pytest.MonkeyPatch, settings: KafkaSettings) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)


def turn_messages(settings: KafkaSettings) -> dict[tuple[int, int], str]:
    """(partition, offset) -> event id of every message on the turn-events topic."""
    decode = decoder_for(settings)
    topic = settings.topics.turn_events
    return {
        (m.partition() or 0, m.offset() or 0): decode(m.value()).event["event_id"]
        for m in read_range(settings, topic, None, end_offsets(settings, topic))
    }


def test_evidence_rebuilt_from_the_stream_is_the_live_workers_evidence_byte_for_byte(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    truth, traces = live_pipeline(kafka_settings, tmp_path, events=2400, seed=41)
    truth_path = tmp_path / "truth.json"
    write_json(truth_path, truth.as_json())
    live = tmp_path / "live-evidence.json"
    worker = live_worker(
        kafka_settings, labels_from_ground_truth(truth.as_json()), live, traces, "auditor-live"
    )
    assert not checkpoint_path(live).exists()  # the battery was checked, then written
    evidence = load_evidence(live)
    assert len(evidence.cases) >= 24
    assert worker.tally.traces == traces

    cli_env(monkeypatch, kafka_settings)
    rebuilt = tmp_path / "rebuilt-evidence.json"
    code = main(
        [
            "eval",
            "rebuild",
            "--labels",
            str(truth_path),
            "--auditor",
            "rules",
            "--output",
            str(rebuilt),
            "--traces",
            str(tmp_path / "traces.htir.jsonl"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out

    assert sha256(rebuilt) == sha256(live)
    summary = json.loads(out.split("rebuilt ", 1)[1])
    assert summary["evidence_sha256"] == "sha256:" + sha256(live)
    assert summary["latencies_recorded"] == len(evidence.cases)
    assert summary["latencies_measured"] == 0
    # Every case names the topic, partitions and offset ranges it came from, and those
    # offsets hold exactly the trace's turns.
    at = turn_messages(kafka_settings)
    for case in evidence.cases:
        stream = case.trace.source["stream"]
        assert stream["topic"] == kafka_settings.topics.turn_events
        assert stream["exact"] is True
        offsets = [
            (p["partition"], o)
            for p in stream["partitions"]
            for first, last in p["offset_ranges"]
            for o in range(first, last + 1)
        ]
        assert sorted(at[where] for where in offsets) == sorted(case.trace.source["event_ids"])

    # An auditor that is not the recorded one cannot borrow its latencies: the
    # rebuild then measures afresh (a file that differs only by its latencies).
    fresh = tmp_path / "measured.json"
    assert (
        main(
            [
                "eval",
                "rebuild",
                "--labels",
                str(truth_path),
                "--output",
                str(fresh),
                "--measure-latency",
            ]
        )
        == 0
    )
    assert sha256(fresh) != sha256(live)
    measured, recorded = load_evidence(fresh), evidence
    assert [
        (c.task_id, [(o.prefix_end, o.verdict) for o in c.observations or ()])
        for c in measured.cases
    ] == [
        (c.task_id, [(o.prefix_end, o.verdict) for o in c.observations or ()])
        for c in recorded.cases
    ]


def test_a_label_whose_trace_changed_is_refused_by_the_worker_and_by_the_rebuild(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    truth, traces = live_pipeline(kafka_settings, tmp_path, events=900, seed=42)
    # A label pack reviewed on the traces the feeder published; one was reviewed on a
    # different version of its trace (its answer was edited after review).
    reviewed = {t.task_id: t for t in published_traces(kafka_settings)}
    labels_truth = labels_from_ground_truth(truth.as_json())
    cases = []
    for task_id in sorted(reviewed):
        trace, label = reviewed[task_id], labels_truth[task_id]
        step = trace.turn_index(label.oracle_alarm_turn) if label.alarm_positive else None
        if label.alarm_positive and step is None:
            continue
        cases.append(
            Case(
                task_id,
                trace.task_family,
                "reviewer/1",
                step,
                Trace(tuple(trace.steps), {"run": task_id}),
            )
        )
    changed_id = cases[0].task_id
    edited = [dict(s) for s in cases[0].trace.steps]
    edited[-1]["surface"] = "the answer the reviewer saw"
    cases[0] = Case(
        changed_id,
        cases[0].task_family,
        cases[0].oracle_source,
        cases[0].oracle_alarm_step,
        Trace(tuple(edited), cases[0].trace.source),
    )
    pack = tmp_path / "labels.json"
    write_json(pack, LabelPack(tuple(cases)).to_json())

    live = tmp_path / "live.json"
    live_worker(kafka_settings, load_task_labels(pack), live, traces, "auditor-bound")
    evidence = load_evidence(live)
    assert changed_id not in {c.task_id for c in evidence.cases}
    (refused,) = evidence.exclusions
    assert refused.task_id == changed_id
    assert refused.reason == "label_trace_changed"
    assert "changed since review" in refused.detail
    assert refused.source["stream"]["partitions"]
    assert len(evidence.cases) == len(cases) - 1

    cli_env(monkeypatch, kafka_settings)
    rebuilt = tmp_path / "rebuilt.json"
    assert main(["eval", "rebuild", "--labels", str(pack), "--output", str(rebuilt)]) == 0
    capsys.readouterr()
    assert sha256(rebuilt) == sha256(live)


def test_a_trace_missing_a_middle_turn_is_published_flagged_and_kept_out_of_the_evidence(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
) -> None:
    # Task step 2 never reached the stream.
    events = [task_turn("gap-session", "t-gap", step, last=4) for step in (0, 1, 3, 4)]
    trace = one_trace(kafka_settings, events, "feeder-gap")
    assert trace.missing_task_steps == [2]
    assert [s["index"] for s in trace.steps] == list(range(len(trace.steps)))

    labels = {"t-gap": TaskLabel("code-fix", "truth/1", oracle_alarm_turn=3, alarm_positive=True)}
    evidence_path = tmp_path / "evidence.json"
    worker = live_worker(kafka_settings, labels, evidence_path, 1, "auditor-gap")
    evidence = load_evidence(evidence_path)
    assert evidence.cases == ()
    (excluded,) = evidence.exclusions
    assert excluded.reason == "trace_missing_turns"
    assert "[2]" in excluded.detail
    assert worker.tally.gapped == 1


class RepointedModel(RuleBasedAuditor):
    """The served model changes under the worker: the end-of-battery check sees it."""

    def end_battery(self) -> None:
        self._identity = AuditorIdentity(self.NAME, "sha256:" + "00" * 32)


def test_the_identity_check_runs_before_the_evidence_is_written(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
) -> None:
    truth, traces = live_pipeline(kafka_settings, tmp_path, events=400, seed=43)
    evidence_path = tmp_path / "evidence.json"
    worker = AuditorEvaluationWorker(
        kafka_settings,
        RepointedModel(),
        labels_from_ground_truth(truth.as_json()),
        group_id="auditor-repointed",
        registry=CollectorRegistry(),
        evidence_path=evidence_path,
    )
    with pytest.raises(AuditorIdentityError, match="no evidence written"):
        worker.run(until=lambda tally: tally.traces >= traces)
    assert worker.tally.traces == traces
    assert not evidence_path.exists()
    assert not checkpoint_path(evidence_path).exists()


def test_htir_replay_outputs_are_deterministic_and_hold_the_feeders_traces(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, traces = live_pipeline(kafka_settings, tmp_path, events=900, seed=44)
    live = {t.task_id: t for t in published_traces(kafka_settings)}
    assert len(live) == traces
    cli_env(monkeypatch, kafka_settings)
    first, second = tmp_path / "a.htir.jsonl", tmp_path / "b.htir.jsonl"
    assert main(["replay", "--into", f"htir:{first}", "--batch-size", "50"]) == 0
    assert main(["replay", "--into", f"htir:{second}", "--batch-size", "999"]) == 0
    assert first.read_bytes() == second.read_bytes()
    lines = [json.loads(line) for line in first.read_text().splitlines()]
    replayed = {r["task_id"]: HtirTrace.from_avro(r) for r in lines}
    assert set(replayed) == set(live)
    for task_id, trace in replayed.items():
        assert trace.steps == live[task_id].steps
        assert trace.turn_offsets == live[task_id].turn_offsets
        assert trace.closed_by == live[task_id].closed_by

    # Into a topic: the same traces, readable by the worker's decoder.
    topic = f"{kafka_settings.topics.prefix}replayed-traces"
    admin = admin_client(kafka_settings)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    monkeypatch.chdir(tmp_path)
    assert main(["replay", "--into", f"htir-topic:{topic}"]) == 0
    capsys.readouterr()
    on_topic = published_traces(kafka_settings, topic)
    assert [t.task_id for t in on_topic] == [r["task_id"] for r in lines]
    assert all(t.steps == replayed[t.task_id].steps for t in on_topic)


def test_a_rebuild_whose_auditor_does_not_reproduce_the_recorded_verdicts_writes_nothing(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    truth, traces = live_pipeline(kafka_settings, tmp_path, events=500, seed=45)
    truth_path = tmp_path / "truth.json"
    write_json(truth_path, truth.as_json())
    live = tmp_path / "live.json"
    live_worker(
        kafka_settings, labels_from_ground_truth(truth.as_json()), live, traces, "auditor-forged"
    )
    case = load_evidence(live).cases[0]
    # A later record for the same trace and auditor, every verdict flipped.
    topic = kafka_settings.topics.auditor_observations
    decode = TurnEventDeserializer(shipped_catalog("auditor_observation"))
    written = read_range(kafka_settings, topic, None, end_offsets(kafka_settings, topic))
    (record,) = [
        r for r in (decode(m.value()).event for m in written) if r["task_id"] == case.task_id
    ]
    for observation in record["observations"]:
        observation["verdict"] = "ok" if observation["verdict"] == "alarm" else "alarm"
    serialize = SingleObjectSerializer(shipped_catalog("auditor_observation").latest)
    producer = Producer(kafka_settings.client_config())
    producer.produce(topic, serialize(record), case.task_id.encode())
    assert producer.flush(10) == 0

    cli_env(monkeypatch, kafka_settings)
    rebuilt = tmp_path / "rebuilt.json"
    code = main(["eval", "rebuild", "--labels", str(truth_path), "--output", str(rebuilt)])
    err = capsys.readouterr().err
    assert code == 1
    assert case.task_id in err
    assert "does not reproduce" in err
    assert not rebuilt.exists()


def test_a_worker_stopped_before_its_identity_check_leaves_a_checkpoint_not_evidence(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
) -> None:
    truth, traces = live_pipeline(kafka_settings, tmp_path, events=900, seed=46)
    labels = labels_from_ground_truth(truth.as_json())
    evidence_path = tmp_path / "evidence.json"

    def worker() -> AuditorEvaluationWorker:
        return AuditorEvaluationWorker(
            kafka_settings,
            RuleBasedAuditor(),
            labels,
            group_id="auditor-crash",
            registry=CollectorRegistry(),
            evidence_path=evidence_path,
        )

    # The first worker goes away after some batches, before its end-of-battery check
    # (as a killed process would): its progress is a checkpoint, which no gate reads.
    first = worker()
    first.sink.until = lambda tally: tally.traces >= traces // 2
    first.sink.begin()
    first.service.run()
    assert not evidence_path.exists()
    checkpoint = json.loads(checkpoint_path(evidence_path).read_text())
    assert checkpoint["format"] == "turn-audit/evr6-evidence-checkpoint"
    assert (
        main(
            [
                "eval",
                "gate",
                str(checkpoint_path(evidence_path)),
                "--output",
                str(tmp_path / "r.json"),
            ]
        )
        == 2
    )
    # The next one continues it, checks the identity, then writes the evidence.
    second = worker()
    second.run(until=lambda tally: first.tally.traces + tally.traces >= traces)
    assert not checkpoint_path(evidence_path).exists()
    ids = [c.task_id for c in load_evidence(evidence_path).cases]
    assert len(ids) == len(set(ids))
    assert set(checkpoint_ids := [c["task_id"] for c in checkpoint["cases"]]) <= set(ids)
    assert len(ids) == second.tally.labelled >= len(checkpoint_ids)
