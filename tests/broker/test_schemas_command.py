"""``turnaudit schemas``: every record type listed, published fingerprints, ``get`` by any form."""

from __future__ import annotations

import json
import os

import pytest
from confluent_kafka import Producer

from tests.support.cli import run_turnaudit
from turnaudit.commands.schemas import java_long
from turnaudit.serialization.schemas import (
    schema_from_json,
)
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


def test_get_finds_a_schema_only_the_schemas_topic_has(kafka_settings: KafkaSettings) -> None:
    foreign = json.dumps(
        {
            "type": "record",
            "name": "Elsewhere",
            "namespace": "io.example",
            "fields": [{"name": "id", "type": "string"}],
        }
    )
    schema = schema_from_json(foreign, name="elsewhere", version=1)
    producer = Producer(kafka_settings.client_config())
    producer.produce(
        kafka_settings.topics.schemas, foreign.encode(), schema.fingerprint_hex.encode()
    )
    assert producer.flush(30) == 0
    assert kafka_settings.bootstrap_servers is not None
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "TURNAUDIT_TOPIC_PREFIX": kafka_settings.topics.prefix,
    }
    for form in (schema.fingerprint_hex, str(java_long(schema.fingerprint))):
        result = run_turnaudit("schemas", "get", form, env=env)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == json.loads(foreign)
    shipped_only = run_turnaudit("schemas", "get", "--no-topic", schema.fingerprint_hex, env=env)
    assert shipped_only.returncode == 1
