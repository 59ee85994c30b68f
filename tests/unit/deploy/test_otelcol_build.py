"""The collector's build (deploy/otelcol/, ``make otelcol``): wired into ``make test``, its
binary never committed, and without the Go toolchain one line saying what to install."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.support import PROJECT_ROOT

MAKEFILE = (PROJECT_ROOT / "Makefile").read_text()


def test_make_test_builds_the_collector_into_an_ignored_folder() -> None:
    test_rule = re.search(r"^test:(.*)$", MAKEFILE, re.M)
    assert test_rule
    assert "otelcol" in test_rule.group(1).split()
    assert "deploy/otelcol/bin" in (PROJECT_ROOT / ".gitignore").read_text().split()
    git = shutil.which("git")
    assert git is not None, "git not found"
    tracked = subprocess.run(
        [git, "ls-files", "deploy/otelcol"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert sorted(tracked) == sorted(
        f"deploy/otelcol/{name}"
        for name in ("main.go", "components.go", "go.mod", "go.sum", "config.yaml", "Dockerfile")
    )


def test_without_go_make_says_so_in_one_line(tmp_path: Path) -> None:
    make = shutil.which("make")
    assert make is not None, "make not found"
    # A PATH with nothing on it: the rule's `command -v go` finds no toolchain. -W
    # makes the sources look changed, so the rule runs whether or not a binary exists.
    empty = tmp_path / "bin"
    empty.mkdir()
    run = subprocess.run(
        [make, "--no-print-directory", "-W", "deploy/otelcol/main.go", "otelcol"],
        cwd=PROJECT_ROOT,
        env={"PATH": str(empty)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert run.returncode != 0
    assert run.stdout.splitlines() == [
        "go not found: the OpenTelemetry Collector (deploy/otelcol/) needs the Go toolchain "
        "1.26 or newer (https://go.dev/dl/)"
    ]
