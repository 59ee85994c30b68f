"""The producer wrapper with a real librdkafka client and no broker.

The client points at a loopback port where nothing listens: its queue fills
(``queue.buffering.max.messages`` small) and messages time out
(``message.timeout.ms`` small) without any broker, so a full queue, waiting
for room, delivery reports and the flush count are librdkafka's own.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from turnaudit.errors import ConfigurationError, PublishError
from turnaudit.kafka.producer import (
    REPORT_ONLY_ERRORS,
    DeliveredMessage,
    DeliveryError,
    KafkaProducer,
    ProduceError,
    QueueFullError,
    check_client_options,
    is_brokers_down,
    is_permanent,
    is_purged,
    is_size_error,
    queue_full_error,
)
from turnaudit.local_broker import free_port
from turnaudit.records import ClientError

QUEUE = 3


def nowhere(**options: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{free_port()}",
        "queue.buffering.max.messages": QUEUE,
        "log_level": 0,
        "linger.ms": 0,
        **options,
    }


def fill(producer: KafkaProducer) -> None:
    for i in range(QUEUE):
        producer.produce("t", f"m{i}".encode(), b"k")


def test_the_client_is_built_on_first_use_and_a_bad_setting_fails_in_one_line() -> None:
    lazy = KafkaProducer({"bootstrap.servers": "127.0.0.1:1", "no.such.option": "1"})
    assert lazy.queued() == 0  # nothing built yet, nothing raised
    with pytest.raises(ConfigurationError, match=r"^Kafka producer settings: .*no\.such\.option"):
        lazy.open()


def test_client_options_are_judged_by_librdkafka_and_name_the_setting() -> None:
    check_client_options({}, "X")
    check_client_options({"linger.ms": "7"}, "X")
    with pytest.raises(ConfigurationError, match=r"^X: .*CONFIGURATION\.md"):
        check_client_options({"linger.ms": "not a number"}, "X")


def test_a_full_queue_raises_at_once_when_the_producer_says_raise() -> None:
    producer = KafkaProducer(nowhere(), on_full="raise")
    fill(producer)
    started = time.monotonic()
    with pytest.raises(QueueFullError):
        producer.produce("t", b"one more", b"k")
    assert time.monotonic() - started < 0.5
    # (librdkafka's count also holds events it has to hand over, errors included)
    assert producer.queued() >= QUEUE
    assert isinstance(QueueFullError(), BufferError)  # librdkafka's own meaning
    producer.purge()
    producer.flush(1)


def test_a_full_queue_raises_for_one_call_of_a_waiting_producer_and_inside_a_report() -> None:
    producer = KafkaProducer(nowhere(), on_full="wait")
    fill(producer)
    with pytest.raises(QueueFullError):
        producer.produce("t", b"x", b"k", on_full="raise")
    with pytest.raises(QueueFullError):
        producer.produce("t", b"x", b"k", from_callback=True)
    producer.purge()
    producer.flush(1)


def test_a_full_queue_waits_serving_reports_until_there_is_room() -> None:
    # Messages time out after 300 ms: the reports of the full queue make room.
    producer = KafkaProducer(nowhere(**{"message.timeout.ms": 300}), on_full="wait")
    fill(producer)
    started = time.monotonic()
    producer.produce("t", b"waited", b"k")
    waited = time.monotonic() - started
    assert waited >= 0.2  # it waited for the timed-out messages' reports
    assert producer.failed >= 1  # those reports were served, and counted
    assert producer.queued() <= QUEUE


@pytest.mark.parametrize("serve", [True, False])
def test_a_produce_serves_the_ready_reports_unless_told_to_leave_them_for_the_next_poll(
    serve: bool,
) -> None:
    # A message times out after 100 ms (librdkafka scans for timeouts once a second): its
    # report is ready when the next message goes.
    producer = KafkaProducer(nowhere(**{"message.timeout.ms": 100}), on_full="wait")
    reports: list[DeliveryError | None] = []
    producer.produce("t", b"times out", b"k", on_delivery=lambda err, _msg: reports.append(err))
    time.sleep(1.3)
    producer.produce("t", b"next", b"k", serve_reports=serve)
    assert len(reports) == (1 if serve else 0)
    producer.poll(0.5)
    assert len(reports) == 1
    assert reports[0] is not None  # timed out
    producer.purge()
    producer.flush(1)


def test_a_per_call_wait_overrides_a_raising_producer() -> None:
    """One call's ``on_full="wait"`` waits for room where the producer's own setting
    raises; the message it queued is not lost, and the next call raises again."""
    producer = KafkaProducer(nowhere(**{"message.timeout.ms": 300}), on_full="raise")
    fill(producer)
    with pytest.raises(QueueFullError):  # the producer's own setting, on the full queue
        producer.produce("t", b"refused", b"k")
    reports: list[tuple[DeliveryError | None, str | bytes | None]] = []
    producer.produce(
        "t",
        b"waited",
        b"k",
        on_full="wait",
        on_delivery=lambda err, msg: reports.append((err, msg.value())),
    )
    # It waited for room: the full queue's timed-out messages were reported and counted.
    assert producer.failed >= 1
    assert reports == []  # the waited message itself is queued, not yet reported
    # It was queued, not dropped: its own report comes (a timeout: nothing listens).
    producer.flush(5)
    assert [value for _, value in reports] == [b"waited"]
    assert reports[0][0] is not None
    assert producer.failed == QUEUE + 1
    # The override was for that call only: the producer raises on a full queue again.
    fill(producer)
    with pytest.raises(QueueFullError):
        producer.produce("t", b"refused again", b"k")
    producer.purge()
    producer.flush(1)


def test_flush_counts_what_was_not_stored_and_reports_hand_protocol_types() -> None:
    producer = KafkaProducer(nowhere(**{"message.timeout.ms": 200}))
    reports: list[tuple[int | None, str | None, bytes | None]] = []

    def on_delivery(err: DeliveryError | None, msg: DeliveredMessage) -> None:
        value = msg.value()
        reports.append(
            (
                None if err is None else err.code(),
                msg.topic(),
                value if isinstance(value, bytes) else None,
            )
        )
        assert err is not None
        assert not is_permanent(err)

    producer.produce("t", b"a", b"k", on_delivery=on_delivery, timestamp=1_700_000_000_000)
    producer.produce("t", b"b", b"k", headers=[("h", b"v")], on_delivery=on_delivery)
    producer.produce("t", b"c", b"k")  # counted by the producer's own report
    assert producer.flush(5) == 3  # none stored: all failed since the last flush
    assert producer.flush(0) == 0  # failures are counted once
    assert (producer.delivered, producer.failed) == (0, 3)
    assert sorted(r[2] or b"" for r in reports) == [b"a", b"b"]
    assert {r[1] for r in reports} == {"t"}


def test_a_batch_goes_whole_in_order_to_its_partition_waiting_for_room_in_a_full_queue() -> None:
    """More messages than the queue holds: those refused for a full queue go again once
    reports make room, so every message is queued once, in order, to the partition named
    (each one's report: a timeout, nothing listens); reports only of errors lose none."""
    reports: list[tuple[int | None, bytes | None]] = []

    def on_delivery(err: DeliveryError | None, msg: DeliveredMessage) -> None:
        assert err is not None
        value = msg.value()
        reports.append((msg.partition(), value if isinstance(value, bytes) else None))

    options = nowhere(**{"message.timeout.ms": 200, REPORT_ONLY_ERRORS: True})
    producer = KafkaProducer(options, on_full="raise", on_delivery=on_delivery)
    values = [f"m{i}".encode() for i in range(3 * QUEUE + 1)]
    started = time.monotonic()
    producer.produce_batch("t", [(b"k", v) for v in values[:-1]] + [(b"k", None)], partition=2)
    assert time.monotonic() - started >= 0.3  # it waited (the producer's "raise" aside)
    assert producer.flush(5) == len(values)  # none stored: each failed, and reported
    assert reports == [(2, v) for v in values[:-1]] + [(2, None)]
    assert producer.failed == len(values)


def test_a_message_of_a_batch_refused_for_another_reason_is_a_produce_error() -> None:
    producer = KafkaProducer(nowhere(**{"message.max.bytes": 1000}))
    with pytest.raises(ProduceError) as caught:
        producer.produce_batch("t", [(b"k", b"small"), (b"k", b"x" * 5000)], partition=0)
    assert is_size_error(caught.value.error)
    producer.purge()
    producer.flush(1)


def test_purged_messages_are_reported_as_purged() -> None:
    seen: list[bool] = []
    producer = KafkaProducer(
        nowhere(), on_delivery=lambda err, _msg: seen.append(err is not None and is_purged(err))
    )
    producer.produce("t", b"x", b"k")
    producer.purge()
    assert producer.flush(1) == 1
    assert seen == [True]


def test_a_message_too_large_is_a_produce_error_that_says_so() -> None:
    producer = KafkaProducer(nowhere(**{"message.max.bytes": 1000}))
    with pytest.raises(ProduceError) as caught:
        producer.produce("t", b"x" * 5000, b"k")
    error = caught.value.error
    assert is_size_error(error)
    assert is_permanent(error)
    assert isinstance(caught.value, PublishError)
    assert str(caught.value) == error.str()


def test_the_error_predicates() -> None:
    full = queue_full_error()
    assert not is_size_error(full)
    assert not is_permanent(full)
    assert not is_purged(full)
    assert not is_brokers_down(full)


def test_client_errors_arrive_as_the_projects_client_error() -> None:
    errors: list[ClientError] = []
    arrived = threading.Event()

    def on_error(error: ClientError) -> None:
        errors.append(error)
        arrived.set()

    producer = KafkaProducer(nowhere(**{"reconnect.backoff.max.ms": 100}), error_cb=on_error)
    producer.produce("t", b"x", b"k")
    deadline = time.monotonic() + 15
    while not arrived.is_set() and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors, "librdkafka reported no error for an address where nothing listens"
    assert all(isinstance(e, ClientError) and e.text for e in errors)
    producer.purge()
    producer.flush(1)
