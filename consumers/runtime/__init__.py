"""The consumer runtime every service runs on, in small parts:

* ``loop``: the consume loop, offsets, rebalances, drain (``ConsumerService``);
* ``validation``: decode, contracts, stream tracking (message -> turn or rejection);
* ``sink``: ``ConsumedTurn``, the ``Sink`` base class with every hook, ``BatchingSink``;
* ``handover`` and ``ledger``: the batch hand-over and the offset bookkeeping, pure;
* ``health`` and ``http``: liveness, readiness, ``/metrics``;
* ``consumer_metrics``: what every service exports about its consumption;
* ``gc_sizing``: the collector sized to a batch;
* ``timeline``: where each batch's time went (off unless a ``BatchTimeline`` is given);
* ``line_files``: files of lines a service appends to, whole lines only.

Dead letters are written by ``turnaudit.kafka.dead_letters.DeadLetterWriter``
and decoders built by ``turnaudit.kafka.decoders.decoder_for``.
"""

from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics, MessageOutcome
from turnaudit.consumers.runtime.loop import ConsumerService
from turnaudit.consumers.runtime.sink import BatchingSink, ConsumedTurn, Rejection, Sink
from turnaudit.consumers.runtime.validation import (
    HtirTraceValidation,
    TurnEventValidation,
    Validation,
)

__all__ = [
    "BatchingSink",
    "ConsumedTurn",
    "ConsumerMetrics",
    "ConsumerService",
    "HtirTraceValidation",
    "MessageOutcome",
    "Rejection",
    "Sink",
    "TurnEventValidation",
    "Validation",
]
