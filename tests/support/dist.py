"""The project's wheel, built once by ``make dist``, installed into a fresh virtual environment
with no Rust toolchain on PATH (as a user without cargo installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tests.support import PROJECT_ROOT
from tests.support.make_targets import make

DIST = PROJECT_ROOT / "dist"
# The Rust toolchain: not reachable while the wheel installs and runs.
BUILD_TOOLS = ("cargo", "rustc")


def built_wheel() -> Path:
    """``make dist`` (a no-op when the wheel is newer than every source), then the wheel."""
    make("dist")
    wheels = sorted(DIST.glob("turnaudit-*.whl"))
    assert len(wheels) == 1, f"make dist left {wheels}"
    return wheels[0]


def wheel_members(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def path_without(tools: tuple[str, ...]) -> str:
    """PATH with every folder that holds one of ``tools`` left out (for the Python that
    creates the venv, its own folder stays first)."""
    keep = [str(Path(sys.executable).parent)]
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if folder and not any((Path(folder) / tool).exists() for tool in tools):
            keep.append(folder)
    return os.pathsep.join(keep)


@dataclass(frozen=True)
class WheelVenv:
    """A fresh virtual environment with only the wheel (and its declared dependencies)."""

    root: Path
    env: dict[str, str]

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def turnaudit(self) -> Path:
        return self.root / "bin" / "turnaudit"

    def run(
        self, *argv: str | Path, cwd: Path, extra_env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in argv],
            cwd=cwd,
            env={**self.env, **(extra_env or {})},
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )


def install_wheel(wheel: Path, root: Path) -> WheelVenv:
    """A venv at ``root`` with ``wheel`` installed from binaries only, no build tool on PATH
    and nothing of this checkout importable."""
    system_python = shutil.which("python3", path=path_without(BUILD_TOOLS)) or sys.executable
    # The environment a user's shell has: this checkout's venv and sources are not in it.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME") and not k.startswith("TURNAUDIT_")
    }
    env["PATH"] = os.pathsep.join([str(root / "bin"), path_without(BUILD_TOOLS)])
    subprocess.run(
        [system_python, "-m", "venv", str(root)], env=env, check=True, capture_output=True
    )
    venv = WheelVenv(root, env)
    installed = venv.run(
        venv.python,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        str(wheel),
        cwd=root,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    return venv
