"""The one producer wrapper: every message the project writes goes through it.

``KafkaProducer`` wraps librdkafka's producer once, lazily (the client is
built on first use, or by ``open()`` where a bad setting must fail early):

* **A full client queue** either waits, serving delivery reports until there
  is room, or raises ``QueueFullError`` at once; chosen per producer
  (``on_full``) and per call. Inside a delivery report, where serving reports
  again is not allowed, it always raises.
* **A message librdkafka refuses before queueing it** (larger than
  ``message.max.bytes``, an unknown topic in a strict client) raises
  ``ProduceError``, whose ``error`` the predicates below read.
* **Record timestamps** (``timestamp=``, epoch milliseconds) pass through.
* **Delivery accounting**: ``delivered`` and ``failed`` count every delivery
  report (a per-message ``on_delivery`` is called after the count), and
  ``flush`` returns the messages *not stored*: still queued, or failed since
  the last flush, so 0 means every one reached the broker.

Callers never see confluent-kafka's types: a delivery report hands a
``DeliveryError`` and a ``DeliveredMessage``, protocols librdkafka's own
objects satisfy as they are (nothing is copied per message); a client-wide
error (rare) arrives as the project's ``ClientError``; the error codes callers
branch on are predicates here (``is_purged``, ``is_size_error``,
``is_brokers_down``, ``is_permanent``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypedDict

import structlog
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from turnaudit.errors import ConfigurationError, PublishError
from turnaudit.kafka.consumer import error_callback
from turnaudit.records import ClientError
from turnaudit.settings import LIBRDKAFKA_LOGGER, KafkaSettings

log = structlog.get_logger("turnaudit.kafka")

# Delivery guarantees: idempotent, acknowledged by all replicas, retried until
# delivered (a broker outage delays, never fails, a message).
RELIABLE: dict[str, object] = {
    "enable.idempotence": True,
    "acks": "all",
    "message.timeout.ms": 0,
}
# log_level 0: librdkafka's own log lines (one per failed connection attempt,
# many a second while a broker is away) stay off stderr; errors still reach
# error_cb, which the services rate-limit.
DEFAULTS: dict[str, object] = {"linger.ms": 5, "log_level": 0}
# confluent-kafka's own setting: delivery reports only for failed messages (``failed`` and
# ``flush`` still count every failure; ``delivered`` then stays 0).
REPORT_ONLY_ERRORS = "delivery.report.only.error"

OnFull = Literal["wait", "raise"]
Header = tuple[str, str | bytes | None]
_WAIT_POLL_S = 0.1


class DeliveryError(Protocol):
    """An error librdkafka reports (its ``KafkaError`` is one)."""

    def code(self) -> int: ...
    def name(self) -> str: ...
    def str(self) -> str: ...
    def fatal(self) -> bool: ...
    def retriable(self) -> bool: ...


class DeliveredMessage(Protocol):
    """The message a delivery report is about (librdkafka's ``Message`` is one)."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> str | bytes | None: ...
    def value(self) -> str | bytes | None: ...
    def headers(self) -> Sequence[tuple[str, bytes | None]] | None: ...
    def latency(self) -> float | None: ...


DeliveryCallback = Callable[[DeliveryError | None, DeliveredMessage], None]
# Client-wide errors (rare) arrive as the project's ``ClientError``, as the
# consumer wrapper hands them.
ErrorCallback = Callable[[ClientError], None]


class _Keywords(TypedDict, total=False):
    """What ``produce`` passes on to librdkafka beyond topic, value and key."""

    headers: list[Header]
    timestamp: int
    on_delivery: Callable[[KafkaError | None, Message], None]
    partition: int


class QueueFullError(BufferError):
    """librdkafka's in-memory queue is full (``on_full="raise"``, or inside a report)."""


class ProduceError(PublishError, KafkaException):
    """librdkafka refused a message before queueing it; ``error`` says why.

    (Also a ``KafkaException`` with the error as ``args[0]``, for code that
    catches librdkafka's own exception.)
    """

    def __init__(self, error: DeliveryError) -> None:
        super().__init__(error)
        self.error = error

    def __str__(self) -> str:
        return self.error.str()


# -- the error codes callers branch on ---------------------------------------------

_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
# Refusals a smaller message gets past.
_SIZE = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
    }
)
_TRANSIENT = frozenset(
    {
        *_PURGED,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._QUEUE_FULL,
    }
)


def is_purged(error: DeliveryError) -> bool:
    """The message was taken back out of the client (``purge``), never refused."""
    return error.code() in _PURGED


def is_size_error(error: DeliveryError) -> bool:
    """Refused for its size: the same message smaller would be taken."""
    return error.code() in _SIZE


def is_brokers_down(error: DeliveryError) -> bool:
    """Every broker of the cluster is unreachable (an outage, not a refusal)."""
    return error.code() == KafkaError._ALL_BROKERS_DOWN


