"""The image ``make image`` builds, run for real under podman: it carries the native module from
the wheel, runs as a non-root user with no compiler, and a service inside it consumes the real
broker and counts every turn."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import run_turnaudit
from tests.support.containers import IMAGE, podman
from tests.support.make_targets import make
from tests.support.streams import scrape, total
from turnaudit.local_broker import free_ports
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.settings import KafkaSettings

SHIPPED = shipped_catalog().versions
pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def image() -> str:
    make("image")
    return IMAGE


def in_image(image: str, *argv: str, entrypoint: str | None = None) -> str:
    options = ["--entrypoint", entrypoint] if entrypoint else []
    return podman("run", "--rm", *options, image, *argv).stdout


def test_schemas_check_runs_in_the_image(image: str) -> None:
    out = in_image(image, "schemas", "check")
    assert f"FULL_TRANSITIVE: all {len(SHIPPED)} versions read each other's data" in out


def test_the_image_carries_the_wheels_native_module_runs_non_root_and_has_no_compiler(
    image: str,
) -> None:
    where = in_image(
        image,
        "-c",
        "import turnaudit._native as n, turnaudit; print(n.__file__); print(turnaudit.__file__)",
        entrypoint="/opt/turnaudit/bin/python",
    ).split()
    assert where[0].startswith("/opt/turnaudit/lib/python3.11/site-packages/turnaudit/_native")
    assert where[1].startswith("/opt/turnaudit/lib/python3.11/site-packages/turnaudit/")
    assert in_image(image, "-u", entrypoint="id").strip() == "10001"
    found = podman(
        "run",
        "--rm",
        "--entrypoint",
        "sh",
        image,
        "-c",
        "for t in cc gcc c++ cargo rustc; do command -v $t; done; true",
    ).stdout
    assert found.strip() == ""


@contextlib.contextmanager
def service_in_image(image: str, name: str, env: dict[str, str], *argv: str) -> Iterator[None]:
    podman(
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "host",
        *[f"--env={k}={v}" for k, v in env.items()],
        image,
        *argv,
    )
    try:
        yield
    finally:
        podman("rm", "-f", "-t", "5", name, check=False)


def test_a_service_in_the_image_counts_every_turn_on_the_real_broker(
    image: str, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    (port,) = free_ports(1)
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers or "",
        "TURNAUDIT_TOPIC_PREFIX": kafka_settings.topics.prefix,
        "TURNAUDIT_HTTP_PORT": str(port),
        "TURNAUDIT_HTTP_HOST": "127.0.0.1",
    }
    name = f"turnaudit-test-{port}"
    with service_in_image(image, name, env, "sink", "metrics"):
        published = run_turnaudit(
            "simulate",
            "--events",
            "400",
            "--seed",
            "11",
            "--spool-dir",
            str(tmp_path / "spool"),
            env={**env, "PATH": "/usr/bin:/bin"},
            timeout=120,
        )
        assert published.returncode == 0, published.stderr
        deadline, counted = time.monotonic() + 90, -1
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                counted = total(scrape(port), "turnaudit_turns_total")
                if counted == 400:
                    break
            time.sleep(0.5)
        logs = podman("logs", name, check=False).stderr[-2000:]
        assert counted == 400, logs
