"""Liveness and readiness that tell the truth, and client errors at a bounded rate."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.proxy import TcpForwarder
from tests.support.services import TURNAUDIT
from tests.support.streams import http_get, wait_for
from turnaudit.local_broker import free_port
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


def test_a_service_before_its_broker_appears_is_not_ready_quiet_then_ready(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    assert kafka_settings.bootstrap_servers is not None
    host, port = kafka_settings.bootstrap_servers.split(",")[0].rsplit(":", 1)
    proxy = TcpForwarder(free_port(), (host, int(port)))
    http_port = free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{proxy.port}",
        "TURNAUDIT_TOPIC_PREFIX": kafka_settings.topics.prefix,
        "TURNAUDIT_HTTP_HOST": "127.0.0.1",
        "TURNAUDIT_HTTP_PORT": str(http_port),
        "TURNAUDIT_CLIENT_ERROR_REPORT_S": "3",
    }
    stderr_path = tmp_path / "stderr.log"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            [TURNAUDIT, "sink", "metrics"], env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        assert wait_for(lambda: _answers(http_port))
        outage_started = time.monotonic()
        time.sleep(9)
        code, body = http_get(http_port, "/readyz")
        live, _ = http_get(http_port, "/livez")
        outage = time.monotonic() - outage_started
        lines = stderr_path.read_text().splitlines()
        proxy.start()
        appeared = time.monotonic()
        assert wait_for(lambda: http_get(http_port, "/readyz")[0] == 200, timeout=60)
        ready_after = time.monotonic() - appeared
    finally:
        proc.terminate()
        proc.wait(60)
        proxy.close()
    print(
        f"\nbroker away {outage:.1f} s: {len(lines)} stderr lines; "
        f"ready {ready_after:.1f} s after the broker appeared"
    )
    assert code == 503
    assert live == 200
    reasons = json.loads(body)["reasons"]
    assert any(r.startswith("broker unreachable for ") for r in reasons)
    events = [json.loads(line)["event"] for line in lines]  # every stderr line is JSON
    print("\n".join(lines))
    assert events[0] == "kafka_broker_unreachable"  # said once, first
    assert events.count("kafka_broker_unreachable") == 1
    assert events.count("kafka_client_errors") <= outage / 3 + 1
    assert len(lines) <= outage / 3 + 2


def _answers(port: int) -> bool:
    try:
        http_get(port, "/livez")
    except OSError:
        return False
    return True
