"""docs/architecture.md is the map, and it is right.

Every place it names exists where it says: each path; each dotted module (and the name
after it); each bare name, in the row or paragraph that places it, is a module of a folder
it names there, or defined (a class, function, constant or method) in a module it names
there; each setting it quotes is read by the source. And every module of the package is
placed. The checks are proved on a planted map.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import PROJECT_ROOT
from tests.support.imports import PACKAGES, modules

DOC = PROJECT_ROOT / "docs" / "architecture.md"
TOP = (
    "src",
    "producers",
    "consumers",
    "schemas",
    "tests",
    "docs",
    "deploy",
    "native",
    "benchmarks",
)
PATH = re.compile(rf"^(?:{'|'.join(TOP)})/[\w/.*-]*$")
DOTTED = re.compile(r"^turnaudit(?:\.\w+)*$")
NAME = re.compile(r"^(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)(?:\(\))?$")
SETTING = re.compile(r"^(?:TURNAUDIT_|KAFKA_)[A-Z_]+$")
TICKED = re.compile(r"`([^`]+)`")
# Words the map quotes that are not places: what a turn or a command carries.
NOT_PLACES = {
    "turnaudit": "the namespace",
    "occurred_at": "a TurnEvent field (src/turnaudit/events.py)",
    "TYPE_CHECKING": "typing's flag",
    "confluent_kafka": "the Kafka client library behind the door",
}


@dataclass
class Unit:
    """One row of a table, or one paragraph or list item: the context of its names."""

    line: int
    tokens: list[str] = field(default_factory=list)


def units(text: str) -> list[Unit]:
    found: list[Unit] = []
    current: Unit | None = None
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            current = None
            continue
        stripped = line.strip()
        if fenced or not stripped or stripped.startswith("#"):
            current = None
            continue
        starts = stripped.startswith(("|", "* ", "- ")) or re.match(r"^\d+\. ", stripped)
        if current is None or starts:
            current = Unit(number)
            found.append(current)
        current.tokens += TICKED.findall(line)
    return found


def _module_path(root: Path, dotted: str) -> Path | None:
    for folder, package in PACKAGES.items():
        if dotted == package or dotted.startswith(package + "."):
            rest = dotted[len(package) :].lstrip(".").split(".") if dotted != package else []
            base = root.joinpath(folder, *rest)
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if rest and candidate.exists():
                    return candidate
            if not rest and (base / "__init__.py").exists():
                return base / "__init__.py"
    schemas = root / "schemas" / "__init__.py"
    return schemas if dotted == "turnaudit.schemas" and schemas.exists() else None


def defined(path: Path) -> set[str]:
    """Names ``path`` defines at its top, and ``Class.member`` and bare ``member`` for
    what its classes define (methods, fields)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        names |= _bound(node)
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                for name in _bound(member):
                    names |= {name, f"{node.name}.{name}"}
    return names


def _bound(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, ast.ImportFrom):  # re-exported names
        return {alias.asname or alias.name for alias in node.names}
    return set()


def _in_source(root: Path, word: str) -> bool:
    return any(
        word in path.read_text(encoding="utf-8")
        for folder in PACKAGES
        for path in (root / folder).rglob("*.py")
    )


def _places(root: Path, unit: Unit, wrong: list[str]) -> tuple[list[Path], list[Path]]:
    """The files and folders ``unit`` names (paths, dotted modules); what is missing
    goes to ``wrong``."""
    files: list[Path] = []
    folders: list[Path] = []
    for token in unit.tokens:
        if PATH.match(token):
            hits = sorted(root.glob(token)) if "*" in token else [root / token]
            if not hits or not all(hit.exists() for hit in hits):
                wrong.append(f"line {unit.line}: no {token}")
            elif token.endswith("/"):
                folders.append(root / token)
            elif "*" not in token:
                files.append(root / token)
        elif DOTTED.match(token):
            module, name = token, ""
            while module and _module_path(root, module) is None:
                module, _, last = module.rpartition(".")
                name = f"{last}.{name}".rstrip(".")
            found = _module_path(root, module) if module else None
            if found is None or (name and name not in defined(found)):
                wrong.append(f"line {unit.line}: no {token}")
            else:
                files.append(found)
    # A bare name that is a module of a folder the unit names places that module too.
    files += [
        folder / f"{token}.py"
        for token in unit.tokens
        for folder in folders
        if NAME.match(token) and (folder / f"{token}.py").exists()
    ]
    return files, folders


def _names_in(path: Path) -> set[str]:
    if path.suffix == ".py":
        return defined(path)
    return set(re.findall(r"\w+", path.read_text(encoding="utf-8")))  # the crate's sources


def misplaced(root: Path, doc: Path) -> list[str]:
    """Every name the map places that is not where it says, with the map's line."""
    wrong: list[str] = []
    for unit in units(doc.read_text(encoding="utf-8")):
        files, folders = _places(root, unit, wrong)
        known = set().union(*(_names_in(path) for path in files if path.is_file()))
        for token in unit.tokens:
            if SETTING.match(token):
                if not _in_source(root, token):
                    wrong.append(f"line {unit.line}: no source reads {token}")
                continue
            match = NAME.match(token)
            if PATH.match(token) or DOTTED.match(token) or token in NOT_PLACES or not match:
                continue
            name = match["name"]
            if name not in known and not any((f / f"{name}.py").exists() for f in folders):
                wrong.append(f"line {unit.line}: {token} is not in what the line names")
    return wrong


