"""The broker-free tier: Python and cargo only.

A test here that reaches for Kafka or starts the local broker fails, and so does one that
runs a program ``make test-fast`` does not provide (promtool, Prometheus, Alertmanager,
kcat, java, mvn, go, the collector: ``UNIT_REFUSED_PROGRAMS``): started from the test's
own process, ``subprocess.Popen`` refuses it; started by a child process through PATH, a
stand-in runs instead and the test fails when it ends.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.tiers import (
    REFUSED,
    UNIT_REFUSED_PROGRAMS,
    started_program,
    write_refusing_programs,
)
from turnaudit.local_broker import LocalKafkaBroker

NO_BROKER = "the unit tier has no broker: a test that needs one belongs in tests/broker/"


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    pytest.fail(NO_BROKER)


@pytest.fixture(autouse=True)
def _no_local_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: LocalKafkaBroker) -> None:
        pytest.fail(NO_BROKER)

    monkeypatch.setattr(LocalKafkaBroker, "start", refuse)


@pytest.fixture(scope="session", autouse=True)
def _refused_programs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Session-wide (module fixtures start programs too): Popen refuses, PATH stands in."""
    stand_ins = tmp_path_factory.mktemp("refused-programs")
    refusals = tmp_path_factory.mktemp("refusals")
    write_refusing_programs(stand_ins, refusals)
    start = subprocess.Popen.__init__

    def refusing_start(self: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> None:
        program = started_program(args)
        if program in UNIT_REFUSED_PROGRAMS:
            pytest.fail(REFUSED.format(program=program))
        start(self, args, *rest, **kw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{stand_ins}{os.pathsep}{os.environ.get('PATH', '')}")
        patch.setattr(subprocess.Popen, "__init__", refusing_start)
        yield refusals


@pytest.fixture(autouse=True)
def _no_refused_program_ran(_refused_programs: Path) -> Iterator[None]:
    yield
    ran = sorted(path.name for path in _refused_programs.iterdir())
    for path in _refused_programs.iterdir():
        path.unlink()
    if ran:
        pytest.fail(REFUSED.format(program=", ".join(ran)))
