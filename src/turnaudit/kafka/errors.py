"""librdkafka's exceptions, for the callers that must catch what a client call raised.

The wrappers turn client failures into ``BrokerError``; the CLI and the topic
commands also catch what escapes from a call outside them (an admin future,
a client built by a library) as ``ClientException``.
"""

from __future__ import annotations

from confluent_kafka import KafkaException

ClientException = KafkaException


def client_exception_text(exc: BaseException) -> str:
    """The text of librdkafka's error inside an exception (its ``KafkaError``)."""
    if isinstance(exc, KafkaException) and exc.args and hasattr(exc.args[0], "str"):
        return str(exc.args[0].str())
    return str(exc)
