"""The Grafana generator (deploy/grafana/generate.py, a script, not a package) and its
sibling modules as modules."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any

import yaml

from tests.support import PROJECT_ROOT

GENERATOR = PROJECT_ROOT / "deploy/grafana/generate.py"


def generator() -> ModuleType:
    name = "turnaudit_grafana_generate"
    if name in sys.modules:
        return sys.modules[name]
    # Its siblings are imported as top-level modules, as when the script runs.
    if str(GENERATOR.parent) not in sys.path:
        sys.path.insert(0, str(GENERATOR.parent))
    spec = importlib.util.spec_from_file_location(name, GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def alert_rules() -> ModuleType:
    """deploy/grafana/alert_rules.py: the Grafana rules built from the Prometheus rules."""
    generator()
    return importlib.import_module("alert_rules")


def prometheus_alerts() -> dict[str, dict[str, Any]]:
    """deploy/prometheus/rules/: every alert rule by name."""
    return {
        rule["alert"]: rule
        for path in sorted((PROJECT_ROOT / "deploy/prometheus/rules").glob("*.yml"))
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def grafana_rules() -> dict[str, dict[str, Any]]:
    """The Grafana-managed alert rules deploy/grafana/ provisions, by title."""
    provisioned = yaml.safe_load(
        (PROJECT_ROOT / "deploy/grafana/provisioning/alerting/turnaudit.yml").read_text()
    )
    return {rule["title"]: rule for group in provisioned["groups"] for rule in group["rules"]}


def datasource_refs(board: dict[str, Any]) -> Iterator[tuple[str, Mapping[str, str]]]:
    """(where, datasource reference) of every variable, panel and panel query of a dashboard."""
    for variable in board["templating"]["list"]:
        if "datasource" in variable:
            yield f"variable {variable['name']}", variable["datasource"]
    for panel in board["panels"]:
        yield panel["title"], panel["datasource"]
        for target in panel["targets"]:
            yield f"{panel['title']} {target['refId']}", target["datasource"]
