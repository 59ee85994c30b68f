"""Schema Registry mode: what the client sends, and the registry settings.

Registry mode is shown against the real registry (Apicurio Registry, `make registry`) in
the broker tier: tests/broker/test_registry_mode.py (registration under FULL_TRANSITIVE,
lookup only, an incompatible schema refused, every reader) and
tests/broker/test_registry_outage.py (the registry stopped and restarted mid-run). What
the real one cannot show is here: the requests themselves (their order, and the
credentials each carries: the local registry runs without authentication, which it
would only do with an OpenID Connect server), recorded by a stand-in that answers the few
Confluent REST calls the client makes.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.events import turn
from turnaudit.errors import ConfigurationError
from turnaudit.kafka.schema_registry import COMPATIBILITY, ConfluentSerializer, registry_client
from turnaudit.registry_settings import auto_register_from_env, registry_options_from_env
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.settings import KafkaSettings

V2 = shipped_catalog().version(2)
TOPIC = "t.turn-events"
SUBJECT = f"{TOPIC}-value"


class RecordingRegistry:
    """Answers the Confluent REST calls of registration, lookup and compatibility."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.levels: dict[str, str] = {}
        self.registered: dict[str, int] = {}
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                path = self.path.split("?")[0]
                registry.requests.append(
                    {
                        "method": self.command,
                        "path": path,
                        "body": body,
                        "auth": self.headers.get("Authorization"),
                    }
                )
                status, reply = registry.reply(self.command, path, body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = _answer

            def log_message(self, *_: object) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reply(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        parts = path.strip("/").split("/")
        if parts[0] == "config" and method == "PUT":
            self.levels[parts[1]] = body["compatibility"]
            return 200, body
        if parts[0] == "config" and method == "GET":
            return 200, {"compatibilityLevel": self.levels.get(parts[1], "BACKWARD")}
        if parts[0] == "subjects" and parts[-1] == "versions" and method == "POST":
            self.registered[parts[1]] = 1
            return 200, {"id": 1}
        if parts[0] == "subjects" and method == "POST":  # lookup of a pre-registered schema
            if parts[1] in self.registered:
                return 200, {"subject": parts[1], "id": 7, "version": 1, "schema": body["schema"]}
            return 404, {"error_code": 40401, "message": "Subject not found"}
        return 404, {"error_code": 404, "message": f"{method} {path}"}


@pytest.fixture
def stand_in() -> Iterator[RecordingRegistry]:
    registry = RecordingRegistry()
    yield registry
    registry.server.shutdown()


def event() -> dict[str, Any]:
    record = turn("s-reg", 0)
    record["verdicts"]["schema_version"] = 2
    return record


@pytest.mark.parametrize(
    ("env", "auth"),
    [
        (
            {"TURNAUDIT_SCHEMA_REGISTRY_BASIC_AUTH": "svc:s3cret"},
            "Basic " + base64.b64encode(b"svc:s3cret").decode(),
        ),
        ({"TURNAUDIT_SCHEMA_REGISTRY_BEARER_TOKEN": "tok-123"}, "Bearer tok-123"),
        ({}, None),
    ],
)
def test_registering_sets_full_transitive_first_with_the_credentials(
    stand_in: RecordingRegistry, env: dict[str, str], auth: str | None
) -> None:
    settings = KafkaSettings.from_env({"TURNAUDIT_SCHEMA_REGISTRY_URL": stand_in.url, **env})
    assert settings.schema_registry_auto_register
    client = registry_client(stand_in.url, settings.schema_registry_options)
    serialize = ConfluentSerializer(V2, client).bind(TOPIC)
    first = serialize(event())
    serialize(event())
    assert first[0] == 0
    assert int.from_bytes(first[1:5], "big") == 1
    calls = [(r["method"], r["path"]) for r in stand_in.requests]
    # The level is set and read back before the first registration under the subject.
    put = calls.index(("PUT", f"/config/{SUBJECT}"))
    read = calls.index(("GET", f"/config/{SUBJECT}"))
    register = calls.index(("POST", f"/subjects/{SUBJECT}/versions"))
    assert put < read < register
    assert stand_in.requests[put]["body"] == {"compatibility": COMPATIBILITY}
    assert stand_in.levels[SUBJECT] == COMPATIBILITY
    assert calls.count(("PUT", f"/config/{SUBJECT}")) == 1  # once per subject, not per event
    assert {r["auth"] for r in stand_in.requests} == {auth}


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"TURNAUDIT_SCHEMA_REGISTRY_BASIC_AUTH": "no-colon"}, "must be user:password"),
        (
            {
                "TURNAUDIT_SCHEMA_REGISTRY_BASIC_AUTH": "a:b",
                "TURNAUDIT_SCHEMA_REGISTRY_BEARER_TOKEN": "t",
            },
            "not both",
        ),
        ({"TURNAUDIT_SCHEMA_REGISTRY_OPTIONS": "[1]"}, "must be a JSON object"),
        ({"TURNAUDIT_SCHEMA_REGISTRY_OPTIONS": "{"}, "is not a JSON object"),
        ({"TURNAUDIT_SCHEMA_REGISTRY_AUTO_REGISTER": "maybe"}, "must be true or false"),
    ],
)
def test_a_wrong_registry_setting_is_one_line(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigurationError, match=says) as raised:
        KafkaSettings.from_env(env)
    assert "\n" not in str(raised.value)


def test_the_registry_options_pass_through() -> None:
    env = {
        "TURNAUDIT_SCHEMA_REGISTRY_OPTIONS": '{"ssl.ca.location": "/etc/ca.pem"}',
        "TURNAUDIT_SCHEMA_REGISTRY_AUTO_REGISTER": "FALSE",
    }
    assert registry_options_from_env(env) == {"ssl.ca.location": "/etc/ca.pem"}
    assert auto_register_from_env(env) is False
    assert auto_register_from_env({}) is True


def test_numeric_registry_options_reach_the_client_as_numbers() -> None:
    """The client refuses ``timeout``, ``max.retries`` and ``cache.capacity`` as text."""
    text = '{"timeout": 2.5, "max.retries": 1, "cache.capacity": 50, "proxy": "http://p:3128"}'
    options = registry_options_from_env({"TURNAUDIT_SCHEMA_REGISTRY_OPTIONS": text})
    assert options == {
        "timeout": 2.5,
        "max.retries": 1,
        "cache.capacity": 50,
        "proxy": "http://p:3128",
    }
    client = registry_client("http://127.0.0.1:9/numeric", options)
    assert client._rest_client.max_retries == 1  # type: ignore[attr-defined]  # the client's own
    assert client._rest_client.cache_capacity == 50  # type: ignore[attr-defined]  # likewise
    # A boolean is text, as before (no client option takes a JSON boolean).
    flagged = registry_options_from_env({"TURNAUDIT_SCHEMA_REGISTRY_OPTIONS": '{"x": true}'})
    assert flagged == {"x": "True"}
