"""Owner-only files: the helper under any umask, every file writer's mode, the setting."""

from __future__ import annotations

import json
import os
import stat
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.events import encode, turn
from turnaudit import cli
from turnaudit.consumers.log_sink import TurnLineWriter
from turnaudit.consumers.runtime.settings import LogSinkSettings
from turnaudit.errors import ConfigurationError
from turnaudit.evaluation import review_pack
from turnaudit.evaluation.bundle import _write_tar
from turnaudit.evaluation.files import write_json
from turnaudit.files import (
    FileModes,
    configured_modes,
    open_private,
    private_dir,
    write_private,
)
from turnaudit.producers.spool import DiskSpool
from turnaudit.replay.checkpoint import ReplayCheckpoint
from turnaudit.replay.files import open_for_resume, write_atomically
from turnaudit.settings import check_writable_file

GROUP = FileModes(0o640)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o000, 0o022, 0o077], ids=["umask-000", "umask-022", "umask-077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """Every test under a wide, the usual and a narrow umask: the mode must not follow it."""
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


class TestTheHelper:
    def test_a_new_file_and_its_folders_are_owner_only(self, tmp_path: Path, umask: int) -> None:
        path = tmp_path / "a" / "b" / "out.jsonl"
        with open_private(path, "a", parents=True) as out:
            out.write("x\n")
        assert mode(path) == 0o600
        assert mode(tmp_path / "a") == mode(tmp_path / "a" / "b") == 0o700
        assert mode(tmp_path) == stat.S_IMODE(tmp_path.stat().st_mode)  # not ours: unchanged

    def test_an_existing_readable_file_is_brought_back(self, tmp_path: Path, umask: int) -> None:
        path = tmp_path / "old.jsonl"
        path.write_text("old\n")
        path.chmod(0o644)
        with open_private(path, "a") as out:
            out.write("new\n")
        assert mode(path) == 0o600
        assert path.read_text() == "old\nnew\n"

    def test_a_group_mode_is_exactly_that(self, tmp_path: Path, umask: int) -> None:
        write_private(tmp_path / "d" / "f.json", b"{}", GROUP)
        assert mode(tmp_path / "d" / "f.json") == 0o640
        assert mode(tmp_path / "d") == 0o750
        private_dir(tmp_path / "e", GROUP)
        assert mode(tmp_path / "e") == 0o750

    def test_an_atomic_write_leaves_no_temporary(self, tmp_path: Path, umask: int) -> None:
        write_private(tmp_path / "f.json", b"1")
        write_private(tmp_path / "f.json", b"2")
        assert [p.name for p in tmp_path.iterdir()] == ["f.json"]
        assert (tmp_path / "f.json").read_bytes() == b"2"

    def test_a_read_mode_is_refused(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="does not write"):
            open_private(tmp_path / "x", "r")


class TestTheSetting:
    @given(bits=st.integers(0, 0o7777))
    def test_only_modes_with_owner_rw_nothing_for_others_and_no_execute(self, bits: int) -> None:
        allowed = bits & 0o600 == 0o600 and not bits & 0o7117 and bits <= 0o777
        env = {"TURNAUDIT_FILE_MODE": f"{bits:04o}"}
        if not allowed:
            with pytest.raises(ConfigurationError, match="TURNAUDIT_FILE_MODE=") as refused:
                FileModes.from_env(env)
            assert "\n" not in str(refused.value)
            return
        modes = FileModes.from_env(env)
        assert modes.file == bits
        assert modes.folder & 0o700 == 0o700

    @pytest.mark.parametrize("raw", ["rw-r-----", "0x1a0", "9"])
    def test_not_an_octal_mode_is_one_line(self, raw: str) -> None:
        with pytest.raises(ConfigurationError, match="is not an octal mode"):
            FileModes.from_env({"TURNAUDIT_FILE_MODE": raw})

    def test_the_cli_refuses_a_bad_mode_with_one_line_and_exit_2(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        monkeypatch.setenv("TURNAUDIT_FILE_MODE", "0644")
        configured_modes.cache_clear()
        try:
            code = cli.main(["schemas", "list"])
        finally:
            configured_modes.cache_clear()
        err = capsys.readouterr().err
        assert code == 2
        assert err.count("\n") == 1
        assert "TURNAUDIT_FILE_MODE=0644" in err


def _log_files(folder: Path) -> list[Path]:
    settings = LogSinkSettings(
        file=folder / "logs" / "turns.jsonl", file_max_bytes=1024, file_backups=3
    )
    writer = TurnLineWriter(settings)
    line = json.dumps({"x": "y" * 200}).encode() + b"\n"
    writer.write_lines([line] * 20)  # several rotations
    writer.close()
    return sorted((folder / "logs").iterdir())


def _review_pack(folder: Path) -> list[Path]:
    manifest = folder / "m.jsonl"
    manifest.write_text(
        json.dumps({"task_id": "t", "task_family": "f", "trace": {"steps": [], "source": {}}})
        + "\n"
    )
    review_pack.export([(None, manifest)], folder / "out" / "pack.json")
    return [folder / "out" / "pack.json"]


def _replay_files(folder: Path) -> list[Path]:
    write_atomically(folder / "r" / "metrics.txt", b"x")
    open_for_resume(folder / "r" / "out.jsonl", 0).close()
    ReplayCheckpoint("f", "t", {0: 0}, {0: 1}, {0: 0}, 0, 0, 0).save(folder / "r" / "cp.json")
    return sorted((folder / "r").iterdir())


def _spool(folder: Path) -> list[Path]:
    spool = DiskSpool(folder / "spool")
    spool.append("t.turn-events", b"s", encode(turn("s", 0)))
    spool.close()
    return sorted((folder / "spool").iterdir())


def _checked_log_file(folder: Path) -> list[Path]:
    check_writable_file(folder / "c" / "turns.jsonl", "TURNAUDIT_LOG_FILE")
    return [folder / "c" / "turns.jsonl"]


def _evidence(folder: Path) -> list[Path]:
    write_json(folder / "e" / "evidence.json", {"cases": []})
    _write_tar(folder / "e" / "bundle.tar", {"a.json": b"{}"})
    with tarfile.open(folder / "e" / "bundle.tar") as archive:  # extracted: owner-only too
        assert [m.mode for m in archive.getmembers()] == [0o600]
    return sorted((folder / "e").iterdir())


FILE_WRITERS: dict[str, Callable[[Path], list[Path]]] = {
    "log sink and rotated files": _log_files,
    "review pack": _review_pack,
    "replay outputs and checkpoint": _replay_files,
    "spool": _spool,
    "checked log file": _checked_log_file,
    "evidence and bundle": _evidence,
}


class TestEveryFileWriter:
    @pytest.mark.parametrize("writer", list(FILE_WRITERS))
    def test_every_file_is_owner_only(self, tmp_path: Path, umask: int, writer: str) -> None:
        written = FILE_WRITERS[writer](tmp_path)
        assert written
        for path in written:
            assert mode(path) == 0o600, (path, oct(mode(path)))
            assert mode(path.parent) in (0o700, mode(tmp_path)), path.parent
