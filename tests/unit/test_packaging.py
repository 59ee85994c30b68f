"""Every package of the one ``turnaudit`` namespace is in pyproject's package list.

setuptools installs exactly the packages listed (the package-dir mapping puts
``producers/``, ``consumers/`` and ``schemas/`` under ``turnaudit``); a folder
left out works from this checkout's editable install and is missing from a
wheel.
"""

from __future__ import annotations

import tomllib

from tests.support import PROJECT_ROOT


def test_every_package_folder_is_listed() -> None:
    setuptools = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for package, folder in setuptools["package-dir"].items():
        root = PROJECT_ROOT / folder
        for init in root.rglob("__init__.py"):
            relative = init.parent.relative_to(root).parts
            name = ".".join((package, *relative))
            # Only the mapping closest to the folder names it (src/turnaudit holds none of
            # the mapped folders, so nothing is named twice).
            found.add(name)
    assert found - listed == set(), "folders with __init__.py missing from the package list"
    assert listed - found == set(), "listed packages without a folder"
