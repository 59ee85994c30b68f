"""The project's image and compose stack under podman, as ``make image`` builds them, with the
project's podman settings (deploy/podman/containers.conf)."""

from __future__ import annotations

import os
import shutil
import subprocess

from tests.support import PROJECT_ROOT

IMAGE = "localhost/turnaudit:local"
CONTAINERS_CONF = PROJECT_ROOT / "deploy/podman/containers.conf"


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman(
    *args: str, timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("podman")
    assert tool is not None, "podman not found: run `make podman`"
    ran = subprocess.run(
        [tool, *args],
        env=podman_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    if check:
        assert ran.returncode == 0, f"podman {' '.join(args)}:\n{ran.stdout[-3000:]}{ran.stderr}"
    return ran
