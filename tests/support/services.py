"""A service run as its own process: ``turnaudit sink`` with an environment, and
the partitions its health endpoint says it holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from tests.support.streams import http_get
from turnaudit.local_broker import free_port
from turnaudit.settings import KafkaSettings

TURNAUDIT = str(Path(sys.executable).parent / "turnaudit")


def service_env(settings: KafkaSettings, group: str, **extra: str) -> dict[str, str]:
    assert settings.bootstrap_servers is not None
    return {
        "PATH": os.environ.get("PATH", ""),
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TURNAUDIT_TOPIC_PREFIX": settings.topics.prefix,
        "TURNAUDIT_GROUP_ID": group,
        "TURNAUDIT_HTTP_HOST": "127.0.0.1",
        "TURNAUDIT_HTTP_PORT": str(free_port()),
        **extra,
    }


@contextmanager
def turnaudit_process(
    argv: Sequence[str], env: dict[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``turnaudit ARGV`` with ``env``, its stderr appended to ``log``; killed if still running."""
    with log.open("ab") as stderr:
        proc = subprocess.Popen(
            [TURNAUDIT, *argv], env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(60)


def service_process(
    service: str, env: dict[str, str], log: Path
) -> AbstractContextManager[subprocess.Popen[bytes]]:
    return turnaudit_process(["sink", service], env, log)


def assigned(env: dict[str, str]) -> list[int]:
    try:
        code, body = http_get(int(env["TURNAUDIT_HTTP_PORT"]), "/healthz")
    except OSError:
        return []  # not listening yet
    return list(json.loads(body)["assigned_partitions"]) if code == 200 else []
