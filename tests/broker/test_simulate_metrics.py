"""``turnaudit simulate --metrics-port``: the simulated runtime serves its runtime metrics
while it publishes, as compose's Prometheus scrapes them (the turn-runtime job)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.realparts import free_port
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
        text = reply.read().decode()
    return {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if not s.labels
    }


def test_a_simulated_runtime_serves_its_publisher_metrics_while_it_publishes(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers or "",
        "TURNAUDIT_TOPIC_PREFIX": kafka_settings.topics.prefix,
    }
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "turnaudit.cli",
            "simulate",
            "--events",
            "400",
            "--rate",
            "100",
            "--spool-dir",
            str(tmp_path / "spool"),
            "--metrics-port",
            str(port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[float] = []
    deadline = time.monotonic() + 60
    while run.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(urllib.error.URLError, ConnectionError, KeyError):
            seen.append(scrape(port)["turnaudit_publisher_events_published_total"])
        time.sleep(0.3)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, out + err
    # Scraped mid-run: the count grew while turns were published.
    assert len(set(seen)) >= 2, seen
    assert 0 < max(seen) <= 400