def unplaced(root: Path, doc: Path) -> list[str]:
    """Modules of the package the map does not place: not by path, dotted name, or as a
    name in a row or paragraph that names its folder."""
    placed: set[Path] = set()
    for unit in units(doc.read_text(encoding="utf-8")):
        folders = [root / t for t in unit.tokens if PATH.match(t) and t.endswith("/")]
        for token in unit.tokens:
            if PATH.match(token) and token.endswith(".py"):
                placed.add((root / token).resolve())
            elif DOTTED.match(token) and (found := _module_path(root, token)) is not None:
                placed.add(found.resolve())
            elif NAME.match(token):
                placed |= {
                    (folder / f"{token}.py").resolve()
                    for folder in folders
                    if (folder / f"{token}.py").exists()
                }
    return sorted(
        module.path.relative_to(root).as_posix()
        for module in modules(root).values()
        if not module.is_package and module.path.resolve() not in placed
    )


def test_the_map_places_names() -> None:
    assert sum(len(unit.tokens) for unit in units(DOC.read_text(encoding="utf-8"))) > 300


def test_every_name_the_map_places_is_where_it_says() -> None:
    assert misplaced(PROJECT_ROOT, DOC) == []


def test_every_module_of_the_package_is_placed() -> None:
    assert unplaced(PROJECT_ROOT, DOC) == []


@pytest.mark.parametrize(
    ("planted", "found"),
    [
        ("| x | `src/turnaudit/nowhere.py` |", "no src/turnaudit/nowhere.py"),
        ("| x | `src/turnaudit/kafka/topics.py` (`NoSuchSpec`) |", "NoSuchSpec"),
        ("| x | `turnaudit.kafka.topics.no_such` |", "no turnaudit.kafka.topics.no_such"),
        ("| x | `turnaudit.kafka.nowhere` |", "no turnaudit.kafka.nowhere"),
        ("| x | `src/turnaudit/verify/` | `verifier`, `no_such_module` |", "no_such_module"),
        ("| x | `producers/publisher.py` | `TurnEventPublisher.no_such` |", "no_such"),
        ("| x | `KafkaProducer` with no place named |", "KafkaProducer"),
        ("| x | `TURNAUDIT_NO_SUCH_SETTING` |", "TURNAUDIT_NO_SUCH_SETTING"),
        ("* a list item naming `src/turnaudit/nowhere/`", "no src/turnaudit/nowhere/"),
    ],
)
def test_the_check_finds_a_name_that_is_not_where_the_map_says(
    tmp_path: Path, planted: str, found: str
) -> None:
    doc = tmp_path / "architecture.md"
    doc.write_text(DOC.read_text(encoding="utf-8") + "\n" + planted + "\n", encoding="utf-8")
    wrong = misplaced(PROJECT_ROOT, doc)
    assert len(wrong) == 1
    assert found in wrong[0]


def test_the_check_finds_a_module_the_map_leaves_out(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    doc = tmp_path / "architecture.md"
    doc.write_text(text.replace("`truth_file` (the ground truth file's shape)", "x"))
    assert unplaced(PROJECT_ROOT, doc) == ["producers/truth_file.py"]


# Every source file of the package: the core, the runtime and consumer sides, the
# deploy scripts (the Grafana generator) and the native crate's Rust. Tests and
# benchmarks are not held to it.
SOURCE_FOLDERS = (
    ("src/turnaudit", "*.py"),
    ("producers", "*.py"),
    ("consumers", "*.py"),
    ("deploy", "*.py"),
    ("native/src", "*.rs"),
)
MAX_SOURCE_LINES = 450


def source_lengths(root: Path = PROJECT_ROOT) -> dict[str, int]:
    """Lines (as ``wc -l`` counts them) of every source file under the source folders."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes().count(b"\n")
        for folder, pattern in SOURCE_FOLDERS
        for path in sorted((root / folder).rglob(pattern))
        if "__pycache__" not in path.parts
    }


def over_the_limit(root: Path = PROJECT_ROOT) -> dict[str, int]:
    return {path: n for path, n in source_lengths(root).items() if n > MAX_SOURCE_LINES}


def test_the_size_check_sees_every_part_of_the_package() -> None:
    lengths = source_lengths()
    for expected in (
        "src/turnaudit/cli.py",
        "producers/publisher.py",
        "consumers/runtime/loop.py",
        "deploy/grafana/generate.py",
        "native/src/lib.rs",
        "native/src/track/place.rs",
    ):
        assert expected in lengths
    assert len(lengths) > 100


def test_the_size_check_names_a_file_one_line_over(tmp_path: Path) -> None:
    for folder, name, lines in (
        ("src/turnaudit", "at_limit.py", MAX_SOURCE_LINES),
        ("consumers/runtime", "over.py", MAX_SOURCE_LINES + 1),
        ("deploy/grafana", "gen.py", 3 * MAX_SOURCE_LINES),
        ("native/src/track", "long.rs", MAX_SOURCE_LINES + 1),
        ("native/src", "lib.rs", MAX_SOURCE_LINES),
    ):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / name).write_text("x = 1\n" * lines)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_long.py").write_text("x = 1\n" * 1000)  # not source
    assert over_the_limit(tmp_path) == {
        "consumers/runtime/over.py": MAX_SOURCE_LINES + 1,
        "deploy/grafana/gen.py": 3 * MAX_SOURCE_LINES,
        "native/src/track/long.rs": MAX_SOURCE_LINES + 1,
    }


def test_no_source_file_is_over_the_line_limit() -> None:
    """A module over the limit does more than one job: split it by what it does."""
    over = over_the_limit()
    assert over == {}, f"over {MAX_SOURCE_LINES} lines: " + ", ".join(
        f"{path} ({n})" for path, n in sorted(over.items(), key=lambda item: -item[1])
    )
