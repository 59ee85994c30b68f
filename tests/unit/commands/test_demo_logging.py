"""While the demo runs, every log line goes to its file and stdout keeps the summary; after
it, logging and stderr are what they were."""

from __future__ import annotations

import json
import logging
import stat
import sys
from pathlib import Path

import pytest
import structlog

from turnaudit.commands.demo_logging import file_level, logging_to_file
from turnaudit.consumers.log_sink import service_logging
from turnaudit.logconfig import configure_cli_logging


@pytest.mark.parametrize(
    ("cli", "file"),
    [("WARNING", "INFO"), ("ERROR", "INFO"), ("INFO", "INFO"), ("DEBUG", "DEBUG"), ("x", "INFO")],
)
def test_the_file_keeps_info_lines_unless_debug_was_asked_for(cli: str, file: str) -> None:
    assert file_level(cli) == file


def test_log_lines_of_every_kind_go_to_the_file_and_none_to_stdout_or_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_cli_logging("WARNING")
    before = structlog.get_config()
    stderr = sys.stderr
    path = tmp_path / "out" / "demo.log"
    with logging_to_file(path):
        structlog.get_logger("cli").info("cli_line", n=1)
        with service_logging("INFO"):  # the services' configuration, through stdlib logging
            structlog.get_logger("service").warning("service_line", n=2)
            logging.getLogger("library").error("stdlib line")
        print("summary row")
        sys.stderr.write("a stray line\n")
    assert sys.stderr is stderr
    assert structlog.get_config() == before
    out = capsys.readouterr()
    assert out.out == "summary row\n"
    assert out.err == ""
    lines = path.read_text().splitlines()
    events = [json.loads(line)["event"] for line in lines if line.startswith("{")]
    assert events == ["cli_line", "service_line"]
    assert "stdlib line" in lines
    assert "a stray line" in lines
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_error_inside_still_restores_logging_and_stderr(tmp_path: Path) -> None:
    configure_cli_logging("WARNING")
    before, stderr = structlog.get_config(), sys.stderr
    with pytest.raises(RuntimeError), logging_to_file(tmp_path / "demo.log"):
        raise RuntimeError("the broker went away")
    assert sys.stderr is stderr
    assert structlog.get_config() == before


def test_a_second_run_rewrites_the_file(tmp_path: Path) -> None:
    path = tmp_path / "demo.log"
    for n in (1, 2):
        with logging_to_file(path):
            structlog.get_logger().info("run", n=n)
    assert [json.loads(line)["n"] for line in path.read_text().splitlines()] == [2]
