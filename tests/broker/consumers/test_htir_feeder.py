"""The HTIR feeder and the auditor-evaluation worker on the real broker."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from tests.support.events import encode, task_turn
from tests.support.sinks import deliver
from tests.support.streams import (
    consumed_everything,
    feeder,
    http_get,
    one_trace,
    publish_simulated,
    published_traces,
    running,
    scrape,
    service_settings,
    task_steps_on_stream,
    total,
    wait_for,
)
from turnaudit.commands.demo_evaluation import run_evaluation_stage
from turnaudit.consumers.auditor_worker import AuditorEvaluationWorker
from turnaudit.consumers.htir_feeder import HtirFeederSink
from turnaudit.consumers.runtime import ConsumedTurn, ConsumerService
from turnaudit.consumers.runtime.settings import ServiceName
from turnaudit.contracts import SequenceCheck, SequenceOutcome
from turnaudit.dead_letters import read_dead_letter_headers
from turnaudit.errors import EventRefusedError
from turnaudit.evaluation import review_pack
from turnaudit.evaluation.auditors import RuleBasedAuditor
from turnaudit.evaluation.errors import ContaminatedLabelPackError, ReviewPackError
from turnaudit.evaluation.evidence import produce_evidence
from turnaudit.evaluation.labels import TaskLabel, labels_from_ground_truth
from turnaudit.htir import HtirTrace
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.local_broker import free_port
from turnaudit.producers.adapter import TurnAuditEmitter
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.records import record_headers
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


def fed_traces(
    settings: KafkaSettings, tmp_path: Path, *, events: int, seed: int
) -> tuple[HtirFeederSink, dict[str, TaskLabel]]:
    """Publish a simulated run, feed it into traces; the sink and the run's labels."""
    truth = publish_simulated(settings, events, tmp_path / "spool", seed=seed)
    end = end_offsets(settings, settings.topics.turn_events)
    service, sink = feeder(settings, f"feeder-{seed}")
    with running(service):
        assert wait_for(consumed_everything(service, end), timeout=90)
    return sink, labels_from_ground_truth(truth.as_json())


