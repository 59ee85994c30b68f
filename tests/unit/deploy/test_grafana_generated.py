"""deploy/grafana/ is generate.py's output: regenerated here, any difference fails."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

from tests.support import PROJECT_ROOT
from tests.support.grafana import generator


def test_the_checked_in_grafana_files_are_what_the_generator_writes() -> None:
    drift = list(generator().differences())
    assert not drift, (
        "deploy/grafana/ differs from generate.py's output; run "
        "`.venv/bin/python deploy/grafana/generate.py`:\n" + "\n".join(drift)
    )


def test_check_fails_on_a_hand_edit_and_writing_repairs_it(tmp_path: Path) -> None:
    out = tmp_path / "grafana"
    shutil.copytree(PROJECT_ROOT / "deploy/grafana", out)
    assert generator().main(["--check", "--out", str(out)]) == 0
    rules = out / "provisioning/alerting/turnaudit.yml"
    rules.write_text(rules.read_text().replace("for: 5m", "for: 9m", 1))
    assert generator().main(["--check", "--out", str(out)]) == 1
    assert generator().main(["--out", str(out)]) == 0
    assert generator().main(["--check", "--out", str(out)]) == 0


def test_another_datasource_uid_is_one_argument(tmp_path: Path) -> None:
    assert generator().main(["--out", str(tmp_path), "--datasource-uid", "metrics-eu"]) == 0
    text = (tmp_path / "provisioning/alerting/turnaudit.yml").read_text()
    assert "datasourceUid: metrics-eu" in text
    assert "turnaudit-prometheus" not in text


def test_the_library_is_in_the_dev_extra() -> None:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    dev = project["optional-dependencies"]["dev"]
    assert any(d.startswith("grafana-foundation-sdk") for d in dev)
    assert not any("grafana" in d for d in project["dependencies"])
