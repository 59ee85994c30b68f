"""``replay --archive``: every argument it cannot take is one line and exit 2, before the
cluster is asked and before any output or checkpoint is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnaudit.cli import main

# (extra arguments, with the archive a directory, what the line says)
REFUSED = [
    ([], False, "not a directory"),
]


@pytest.mark.parametrize("case", REFUSED)
def test_an_argument_replay_from_the_archive_cannot_take_is_one_line_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    case: tuple[list[str], bool, str],
) -> None:
    extra, is_dir, said = case
    # Nothing listens here: a check that asked the cluster first would fail otherwise.
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    archive = tmp_path / "archive"
    if is_dir:
        archive.mkdir()
    out = tmp_path / "out.jsonl"
    code = main(["replay", "--archive", str(archive), *extra, "--into", f"jsonl:{out}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert (code, len(err)) == (2, 1)
    assert said in err[0]
    assert list(tmp_path.iterdir()) == ([archive] if is_dir else [])


@pytest.mark.parametrize(
    "window",
    [
        ["--from", "2026-11-01T00:00", "--time", "event"],
        ["--from", "2026-11-01T00:00"],
        ["--to", "2026-11-02T00:00", "--time", "broker"],
        ["--from-offsets", "0:5"],
        ["--group", "g1", "--from", "2026-11-01T00:00"],
    ],
)
def test_a_range_by_event_time_broker_time_or_offsets_and_a_group_are_taken_with_the_archive(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    window: list[str],
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("TURNAUDIT_CONNECT_TIMEOUT_S", "1")
    (tmp_path / "archive").mkdir()
    args = [*window, "--into", f"jsonl:{tmp_path / 'o'}"]
    code = main(["replay", "--archive", str(tmp_path / "archive"), *args])
    # Past the arguments: it goes on to the cluster, which is not there (exit 1, not 2).
    assert code == 1
    assert "--archive" not in capsys.readouterr().err
