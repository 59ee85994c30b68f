"""The wheel ``make dist`` builds installs and runs where no Rust toolchain is: a fresh venv,
cargo not on PATH, only the wheel and its declared dependencies (binaries from PyPI)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.support import PROJECT_ROOT
from tests.support.dist import BUILD_TOOLS, WheelVenv, built_wheel, install_wheel, wheel_members
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.settings import KafkaSettings

SHIPPED = shipped_catalog().versions
pytestmark = pytest.mark.broker

# Modules of the `parquet` extra (pyproject.toml): the wheel venv installs no extra.
EXTRAS_ONLY = {
    "turnaudit.archive.export_columns": "pyarrow",
    "turnaudit.archive.export_parquet": "pyarrow",
}
WHEEL_NAME = re.compile(r"turnaudit-[0-9.]+-cp311-abi3-manylinux_2_\d+_x86_64\.whl")


@pytest.fixture(scope="module")
def wheel() -> Path:
    return built_wheel()


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> WheelVenv:
    return install_wheel(wheel, tmp_path_factory.mktemp("wheel-venv") / "venv")


def test_the_wheel_is_abi3_manylinux_and_carries_the_native_module(wheel: Path) -> None:
    assert WHEEL_NAME.fullmatch(wheel.name), wheel.name
    members = wheel_members(wheel)
    assert "turnaudit/_native.abi3.so" in members
    assert "turnaudit/_native.pyi" in members
    # Every shipped writer schema, and nothing of the checkout's tests or tools.
    shipped = {p.name for p in (PROJECT_ROOT / "schemas").glob("*.avsc")}
    assert {m.rsplit("/", 1)[1] for m in members if m.endswith(".avsc")} == shipped
    assert not [m for m in members if m.startswith(("tests/", "deploy/", "benchmarks/"))]


def test_the_sdist_holds_the_crate_it_builds_from() -> None:
    import tarfile  # noqa: PLC0415 - this test only

    sdists = list((PROJECT_ROOT / "dist").glob("turnaudit-*.tar.gz"))
    assert len(sdists) == 1, sdists
    with tarfile.open(sdists[0]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    crate = {"native/Cargo.toml", "native/Cargo.lock"} | {
        p.relative_to(PROJECT_ROOT).as_posix() for p in (PROJECT_ROOT / "native/src").rglob("*.rs")
    }
    assert crate <= names, crate - names


def test_no_rust_toolchain_is_reachable_in_the_venv(venv: WheelVenv) -> None:
    for tool in BUILD_TOOLS:
        assert shutil.which(tool, path=venv.env["PATH"]) is None, tool


def test_every_module_of_the_installed_wheel_imports(venv: WheelVenv, tmp_path: Path) -> None:
    """Nothing is imported that the wheel or its declared dependencies lack (dev tools such
    as PyYAML or the Grafana SDK are not installed here)."""
    code = (
        "import importlib, json, pkgutil, turnaudit\n"
        "names = sorted(m.name for m in pkgutil.walk_packages(turnaudit.__path__, 'turnaudit.'))\n"
        "failed = {}\n"
        "for name in names:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failed[name] = repr(exc)\n"
        "print(json.dumps({'modules': names, 'failed': failed, 'file': turnaudit.__file__}))\n"
    )
    ran = venv.run(venv.python, "-c", code, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    # Only the modules of an optional extra lack it, and only its package.
    assert result["failed"] == {
        name: f"ModuleNotFoundError(\"No module named '{package}'\")"
        for name, package in EXTRAS_ONLY.items()
    }
    assert str(venv.root) in result["file"]  # the installed copy, not this checkout
    assert "turnaudit.reading" in result["modules"]
    assert "turnaudit.consumers.verify_follow" in result["modules"]


def test_schemas_check_runs_from_the_wheel(venv: WheelVenv, tmp_path: Path) -> None:
    ran = venv.run(venv.turnaudit, "schemas", "check", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert f"FULL_TRANSITIVE: all {len(SHIPPED)} versions read each other's data" in ran.stdout, (
        ran.stdout
    )


def test_the_reading_example_reads_the_broker_from_the_wheel(
    venv: WheelVenv, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers or "",
        "TURNAUDIT_TOPIC_PREFIX": kafka_settings.topics.prefix,
    }
    published = venv.run(
        venv.turnaudit,
        "simulate",
        "--events",
        "120",
        "--seed",
        "3",
        "--spool-dir",
        tmp_path / "spool",
        cwd=tmp_path,
        extra_env=env,
    )
    assert published.returncode == 0, published.stderr
    example = PROJECT_ROOT / "docs/examples/read_turns.py"
    ran = venv.run(venv.python, example, cwd=tmp_path, extra_env=env)
    assert ran.returncode == 0, ran.stderr
    *turns, summary = [json.loads(line) for line in ran.stdout.splitlines()]
    assert summary["summary"]["turns"] == len(turns) == 120
