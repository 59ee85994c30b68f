"""The local broker command and topic creation."""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path

from tests.support import PROJECT_ROOT
from tests.support.cli import broker_ports, run_turnaudit

turnaudit = partial(run_turnaudit, cwd=PROJECT_ROOT, timeout=180)


def broker_env(tmp_path: Path, path: str) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": path,
        "TURNAUDIT_BROKER_HOME": str(tmp_path / "home"),
        "TURNAUDIT_BROKER_JARS": str(tmp_path / "no-jars"),
        **broker_ports(),
    }


def test_missing_java_is_one_clear_line(tmp_path: Path) -> None:
    result = turnaudit(
        "broker", "start", env=broker_env(tmp_path, str(Path(sys.executable).parent))
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "turnaudit broker: java not found: "
        "install a Java 17+ runtime (apt-get install openjdk-17-jre-headless)"
    )


def test_missing_maven_is_one_clear_line(tmp_path: Path) -> None:
    # A java on PATH that is never run (the check for mvn comes before any JVM starts):
    # if it were run, it would say so and the output below would not be the one line.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").write_text("#!/bin/sh\necho 'java ran' >&2\nexit 3\n")
    (bin_dir / "java").chmod(0o755)
    path = f"{bin_dir}:{Path(sys.executable).parent}"
    result = turnaudit("broker", "start", env=broker_env(tmp_path, path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "turnaudit broker: mvn not found: install Apache Maven (apt-get install maven)"
    )
