"""Deleting topics: what the demo does to the topics of its previous run."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException

from turnaudit.kafka.topics import admin_client
from turnaudit.settings import KafkaSettings


def delete_topics(
    settings: KafkaSettings, names: Iterable[str], timeout: float = 30.0
) -> dict[str, str]:
    """Delete the topics named that exist; return those that could not be, with why.

    A topic already gone is not a failure. Nothing raises for a refused deletion (a
    principal without the right, a cluster that forbids deleting): the caller decides
    what a topic left behind means.
    """
    wanted = sorted(set(names))
    if not wanted:
        return {}
    admin = admin_client(settings)
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        return dict.fromkeys(wanted, exc.args[0].str())
    present = [name for name in wanted if name in existing]
    if not present:
        return {}
    failed: dict[str, str] = {}
    futures = admin.delete_topics(present, operation_timeout=timeout, request_timeout=timeout)
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                failed[name] = error.str()
    return failed
