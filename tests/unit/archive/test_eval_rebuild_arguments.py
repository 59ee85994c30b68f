"""``eval rebuild --archive``'s wrong arguments, before any broker is asked: each is one
line on stderr and exit 2 (a folder that is no directory), and no evidence is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnaudit.cli import main


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--archive", "{tmp}/none"], "not a directory"),
    ],
)
def test_a_wrong_archive_argument_of_eval_rebuild_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    evidence = tmp_path / "evidence.json"
    args = [a.format(tmp=tmp_path) for a in extra]
    code = main(
        ["eval", "rebuild", *args, "--labels", str(tmp_path / "labels"), "--output", str(evidence)]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert (code, len(err)) == (2, 1), err
    assert says in err[0]
    assert not evidence.exists()