def is_permanent(error: DeliveryError) -> bool:
    """Retrying the same message cannot help (too large, not authorised, fatal, ...)."""
    return error.fatal() or not (error.retriable() or error.code() in _TRANSIENT)


def queue_full_error() -> DeliveryError:
    """librdkafka's "queue full" error, for a caller that reports one it caught."""
    return KafkaError(KafkaError._QUEUE_FULL)


# -- the wrapper --------------------------------------------------------------------


class KafkaProducer:
    """One librdkafka producer, built on first use. See the module docstring."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        on_full: OnFull = "wait",
        on_delivery: DeliveryCallback | None = None,
        error_cb: ErrorCallback | None = None,
        log_failures: bool = True,
    ) -> None:
        self._config = {**config, "on_delivery": self._report}
        if error_cb is not None:
            self._config["error_cb"] = error_callback(error_cb)
        self._client: Producer | None = None
        self.on_full: OnFull = on_full
        self._on_delivery = on_delivery
        self._log_failures = log_failures
        self.delivered = 0  # delivery reports without an error
        self.failed = 0  # delivery reports with one (purged messages included)
        self._failed_unflushed = 0

    @classmethod
    def reliable(
        cls,
        settings: KafkaSettings,
        *,
        on_full: OnFull = "wait",
        on_delivery: DeliveryCallback | None = None,
        error_cb: ErrorCallback | None = None,
        defaults: Mapping[str, Any] = DEFAULTS,
        **overrides: Any,
    ) -> KafkaProducer:
        """Idempotent, ``acks=all``, retried until delivered; ``overrides`` win."""
        return cls(
            settings.client_config(defaults, **{**RELIABLE, **overrides}),
            on_full=on_full,
            on_delivery=on_delivery,
            error_cb=error_cb,
        )

    @classmethod
    def plain(cls, settings: KafkaSettings, **overrides: Any) -> KafkaProducer:
        """The client's own defaults (quiet), for messages outside any guarantee."""
        return cls(settings.client_config(DEFAULTS, **overrides))

    # -- the client ------------------------------------------------------------------
    def open(self) -> KafkaProducer:
        """Build the client now: a setting librdkafka refuses fails here, in one line."""
        if self._client is None:
            try:
                self._client = Producer(self._config)
            except KafkaException as exc:
                raise ConfigurationError(f"Kafka producer settings: {_error_text(exc)}") from None
        return self

    def _opened(self) -> Producer:
        client = self._client
        if client is None:
            self.open()
            client = self._client
            assert client is not None
        return client

    # -- writing ---------------------------------------------------------------------
    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        headers: Sequence[Header] | None = None,
        timestamp: int = 0,
        on_delivery: DeliveryCallback | None = None,
        on_full: OnFull | None = None,
        from_callback: bool = False,
        partition: int | None = None,
        serve_reports: bool = True,
    ) -> None:
        """Queue one message (``timestamp``: epoch ms, 0 = now; ``partition``: this one,
        else the partitioner's choice by key).

        ``on_delivery`` is called for this message's report, after it is
        counted. A full queue waits or raises ``QueueFullError`` (``on_full``,
        else the producer's); ``from_callback`` (called from a delivery
        report) always raises. A refusal raises ``ProduceError``. ``serve_reports=False``:
        the reports ready are left for the caller's next ``poll`` (one that produces many
        messages and polls once after them).
        """
        client = self._client or self._opened()
        kwargs: _Keywords | None = None
        try:
            if headers is None and on_delivery is None and partition is None:
                # The common cases: no keywords to build (a turn carries its timestamp).
                if timestamp:
                    client.produce(topic, value, key, timestamp=timestamp)
                else:
                    client.produce(topic, value, key)
            else:
                kwargs = self._keywords(headers, timestamp, on_delivery, partition)
                client.produce(topic, value, key, **kwargs)
        except BufferError:
            if from_callback or (on_full or self.on_full) == "raise":
                raise QueueFullError(f"librdkafka's queue is full ({len(client)})") from None
            if kwargs is None:  # the fast path built none: the timestamp must still go
                kwargs = self._keywords(headers, timestamp, on_delivery, partition)
            self._wait_for_room(client, topic, value, key, kwargs)
        except KafkaException as exc:
            raise ProduceError(exc.args[0]) from None
        if serve_reports and not from_callback and (on_full or self.on_full) == "wait":
            client.poll(0)  # serve the reports that are ready

    def produce_batch(
        self, topic: str, records: Iterable[tuple[bytes, bytes | None]], *, partition: int
    ) -> None:
        """Queue (key, value) messages, in order, to one partition of ``topic`` in one call
        to the client (librdkafka's batch produce: no Python call per message). A full
        queue waits for room, whatever ``on_full`` says: the messages refused go again,
        in order, once reports are served (room is made only by serving them, on this
        thread, so once one is refused for a full queue every later one is too); another
        refusal raises ``ProduceError``. No headers, timestamps or callbacks of their own.

        One partition a call: the client applies a message's own ``partition`` only
        where the batch names none (and then runs the partitioner on the others)."""
        client = self._client or self._opened()
        batch: list[dict[str, Any]] = [{"key": key, "value": value} for key, value in records]
        while batch and client.produce_batch(topic, batch, partition=partition) < len(batch):
            refused = [message for message in batch if "_error" in message]
            for message in refused:
                error = message.pop("_error")
                if error.code() != KafkaError._QUEUE_FULL:
                    raise ProduceError(error)
            client.poll(_WAIT_POLL_S)  # the queue is full: let it deliver
            batch = refused
        client.poll(0)  # serve the reports that are ready

    def _keywords(
        self,
        headers: Sequence[Header] | None,
        timestamp: int,
        on_delivery: DeliveryCallback | None,
        partition: int | None = None,
    ) -> _Keywords:
        kwargs: _Keywords = {}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = list(headers)
        if timestamp:
            kwargs["timestamp"] = timestamp
        if on_delivery is not None:
            kwargs["on_delivery"] = functools.partial(self._report_then, on_delivery)
        return kwargs

    @staticmethod
    def _wait_for_room(
        client: Producer,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        kwargs: _Keywords,
    ) -> None:
        while True:
            client.poll(_WAIT_POLL_S)  # the queue is full: let it deliver
            try:
                client.produce(topic, value, key, **kwargs)
                return
            except BufferError:
                continue
            except KafkaException as exc:
                raise ProduceError(exc.args[0]) from None

    # -- serving reports, flushing ---------------------------------------------------
    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery reports (and errors) for up to ``timeout`` seconds."""
        return (self._client or self._opened()).poll(timeout)

    def flush(self, timeout: float) -> int:
        """Messages not stored: still queued, or failed since the last flush."""
        remaining = (self._client or self._opened()).flush(timeout)
        failed, self._failed_unflushed = self._failed_unflushed, 0
        return remaining + failed

    def purge(self) -> None:
        """Take every queued and in-flight message back; each gets a purge report
        (``is_purged``) at the next ``poll`` or ``flush``."""
        if self._client is not None:
            self._client.purge(in_queue=True, in_flight=True, blocking=True)

    def queued(self) -> int:
        """Messages in the client: queued or in flight, not yet reported."""
        return 0 if self._client is None else len(self._client)

    def __len__(self) -> int:
        return self.queued()

    def reachable(self, topic: str, timeout: float = 1.0) -> bool:
        """Whether a broker answers a metadata request for ``topic`` in ``timeout``."""
        try:
            (self._client or self._opened()).list_topics(topic, timeout=timeout)
        except KafkaException:
            return False
        return True

    # -- delivery reports (on whichever thread polls) --------------------------------
    def _report(self, err: KafkaError | None, msg: DeliveredMessage) -> None:
        if err is None:
            self.delivered += 1
        else:
            self._count_failure(err, msg)
        if self._on_delivery is not None:
            self._on_delivery(err, msg)

    def _report_then(
        self, on_delivery: DeliveryCallback, err: KafkaError | None, msg: DeliveredMessage
    ) -> None:
        if err is None:
            self.delivered += 1
        else:
            self._count_failure(err, msg)
        on_delivery(err, msg)

    def _count_failure(self, err: DeliveryError, msg: DeliveredMessage) -> None:
        self.failed += 1
        self._failed_unflushed += 1
        if self._log_failures and not is_purged(err):
            log.error("delivery_failed", topic=msg.topic(), error=err.str(), code=err.name())


def _error_text(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else None
    return error.str() if isinstance(error, KafkaError) else str(exc)


def check_client_options(options: Mapping[str, str], setting: str) -> None:
    """librdkafka itself judges passthrough options (names and values), with a
    client that connects nowhere; one line naming ``setting`` if it refuses."""
    if not options:
        return
    try:
        KafkaProducer({**options, "bootstrap.servers": "", "logger": LIBRDKAFKA_LOGGER}).open()
    except ConfigurationError as exc:
        detail = str(exc).removeprefix("Kafka producer settings: ")
        raise ConfigurationError(
            f"{setting}: {detail} (see librdkafka's CONFIGURATION.md for the options it knows)"
        ) from None


PASSTHROUGH_SETTING = "TURNAUDIT_KAFKA_OPTIONS"


def check_passthrough_options(settings: KafkaSettings) -> None:
    """librdkafka's judgement of the user's passthrough options
    (``TURNAUDIT_KAFKA_OPTIONS``, kept as given by ``KafkaSettings.from_env``):
    one line naming the setting, before a command or a service asks a cluster."""
    check_client_options(settings.client_options, PASSTHROUGH_SETTING)
