"""``turnaudit eval bundle`` and ``--auditor two-tier`` failures: one stderr line, exit 2 or 1."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from .builders import battery, label_pack
from .ollama_standin import TAG

Cli = Callable[[Sequence[str]], int]


@pytest.mark.parametrize(
    "case",
    [
        (["eval", "bundle", "--check"], 2, "--check takes only the ARCHIVE"),
        (["eval", "bundle", "--check", "b.tar", "--report", "r.json"], 2, "not --report"),
        (["eval", "bundle", "--output", "b.tar"], 2, "missing --report, --evidence, --labels"),
        (
            [
                "eval",
                "bundle",
                "--report",
                "r.json",
                "--evidence",
                "e.json",
                "--labels",
                "l.json",
                "--source",
                "m.jsonl",
                "--output",
                "b.tar",
            ],
            2,
            "cannot read the report",
        ),
        (["eval", "bundle", "--check", "nowhere.tar"], 1, "not a readable tar archive"),
        (
            [
                "eval",
                "evidence",
                "labels.json",
                "--auditor",
                "two-tier",
                "--output",
                "e.json",
                "--report",
                "r.json",
            ],
            2,
            "--auditor two-tier needs --model TAG and --expected-digest",
        ),
        (
            [
                "eval",
                "evidence",
                "labels.json",
                "--auditor",
                "rules",
                "--model",
                TAG,
                "--output",
                "e.json",
                "--report",
                "r.json",
            ],
            2,
            "apply to --auditor two-tier or ollama only",
        ),
    ],
)
def test_each_failure_is_one_line_with_its_exit_code(
    eval_cli: Cli,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: tuple[list[str], int, str],
) -> None:
    argv, code, needle = case
    monkeypatch.chdir(tmp_path)
    assert eval_cli(argv) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert needle in err
    assert "Traceback" not in err


def test_unversioned_labels_are_a_one_line_refusal(
    eval_cli: Cli, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pack = label_pack(battery())
    pack["cases"][0]["oracle_source"] = "alice"
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps(pack))
    argv = [
        "eval",
        "evidence",
        str(labels),
        "--auditor",
        "rules",
        "--output",
        str(tmp_path / "e.json"),
        "--report",
        str(tmp_path / "r.json"),
    ]
    assert eval_cli(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert pack["cases"][0]["task_id"] in err
    assert not (tmp_path / "e.json").exists()
