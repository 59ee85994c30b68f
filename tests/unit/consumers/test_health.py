"""Liveness and readiness that tell the truth, and client errors at a bounded rate."""

from __future__ import annotations

from confluent_kafka import KafkaError
from structlog.testing import capture_logs

from turnaudit.consumers.runtime.health import LOOP_STALL_S, ServiceHealth, is_denial
from turnaudit.kafka.consumer import client_error
from turnaudit.records import ClientError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def health(clock: Clock, report_s: float = 30.0) -> ServiceHealth:
    h = ServiceHealth(
        {"service": "log-sink"}, unassigned_bound_s=30.0, report_interval_s=report_s, clock=clock
    )
    h.running = True
    h.last_loop = clock.now
    return h


def down() -> ClientError:
    return client_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))


def refused() -> ClientError:
    return client_error(
        KafkaError(KafkaError._TRANSPORT, "Connect to 127.0.0.1:1 failed: Connection refused")
    )


def test_readiness_needs_partitions_and_a_broker_liveness_only_a_turning_loop() -> None:
    clock = Clock()
    h = health(clock)
    assert h.liveness().ok
    ready = h.readiness()
    assert not ready.ok
    assert ready.body["status"] == "not_ready"
    assert "no partition assigned yet" in ready.body["reasons"][0]
    h.assigned({0, 1})
    assert h.readiness().ok
    assert h.readiness().body["assigned_partitions"] == [0, 1]
    # A rebalance takes partitions away for a moment: still ready within the bound.
    h.revoked({0, 1})
    clock.now += 10
    h.last_loop = clock.now
    assert h.readiness().ok
    clock.now += 25
    h.last_loop = clock.now
    assert h.readiness().body["reasons"] == ["no partition assigned for 35 s"]
    h.assigned({2})
    h.client_error(down())
    not_ready = h.readiness()
    assert not not_ready.ok
    assert not_ready.body["reasons"][0].startswith("broker unreachable for 0 s: ")
    assert h.liveness().ok  # a missing broker is no reason to restart the process
    h.broker_reachable()
    assert h.readiness().ok
    clock.now += LOOP_STALL_S + 1  # the loop stopped polling
    assert not h.liveness().ok
    assert h.readiness().body["status"] == "unhealthy"
    h.last_loop = clock.now
    h.stopping = True
    assert h.readiness().body["reasons"] == ["stopping"]


def test_an_unreachable_broker_is_reported_once_then_at_a_bounded_rate() -> None:
    clock = Clock()
    h = health(clock, report_s=10.0)
    with capture_logs() as logs:
        for _ in range(60):  # 45 errors a second for 60 s
            h.client_error(down())
            for _ in range(44):
                h.client_error(refused())
            clock.now += 1.0
        h.broker_reachable()
    events = [entry["event"] for entry in logs]
    assert events[0] == "kafka_broker_unreachable"
    assert events.count("kafka_broker_unreachable") == 1
    assert 5 <= events.count("kafka_client_errors") <= 6  # one per 10 s
    assert events[-1] == "kafka_broker_reachable"
    reported = sum(e.get("errors_since_last_report", 0) for e in logs) + 1
    assert reported <= 60 * 45  # every error counted in some report (the last partial one aside)
    assert reported > 60 * 45 - 10 * 45


def test_a_flapping_broker_makes_at_most_three_lines_per_interval() -> None:
    clock = Clock()
    h = health(clock, report_s=10.0)
    with capture_logs() as logs:
        for _ in range(30):  # down and back every second for 30 s
            h.client_error(down())
            clock.now += 0.5
            h.broker_reachable()
            clock.now += 0.5
    assert len(logs) <= 3 * (30 / 10 + 1)
    assert [e["event"] for e in logs][:2] == ["kafka_broker_unreachable", "kafka_broker_reachable"]


DENIALS = {
    "GROUP_AUTHORIZATION_FAILED",
    "TOPIC_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
}


def every_kafka_error() -> list[ClientError]:
    codes = {
        v
        for k, v in vars(KafkaError).items()
        if k.isupper() or k.startswith("_")
        if isinstance(v, int) and not isinstance(v, bool)
    }
    return [client_error(KafkaError(code, "refused by the broker")) for code in sorted(codes)]


def test_every_authorization_error_and_only_those_make_a_denial_reason_until_assigned() -> None:
    errors = every_kafka_error()
    assert {e.name for e in errors} >= DENIALS  # the table covers librdkafka's denials
    for error in errors:
        clock = Clock()
        h = health(clock)
        h.client_error(error)
        reasons = h.readiness().body["reasons"]
        denied = [r for r in reasons if r.startswith("authorization denied: ")]
        assert bool(denied) == (error.name in DENIALS), (error.name, reasons)
        assert is_denial(error) == (error.name in DENIALS)
        h.assigned({0})  # the principal got its partitions: the denial is over
        assert not any("authorization" in r for r in h.readiness().body["reasons"])