def test_one_complete_trace_per_task_and_a_reviewable_manifest(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    truth = publish_simulated(kafka_settings, 2500, tmp_path / "spool", seed=31)
    manifest = tmp_path / "manifest.jsonl"
    service, sink = feeder(kafka_settings, "feeder-a", manifest)
    end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    with running(service):
        assert wait_for(consumed_everything(service, end), timeout=90)
    traces = published_traces(kafka_settings)
    tasks = {t.task_id: t for t in truth.tasks}
    assert sorted(t.task_id for t in traces) == sorted(tasks)
    for trace in traces:
        turns = [s for s in trace.steps if s["kind"] == "turn"]
        assert [s["index"] for s in trace.steps] == list(range(len(trace.steps)))
        assert len(turns) <= tasks[trace.task_id].steps
        if trace.closed_by is not None and trace.closed_by.value == "END_OF_TASK":
            assert [s["task_step"] for s in turns] == list(range(tasks[trace.task_id].steps))
        assert trace.source["topic"] == kafka_settings.topics.turn_events
        assert len(set(trace.event_ids)) == len(turns)

    # The manifest the feeder wrote goes through review-pack export and finalize.
    lines = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert len(lines) == len(traces) == sink.published
    sources = []
    for family in sorted({line["task_family"] for line in lines}):
        path = tmp_path / f"{family}.jsonl"
        path.write_text("".join(json.dumps(x) + "\n" for x in lines if x["task_family"] == family))
        sources.append((family, path))
    pack_path = tmp_path / "review-pack.json"
    review_pack.export(sources, pack_path)
    pack = json.loads(pack_path.read_text())
    with pytest.raises(ReviewPackError, match="pending"):
        review_pack.finalize(pack_path, tmp_path / "labels.json")
    for case in pack["cases"]:
        task = tasks[case["task_id"]]
        trace = next(t for t in traces if t.task_id == case["task_id"])
        if task.oracle_alarm_turn is not None and trace.turn_index(task.oracle_alarm_turn) is None:
            case["review"]["status"] = "excluded"  # ended before the failure: not labelable
            continue
        case["review"]["status"] = "included"
        case["oracle_source"] = "simulator-ground-truth@v1"
        case["oracle_alarm_step"] = (
            None if task.oracle_alarm_turn is None else trace.turn_index(task.oracle_alarm_turn)
        )
    pack_path.write_text(json.dumps(pack))
    labels = review_pack.finalize(pack_path, tmp_path / "labels.json")
    assert labels.cases
    assert all("context" not in json.dumps(c.to_json()) for c in labels.cases[:1])
    report = produce_evidence(
        tmp_path / "labels.json",
        RuleBasedAuditor(),
        evidence_output=tmp_path / "evidence.json",
        report_output=tmp_path / "report.json",
    )
    assert report["overall"]["traces"] == len(labels.cases)
    # Evidence is not a label pack: feeding it back is refused.
    with pytest.raises(ContaminatedLabelPackError):
        produce_evidence(
            tmp_path / "evidence.json",
            RuleBasedAuditor(),
            evidence_output=tmp_path / "e2.json",
            report_output=tmp_path / "r2.json",
        )


def test_a_restarted_feeder_rebuilds_open_traces_whole(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    truth = publish_simulated(kafka_settings, 1500, tmp_path / "spool", seed=32)
    end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    manifest = tmp_path / "manifest.jsonl"
    first, first_sink = feeder(kafka_settings, "feeder-restart", manifest, idle=3600)
    with running(first):
        assert wait_for(lambda: first_sink.published > 0, timeout=60)
    # Stopped with traces still open (a long idle timeout): their turns'
    # offsets were held back, so the next feeder in the group reads them again.
    second, _ = feeder(kafka_settings, "feeder-restart", manifest, idle=1.0)
    with running(second):
        assert wait_for(consumed_everything(second, end), timeout=90)
    traces = published_traces(kafka_settings)
    assert {t.task_id for t in traces} == {t.task_id for t in truth.tasks}
    by_task: dict[str, list[HtirTrace]] = {}
    for trace in traces:
        by_task.setdefault(trace.task_id, []).append(trace)
    tasks = {t.task_id: t for t in truth.tasks}
    for task_id, copies in by_task.items():
        # A trace published twice is the same trace (same task id, same steps).
        assert all(c.steps == copies[0].steps for c in copies)
        turns = [s["task_step"] for s in copies[0].steps if s["kind"] == "turn"]
        assert turns == list(range(len(turns)))
        assert len(turns) <= tasks[task_id].steps
    # The manifest holds every task once, even the ones published twice.
    written = [json.loads(line)["task_id"] for line in manifest.read_text().splitlines()]
    assert sorted(written) == sorted(by_task)


@pytest.mark.parametrize("kept", [1, 0.5])
def test_a_feeder_restarted_on_a_torn_manifest_line_writes_that_trace_again_whole(
    kafka_settings: KafkaSettings, tmp_path: Path, kept: float
) -> None:
    # A feeder killed (or out of disk) while writing a manifest line leaves part
    # of it; its turns' offsets were not stored, so the trace comes again.
    publish_simulated(kafka_settings, 800, tmp_path / "spool", seed=33)
    end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    manifest = tmp_path / "manifest.jsonl"
    first, _ = feeder(kafka_settings, "feeder-torn-1", manifest)
    with running(first):
        assert wait_for(consumed_everything(first, end), timeout=90)
    whole = manifest.read_bytes().split(b"\n")[:-1]
    torn = whole[-1][: max(1, int(len(whole[-1]) * kept) - 1)]
    manifest.write_bytes(b"".join(line + b"\n" for line in whole[:-1]) + torn)
    # A group that never committed: every trace is published again.
    second, _ = feeder(kafka_settings, "feeder-torn-2", manifest)
    with running(second):
        assert wait_for(consumed_everything(second, end), timeout=90)
    again = manifest.read_bytes()
    assert again.endswith(b"\n")
    lines = [json.loads(line) for line in again.split(b"\n")[:-1]]
    originals = [json.loads(line) for line in whole]
    assert sorted(line["task_id"] for line in lines) == sorted(x["task_id"] for x in originals)
    rewritten = next(x for x in lines if x["task_id"] == originals[-1]["task_id"])
    assert rewritten["trace"]["steps"] == originals[-1]["trace"]["steps"]
    # The manifest goes to review as it is, the family taken from its lines.
    pack = review_pack.export([(None, manifest)], tmp_path / "pack.json")
    assert len(pack["cases"]) == len(originals)


def test_simulated_tasks_flow_to_a_gate_decision(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    before = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    truth = publish_simulated(kafka_settings, 3000, tmp_path / "spool", seed=7)
    outcome = run_evaluation_stage(
        kafka_settings, truth, 120, start_offsets=before, output_dir=tmp_path / "out"
    )
    assert all(row.ok for row in outcome.rows), outcome.rows
    audited = next(r.observed for r in outcome.rows if r.label == "traces audited by the worker")
    # Every audited trace is either a case of the evidence or named as left out.
    cases = len(json.loads(outcome.evidence_path.read_text())["cases"])
    assert cases + sum(outcome.left_out.values()) == audited
    report = json.loads(outcome.report_path.read_text())
    assert report == outcome.report
    # The decision follows from the figures: hold exactly when a requirement failed,
    # and every failure names a figure on the wrong side of its threshold.
    failed = report["failed_requirements"]
    assert report["decision"] == ("hold" if failed else "pass")
    for failure in failed:
        actual, threshold = failure["actual"], failure["threshold"]
        if failure["comparison"] == ">=":
            assert actual is None or actual < threshold, failure
        elif failure["comparison"] == "<=":
            assert actual is None or actual > threshold, failure
    assert report["overall"]["traces"] >= 24
    assert report["overall"]["alarm_positive"] >= 8
    assert report["overall"]["healthy"] >= 8
    assert len(report["families"]) >= 4
    for family in report["families"].values():
        assert family["traces"] >= 4
        assert family["alarm_positive"] > 0
        assert family["healthy"] > 0
    evidence = json.loads(outcome.evidence_path.read_text())
    assert evidence["format"] == "turn-audit/evr6-evidence"
    for case in evidence["cases"]:
        assert [o["prefix_end"] for o in case["observations"]] == list(
            range(len(case["trace"]["steps"]))
        )


def test_the_worker_replays_each_trace_once_and_publishes_observations(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    sink, labels = fed_traces(kafka_settings, tmp_path, events=1200, seed=33)
    calls = {"n": 0}

    class CountingAuditor(RuleBasedAuditor):
        def assess(self, steps_prefix):  # type: ignore[no-untyped-def]  # the base's signature, unannotated
            calls["n"] += 1
            return super().assess(steps_prefix)

    auditor = CountingAuditor()
    worker = AuditorEvaluationWorker(
        kafka_settings, auditor, labels, group_id="auditor-w", registry=CollectorRegistry()
    )
    worker.run(until=lambda tally: tally.traces >= sink.published)
    traces = published_traces(kafka_settings)
    assert worker.tally.traces == len({t.task_id for t in traces})
    assert calls["n"] == sum(len(t.steps) for t in {t.task_id: t for t in traces}.values())
    topic = kafka_settings.topics.auditor_observations
    decode = TurnEventDeserializer(shipped_catalog("auditor_observation"))
    observed = [
        decode(msg.value()).event
        for msg in read_range(kafka_settings, topic, None, end_offsets(kafka_settings, topic))
    ]
    assert {o["task_id"] for o in observed} == {t.task_id for t in traces}
    assert all(o["auditor_id"] == auditor.identity.to_json() for o in observed)


def test_a_restarted_worker_continues_its_evidence_file(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    sink, labels = fed_traces(kafka_settings, tmp_path, events=1500, seed=34)
    evidence_path = tmp_path / "evidence.json"

    def worker() -> AuditorEvaluationWorker:
        return AuditorEvaluationWorker(
            kafka_settings,
            RuleBasedAuditor(),
            labels,
            group_id="auditor-r",
            registry=CollectorRegistry(),
            evidence_path=evidence_path,
        )

    first = worker()
    first.run(until=lambda tally: tally.traces >= sink.published // 2)
    on_disk = json.loads(evidence_path.read_text())
    assert 0 < len(on_disk["cases"]) < sink.published
    second = worker()
    second.run(until=lambda tally: first.tally.traces + tally.traces >= sink.published)
    final = json.loads(evidence_path.read_text())
    ids = [c["task_id"] for c in final["cases"]]
    assert len(ids) == len(set(ids))  # no case twice
    usable = first.tally.labelled + second.tally.labelled - len(on_disk["cases"])
    assert len(ids) == usable


def test_a_contract_breaking_turn_stays_in_its_trace_and_raises_the_alarm(
    kafka_settings: KafkaSettings,
) -> None:
    # A three-turn task whose middle turn breaks contract 1 (refusal and hedge).
    breaking = {
        "refusal_emitted": True,
        "surface_before_hedge": "[refusal] no.",
        "surface": "I may be wrong, but [refusal] no.",
    }
    events = [
        task_turn("task-session", "t-breach", step, last=2, **(breaking if step == 1 else {}))
        for step in range(3)
    ]
    trace = one_trace(kafka_settings, events, "feeder-breach")
    turns = [s for s in trace.steps if s["kind"] == "turn"]
    assert [s["task_step"] for s in turns] == [0, 1, 2]
    assert turns[1]["contract_breaches"][0].startswith("refusal_hedge_exclusive")
    assert turns[0]["contract_breaches"] == []
    auditor = RuleBasedAuditor()
    first_alarm = next(
        k for k in range(len(trace.steps)) if auditor.assess(trace.steps[: k + 1]) == "alarm"
    )
    assert trace.steps[first_alarm]["task_step"] == 1
    # A breach is recorded, not removed: the dead-letter topic is for what cannot be read.
    dlq = kafka_settings.topics.dlq
    assert list(read_range(kafka_settings, dlq, None, end_offsets(kafka_settings, dlq))) == []


def test_the_worker_serves_metrics_and_health_and_dead_letters_a_bad_trace(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    sink, labels = fed_traces(kafka_settings, tmp_path, events=400, seed=35)
    producer = Producer(kafka_settings.client_config())
    producer.produce(kafka_settings.topics.htir_traces, b"not a trace", b"t-bad")
    assert producer.flush(10) == 0
    worker = AuditorEvaluationWorker(
        kafka_settings,
        RuleBasedAuditor(),
        labels,
        group_id="auditor-http",
        registry=CollectorRegistry(),
        settings=service_settings(kafka_settings, ServiceName.AUDITOR_WORKER, "auditor-http"),
        serve_http=True,
    )
    port = worker.http_port
    assert port is not None
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        end = end_offsets(kafka_settings, kafka_settings.topics.htir_traces)
        assert wait_for(
            lambda: all(worker.service.positions().get(p, 0) >= e for p, e in end.items() if e > 0)
        )
        samples = scrape(port)
        ready, ready_body = http_get(port, "/healthz")
        live, _ = http_get(port, "/livez")
    finally:
        worker.stop()
        thread.join(60)
    assert not thread.is_alive()
    assert ready == 200
    assert live == 200
    body = json.loads(ready_body)
    assert body["service"] == "auditor-worker"
    assert body["topic"] == kafka_settings.topics.htir_traces
    assert body["assigned_partitions"] == [0, 1, 2]
    assert total(samples, "turnaudit_auditor_traces_total") == sink.published
    assert total(samples, "turnaudit_consumer_messages_total", outcome="accepted") == sink.published
    assert total(samples, "turnaudit_dead_letters_total", reason="unknown_framing") == 1
    dlq = kafka_settings.topics.dlq
    (letter,) = read_range(kafka_settings, dlq, None, end_offsets(kafka_settings, dlq))
    headers = read_dead_letter_headers(record_headers(letter))
    assert headers["stage"] == "auditor-worker/auditor-http"
    assert headers["topic"] == kafka_settings.topics.htir_traces


def publish_events(settings: KafkaSettings, events: list[dict[str, Any]], spool: Path) -> None:
    """Simulated turns through the adapter and a publisher of their own."""
    publisher = TurnEventPublisher(settings, spool_dir=spool)
    emitter = TurnAuditEmitter(publisher, lambda event, breaches: None)
    for event in events:
        with contextlib.suppress(EventRefusedError):
            emitter.emit(event)
    assert publisher.close().ok


def test_open_traces_follow_their_partition_to_a_feeder_that_joins(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """A second feeder joins the group while the first holds open traces: each
    task's trace is published whole, by whoever reads its partition at the end,
    and never in part by the member that lost it (idle-closed there, or with
    re-read turns twice)."""
    sim = TurnRuntimeSimulator(41, schema_versions=(3,), concurrent_sessions=60)
    events = list(sim.events(2400))
    publish_events(kafka_settings, events[:1200], tmp_path / "spool-1")
    half = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    registry = CollectorRegistry()
    first_sink = HtirFeederSink(kafka_settings, registry=registry, idle_timeout=6.0)
    first = ConsumerService(
        service_settings(kafka_settings, ServiceName.HTIR_FEEDER, "feeder-join"),
        first_sink,
        registry=registry,
    )
    second, second_sink = feeder(kafka_settings, "feeder-join", idle=6.0)
    partitions = set(half)

    def first_read(messages: int) -> Callable[[], bool]:
        # Read, not stored: the offsets of turns in open traces are held back.
        return lambda: (
            sum(
                registry.get_sample_value("turnaudit_consumer_messages_total", {"outcome": o}) or 0
                for o in ("accepted", "dead_lettered")
            )
            >= messages
        )

    with running(first):
        assert wait_for(first_read(sum(half.values())), timeout=90)
        assert first_sink.open_traces > 0  # tasks run on past the first half
        with running(second):
            # The group settles with each partition read by exactly one of the two.
            assert wait_for(
                lambda: (
                    bool(second.health.partitions())
                    and bool(first.health.partitions())
                    and set(first.health.partitions()) | set(second.health.partitions())
                    == partitions
                    and not set(first.health.partitions()) & set(second.health.partitions())
                ),
                timeout=90,
            )
            publish_events(kafka_settings, events[1200:], tmp_path / "spool-2")
            end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)

            def everything_read() -> bool:
                positions = {**first.positions(), **second.positions()}
                return all(positions.get(p, 0) >= e for p, e in end.items() if e > 0)

            assert wait_for(everything_read, timeout=90)
            # Tasks the run cut short close when idle; then nothing is open anywhere.
            assert wait_for(
                lambda: first_sink.open_traces == 0 and second_sink.open_traces == 0, timeout=60
            )
    expected = task_steps_on_stream(kafka_settings)
    traces = published_traces(kafka_settings)
    assert {t.task_id for t in traces} == set(expected)
    for trace in traces:
        turns = [s["task_step"] for s in trace.steps if s["kind"] == "turn"]
        assert turns == expected[trace.task_id], trace.task_id
    assert first_sink.published > 0
    assert second_sink.published > 0


def test_a_revoked_partition_holds_no_offset_back_even_for_an_unacknowledged_trace(
    kafka_settings: KafkaSettings,
) -> None:
    # A broker that never answers: a closed trace stays unacknowledged, its
    # first turn's offset held back, until its partition is revoked.
    unreachable = replace(kafka_settings, bootstrap_servers=f"127.0.0.1:{free_port()}")
    sink = HtirFeederSink(unreachable, registry=CollectorRegistry(), idle_timeout=3600)
    decode = TurnEventDeserializer(shipped_catalog())

    def consumed(event: dict[str, Any], partition: int, offset: int) -> ConsumedTurn:
        return ConsumedTurn(
            decode(encode(event)), SequenceCheck(SequenceOutcome.IN_ORDER), "t", partition, offset
        )

    closed = [task_turn("s-a", "task-a", step, last=1) for step in (0, 1)]
    still_open = task_turn("s-b", "task-b", 0, last=3)
    deliver(
        sink, [consumed(closed[0], 0, 40), consumed(still_open, 1, 7), consumed(closed[1], 0, 41)]
    )
    assert sink.published == 0  # not acknowledged
    assert sink.held_offsets() == {0: 40, 1: 7}

    sink.partitions_revoked({0})

    assert sink.held_offsets() == {1: 7}
    assert sink.open_traces == 1
