"""Real Prometheus, Alertmanager and turnaudit services, started on loopback ports for a test.

Prometheus and Alertmanager are Debian's, unpacked into the repository's
``deploy/tools/`` (``make promtool alertmanager``, ``binary``); the services are
the ``turnaudit`` CLI of this environment. Each process is
stopped (SIGTERM, then SIGKILL) when the test ends; a part that cannot start
fails the test with its output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support import PROJECT_ROOT
from turnaudit.local_broker import free_ports
from turnaudit.settings import KafkaSettings

TURNAUDIT = Path(sys.executable).parent / "turnaudit"
TOOLS_BIN = PROJECT_ROOT / "deploy/tools/bin"


def binary(name: str, setup: str) -> str:
    """``deploy/tools/bin/<name>`` (``make <setup>`` puts it there), never one on PATH:
    the suite runs the versions the Makefile fetched, whatever the machine has installed."""
    found = TOOLS_BIN / name
    assert os.access(found, os.X_OK), f"{name} not found in deploy/tools/bin/: run `make {setup}`"
    return str(found)


def tools_path() -> str:
    """PATH with ``deploy/tools/bin`` first: a script that names kcat gets the fetched one."""
    return f"{TOOLS_BIN}{os.pathsep}{os.environ.get('PATH', '')}"


def http_json(url: str, data: bytes | None = None, timeout: float = 5) -> Any:
    with urllib.request.urlopen(url, data=data, timeout=timeout) as reply:  # noqa: S310 - loopback
        return json.loads(reply.read())


def wait_until_answering(
    url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"{process.args[0]} exited {process.returncode}:\n{log.read_text()[-3000:]}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - loopback
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer in {timeout}s:\n{log.read_text()[-3000:]}")


@contextmanager
def process(
    args: list[str], log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def service_env(kafka: KafkaSettings, port: int, group: str, **extra: str) -> dict[str, str]:
    assert kafka.bootstrap_servers is not None
    return {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "TURNAUDIT_TOPIC_PREFIX": kafka.topics.prefix,
        "TURNAUDIT_HTTP_HOST": "127.0.0.1",
        "TURNAUDIT_HTTP_PORT": str(port),
        "TURNAUDIT_GROUP_ID": group,
        **extra,
    }


class Prometheus:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    def query(self, expr: str) -> list[dict[str, Any]]:
        reply = http_json(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert reply["status"] == "success", (expr, reply)
        result: list[dict[str, Any]] = reply["data"]["result"]
        return result

    def has_series(self, metric: str) -> bool:
        return bool(self.query(f"count({{__name__={json.dumps(metric)}}})"))


def free_port() -> int:
    return free_ports(1)[0]
