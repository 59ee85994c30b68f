"""Where a test lives and whether it needs the broker must agree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

BROKER_FIXTURES = frozenset({"kafka_bootstrap", "kafka_settings", "secured", "schema_registry"})


def tier_violations(items: list[pytest.Item], tests: Path) -> list[str]:
    """Why each test sits in the wrong tier (empty when every test is placed right).

    A test that uses the broker fixtures carries the ``broker`` mark; the mark
    is on every test under ``tests/broker/`` and on none under ``tests/unit/``.
    """
    problems = []
    for item in items:
        path = Path(str(item.path))
        marked = item.get_closest_marker("broker") is not None
        uses_broker = bool(BROKER_FIXTURES & set(getattr(item, "fixturenames", ())))
        if uses_broker and not marked:
            problems.append(f"{item.nodeid}: uses the broker fixture without the broker mark")
        if path.is_relative_to(tests / "unit") and (marked or uses_broker):
            problems.append(f"{item.nodeid}: needs the broker but is in tests/unit/")
        if path.is_relative_to(tests / "broker") and not marked:
            problems.append(f"{item.nodeid}: in tests/broker/ without the broker mark")
    return problems


# What `make test-fast` does not provide (it needs Python and cargo only): the Debian tools
# of `make tools`, the JVM and Maven of the broker and the Java examples, the Go toolchain
# and the collector it builds, the container runtime. A unit test that runs one of these
# fails (tests/unit/conftest.py).
UNIT_REFUSED_PROGRAMS = frozenset(
    {
        "promtool",
        "prometheus",
        "amtool",
        "alertmanager",
        "prometheus-alertmanager",
        "kcat",
        "java",
        "keytool",
        "mvn",
        "go",
        "otelcol-turnaudit",
        "podman",
    }
)
REFUSED = (
    "the unit tier does not run {program}: a test that needs it belongs in tests/broker/ "
    "(make test provides it, make test-fast does not)"
)


def started_program(args: object) -> str:
    """The file name of the program a ``subprocess.Popen`` argument starts.

    ``args`` is what Popen takes: a sequence whose first item is the program, or one
    string (a program, or with ``shell=True`` a command line whose first word is).
    """
    if isinstance(args, str | bytes | os.PathLike):
        first = os.fsdecode(args).strip().split(maxsplit=1)
        name = first[0] if first else ""
    else:
        items = list(args)  # type: ignore[call-overload]  # Popen takes any sequence
        name = os.fsdecode(items[0]) if items else ""
    return name.rsplit("/", 1)[-1]


def write_refusing_programs(folder: Path, refusals: Path) -> None:
    """A stand-in for each refused program in ``folder`` (put it first on PATH): run by a
    child process, it says why on stderr, leaves its name in ``refusals`` and exits 1."""
    refusals.mkdir(parents=True, exist_ok=True)
    for program in UNIT_REFUSED_PROGRAMS:
        stand_in = folder / program
        stand_in.write_text(
            "#!/bin/sh\n"
            f"echo '{REFUSED.format(program=program)}' >&2\n"
            f": > '{refusals / program}'\n"
            "exit 1\n"
        )
        stand_in.chmod(0o755)
