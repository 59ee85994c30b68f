"""The Grafana generator (deploy/grafana/generate.py, a script, not a package) as a module."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.support import PROJECT_ROOT

GENERATOR = PROJECT_ROOT / "deploy/grafana/generate.py"


def generator() -> ModuleType:
    name = "turnaudit_grafana_generate"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
