"""Habits the code keeps, each held by a scan that is proved on planted code:

* every ``type: ignore`` names its error code and says why (a comment after it);
* ``dict[str, Any]`` stays within a bound in the package: a shape that is known is a
  TypedDict or a dataclass, and the generic ones are named (``AvroRecord``);
* only ``src/turnaudit/kafka/admin.py`` builds an ``AdminClient``.
"""

from __future__ import annotations

import ast
import io
import re
import shutil
import tokenize
from pathlib import Path

import pytest

from tests.support import PROJECT_ROOT

PACKAGE_FOLDERS = ("src/turnaudit", "producers", "consumers")
ALL_PYTHON = (*PACKAGE_FOLDERS, "tests", "benchmarks", "deploy")


def python_files(root: Path, folders: tuple[str, ...]) -> list[Path]:
    return [
        path
        for folder in folders
        for path in sorted((root / folder).rglob("*.py"))
        if "__pycache__" not in path.parts
    ]


# The ignore comment with its error codes in brackets, then a reason: ``# why`` or ``- why``.
IGNORE = re.compile(r"type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<rest>.*)")
REASON = re.compile(r"^\s*[#-]\s*\S.{2,}")  # "# why" or "- why"


def unexplained_ignores(path: Path) -> list[int]:
    """Lines of ``path`` whose ``type: ignore`` has no error code or no reason."""
    found = []
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        match = IGNORE.search(token.string)
        if match and not (match["codes"] and REASON.match(match["rest"])):
            found.append(token.start[0])
    return found


def ignores_without_reason(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root).as_posix()}:{line}"
        for path in python_files(root, ALL_PYTHON)
        for line in unexplained_ignores(path)
    ]


def test_every_type_ignore_says_why() -> None:
    assert ignores_without_reason(PROJECT_ROOT) == []


@pytest.mark.parametrize(
    ("line", "bare"),
    [
        ("x = f()  # type: ignore\n", True),
        ("x = f()  # type: ignore[arg-type]\n", True),
        ("x = f()  # type:ignore[arg-type] #\n", True),
        ("x = f()  # type: ignore[arg-type] -\n", True),
        ("x = f()  # type: ignore[misc] - a list of one\n", False),
        ("x = f()  # type: ignore  # why not\n", True),  # no error code
        ("x = f()  # type: ignore[arg-type]  # a stand-in client\n", False),
        ("x = 'type: ignore'  # a string, not a comment\n", False),
    ],
)
def test_the_scan_tells_a_bare_ignore(tmp_path: Path, line: str, bare: bool) -> None:
    path = tmp_path / "module.py"
    path.write_text(line)
    assert unexplained_ignores(path) == ([1] if bare else [])


# dict[str, Any] in src/turnaudit, producers/ and consumers/: at most this many.
MAX_ANY_DICTS = 25
ANY_DICT = re.compile(r"\bdict\[\s*str\s*,\s*(?:typing\.)?Any\s*\]")


def any_dicts(root: Path) -> list[str]:
    """Every ``dict[str, Any]`` spelled in the package's code (comments and strings left out)."""
    found = []
    for path in python_files(root, PACKAGE_FOLDERS):
        text = path.read_text(encoding="utf-8")
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        code = [t for t in tokens if t.type not in (tokenize.COMMENT, tokenize.STRING)]
        lines: dict[int, list[str]] = {}
        for token in code:
            lines.setdefault(token.start[0], []).append(token.string)
        relative = path.relative_to(root).as_posix()
        for number, parts in lines.items():
            found += [f"{relative}:{number}"] * len(ANY_DICT.findall("".join(parts)))
    return found


def test_dict_str_any_stays_within_its_bound() -> None:
    found = any_dicts(PROJECT_ROOT)
    assert len(found) <= MAX_ANY_DICTS, "\n".join(found)
    assert len(found) > 0  # the scan reads the package (a few generic ones remain)


def test_the_count_sees_a_planted_dict(tmp_path: Path) -> None:
    for folder in PACKAGE_FOLDERS:
        shutil.copytree(
            PROJECT_ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    before = len(any_dicts(tmp_path))
    with (tmp_path / "producers" / "adapter.py").open("a", encoding="utf-8") as source:
        source.write(
            "def planted(x: dict[str, Any]) -> dict[str,Any]:  # dict[str, Any]\n"
            '    return {"s": "dict[str, Any]"}\n'
        )
    assert len(any_dicts(tmp_path)) == before + 2  # the comment and the string do not count


ADMIN_OWNER = "src/turnaudit/kafka/admin.py"


def admin_constructions(root: Path) -> list[str]:
    """Every call of ``AdminClient(…)`` (by name or attribute) in the package."""
    found = []
    for path in python_files(root, PACKAGE_FOLDERS):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name == "AdminClient":
                    found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return found


def test_only_the_admin_wrapper_builds_an_admin_client() -> None:
    found = admin_constructions(PROJECT_ROOT)
    assert [f for f in found if not f.startswith(ADMIN_OWNER + ":")] == []
    assert len(found) == 1  # new_admin


def test_the_admin_scan_finds_a_planted_construction(tmp_path: Path) -> None:
    for folder in PACKAGE_FOLDERS:
        shutil.copytree(
            PROJECT_ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    planted = {
        "src/turnaudit/kafka/topics.py": "X = AdminClient({})\n",
        "consumers/tail.py": (
            "import confluent_kafka.admin\nX = confluent_kafka.admin.AdminClient({})\n"
        ),
    }
    for relative, text in planted.items():
        with (tmp_path / relative).open("a", encoding="utf-8") as source:
            source.write(text)
    outside = [f for f in admin_constructions(tmp_path) if not f.startswith(ADMIN_OWNER + ":")]
    assert sorted(f.split(":")[0] for f in outside) == sorted(planted)
