"""What the project asks the AdminClient about consumer groups."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient

from turnaudit.errors import BrokerError
from turnaudit.kafka.consumer import QUIET
from turnaudit.settings import KafkaSettings


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A consumer group as the coordinator sees it now."""

    stable: bool  # no rebalance under way
    members: int


class GroupAdmin:
    """An AdminClient for consumer-group questions, built once."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._admin = AdminClient(settings.client_config(QUIET))

    def describe_group(self, group: str, *, timeout: float = 30.0) -> GroupDescription:
        try:
            found = self._admin.describe_consumer_groups([group])[group].result(timeout)
        except KafkaException as exc:
            raise BrokerError(f"cannot describe consumer group {group}: {exc}") from exc
        return GroupDescription(found.state is ConsumerGroupState.STABLE, len(found.members))
