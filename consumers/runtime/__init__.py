"""The consumer runtime every service runs on, in small parts:

* ``loop``: the consume loop, offsets, rebalances, drain (``ConsumerService``);
* ``validation``: decode, contracts, stream tracking (message -> turn or rejection);
* ``sink``: ``ConsumedTurn`` and the ``Sink`` base class with every hook;
* ``health`` and ``http``: liveness, readiness, ``/metrics``;
* ``consumer_metrics``: what every service exports about its consumption;
* ``gc_sizing``: the collector sized to a batch;
* ``line_files``: files of lines a service appends to, whole lines only.

Dead letters are written by ``turnaudit.kafka.dead_letters.DeadLetterWriter``
and decoders built by ``turnaudit.serialization.decoders.decoder_for``.
"""

from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics, MessageOutcome
from turnaudit.consumers.runtime.loop import ConsumerService, message_headers
from turnaudit.consumers.runtime.sink import ConsumedTurn, Rejection, Sink
from turnaudit.consumers.runtime.validation import (
    HtirTraceValidation,
    TurnEventValidation,
    Validation,
)

__all__ = [
    "ConsumedTurn",
    "ConsumerMetrics",
    "ConsumerService",
    "HtirTraceValidation",
    "MessageOutcome",
    "Rejection",
    "Sink",
    "TurnEventValidation",
    "Validation",
    "message_headers",
]
