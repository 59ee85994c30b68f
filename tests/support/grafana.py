"""The Grafana generator (deploy/grafana/generate.py, a script, not a package) and its
sibling modules as modules."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

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
