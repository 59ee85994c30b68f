"""The one place the project builds librdkafka's AdminClient, and what it asks it
about consumer groups.

``new_admin`` is the only construction (a test holds it): topics (``topics``),
ACLs (``acls``), access checks (``access``), offsets (``offsets``) and the
verify state topic (``state_topic``) each get their client from it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient

from turnaudit.errors import BrokerError, ConfigurationError
from turnaudit.kafka.consumer import QUIET
from turnaudit.settings import KafkaSettings


def new_admin(config: Mapping[str, Any]) -> AdminClient:
    """An AdminClient on ``config``, a librdkafka configuration."""
    return AdminClient(dict(config))


def admin_client(settings: KafkaSettings, **overrides: Any) -> AdminClient:
    """An AdminClient for ``settings`` (``overrides``: callbacks such as ``error_cb``);
    client options librdkafka refuses are one line, ``ConfigurationError``."""
    try:
        return new_admin(settings.client_config(**overrides))
    except KafkaException as exc:
        raise ConfigurationError(f"Kafka client settings: {exc.args[0].str()}") from None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A consumer group as the coordinator sees it now."""

    stable: bool  # no rebalance under way
    members: int


class GroupAdmin:
    """An AdminClient for consumer-group questions, built once."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._admin = new_admin(settings.client_config(QUIET))

    def describe_group(self, group: str, *, timeout: float = 30.0) -> GroupDescription:
        try:
            found = self._admin.describe_consumer_groups([group])[group].result(timeout)
        except KafkaException as exc:
            raise BrokerError(f"cannot describe consumer group {group}: {exc}") from exc
        return GroupDescription(found.state is ConsumerGroupState.STABLE, len(found.members))
