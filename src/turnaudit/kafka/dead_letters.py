"""The dead-letter topic: its message shape and the one writer every stage uses.

A dead letter keeps the original bytes as its value and the original key; its
headers say where it came from and why it is there. ``reason`` is from a
closed set (it labels metrics); ``error`` is the free-text detail.

A dead letter that cannot be written as it is (the original plus the headers
is larger than the producer or the dead-letter topic accepts, or the broker
refuses it for good) is written again *truncated*: the first
``TRUNCATED_VALUE_BYTES`` of the value, the key cut to ``TRUNCATED_KEY_BYTES``,
none of the original headers, and ``dlq.truncated``, ``dlq.original_size`` and
``dlq.original_key_size`` beside the usual ``dlq.*`` headers, so the original
can still be found at its topic, partition and offset. If even that fails the
writer counts it, logs it as critical with the original's position, and calls
``on_failure``: a dead letter is never lost without a count and a log line.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence

import structlog
from confluent_kafka import KafkaError, KafkaException, Message

from turnaudit.dead_letters import (
    ERROR_HEADER_BYTES,
    TRUNCATED_KEY_BYTES,
    TRUNCATED_VALUE_BYTES,
    DeadLetterOutcome,
    Headers,
    dead_letter_headers,
    is_dead_letter_header,
    read_dead_letter_headers,
)
from turnaudit.kafka.producer import KafkaProducer

log = structlog.get_logger("turnaudit.dead_letters")


# Refusals a smaller message gets past.
_SIZE_ERRORS = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
    }
)


class DeadLetterWriter:
    """Writes dead letters for one stage; ``pending()`` says how many are unsettled.

    A stage stores its offsets only once ``pending()`` is 0 after a ``flush``:
    every dead letter of the batch is then either on the topic (whole or
    truncated) or counted as failed.
    """

    def __init__(
        self,
        producer: KafkaProducer,
        topic: str,
        stage: str,
        *,
        on_settled: Callable[[DeadLetterOutcome], None] | None = None,
    ) -> None:
        self._producer = producer
        self.topic = topic
        self.stage = stage
        self._on_settled = on_settled
        self._lock = threading.Lock()
        self._pending = 0

    def write(
        self,
        *,
        value: bytes | None,
        key: bytes | None,
        original_headers: Sequence[tuple[str, str | bytes | None]],
        reason: str,
        error: str,
        topic: str,
        partition: int | None,
        offset: int | None,
    ) -> None:
        headers: Headers = [(k, v) for k, v in original_headers if not is_dead_letter_header(k)]
        headers += dead_letter_headers(
            reason=reason,
            error=error,
            topic=topic,
            partition=partition,
            offset=offset,
            stage=self.stage,
        )
        with self._lock:
            self._pending += 1
        try:
            # The delivery report carries the value and key but not the
            # headers: the callback keeps this letter's own.
            self._producer.produce(
                self.topic,
                value,
                key,
                headers=headers,
                on_delivery=functools.partial(self._on_whole_delivery, headers),
            )
        except KafkaException as exc:
            # Refused before it was queued (larger than message.max.bytes).
            self._write_truncated(value, key, headers, exc.args[0], from_callback=False)

    def pending(self) -> int:
        with self._lock:
            return self._pending

    def flush(self, timeout: float) -> int:
        """Wait for the dead letters in flight; the number still unsettled."""
        self._producer.flush(timeout)
        return self.pending()

    # -- delivery ---------------------------------------------------------------
    def _on_whole_delivery(self, headers: Headers, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self._settle(headers, truncated=False, failed=False)
            return
        # message.timeout.ms=0: librdkafka retries until the broker takes it,
        # so a report with an error is a permanent refusal: try it smaller.
        self._write_truncated(msg.value(), msg.key(), headers, err, from_callback=True)

    def _write_truncated(
        self,
        value: bytes | None,
        key: bytes | None,
        headers: Headers,
        err: KafkaError,
        *,
        from_callback: bool,
    ) -> None:
        dlq_headers: Headers = [(k, v) for k, v in headers if is_dead_letter_header(k)]
        if err.code() not in _SIZE_ERRORS:
            self._fail(dlq_headers, err)
            return
        dlq_headers += [
            ("dlq.truncated", b"true"),
            ("dlq.original_size", str(len(value or b"")).encode()),
            ("dlq.original_key_size", str(len(key or b"")).encode()),
            ("dlq.write_error", err.str().encode()[:ERROR_HEADER_BYTES]),
        ]
        try:
            self._producer.produce(
                self.topic,
                None if value is None else value[:TRUNCATED_VALUE_BYTES],
                None if key is None else key[:TRUNCATED_KEY_BYTES],
                headers=dlq_headers,
                on_delivery=functools.partial(self._on_truncated_delivery, dlq_headers),
                from_callback=from_callback,
            )
        except KafkaException as exc:
            self._fail(dlq_headers, exc.args[0])
        except BufferError:
            self._fail(dlq_headers, KafkaError(KafkaError._QUEUE_FULL))

    def _on_truncated_delivery(
        self, headers: Headers, err: KafkaError | None, msg: Message, *, again: bool = False
    ) -> None:
        if err is None:
            self._settle(headers, truncated=True, failed=False)
        elif err.code() in _SIZE_ERRORS and not again:
            # The broker judges a whole batch: a truncated letter that shared one
            # with a large original was refused for the other's size. Once more,
            # alone (the large one is truncated too by now).
            try:
                self._producer.produce(
                    self.topic,
                    msg.value(),
                    msg.key(),
                    headers=headers,
                    on_delivery=functools.partial(self._on_truncated_delivery, headers, again=True),
                    from_callback=True,
                )
            except (KafkaException, BufferError):
                self._fail(headers, err)
        else:
            self._fail(headers, err)

    def _fail(self, headers: Sequence[tuple[str, str | bytes | None]], err: KafkaError) -> None:
        # The original stays where it was; name it so it can be found.
        log.critical(
            "dead_letter_write_failed",
            error=err.str(),
            code=err.name(),
            stage=self.stage,
            dlq=read_dead_letter_headers(headers),
        )
        self._settle(headers, truncated=False, failed=True)

    def _settle(
        self,
        headers: Sequence[tuple[str, str | bytes | None]] | None,
        *,
        truncated: bool,
        failed: bool,
    ) -> None:
        with self._lock:
            self._pending -= 1
        if self._on_settled is not None:
            reason = read_dead_letter_headers(headers).get("reason", "")
            self._on_settled(DeadLetterOutcome(reason, truncated, failed))
