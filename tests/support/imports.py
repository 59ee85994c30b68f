"""The project's import graph, read from the source with ``ast`` (nothing is imported).

Every ``import`` and ``from … import`` counts, wherever it stands: at the top, inside
a function, under ``if TYPE_CHECKING:`` or ``if __name__ == "__main__":``. A
``from package import name`` is an edge to the submodule ``package.name`` when there
is one, else to ``package``. Used by tests/unit/test_layering.py (the rules between
layers) and tests/unit/test_import_graph.py (no circles).
"""

from __future__ import annotations

import ast
import itertools
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# Folder -> the dotted package it installs as (pyproject's package-dir mapping).
PACKAGES = {
    "src/turnaudit": "turnaudit",
    "consumers": "turnaudit.consumers",
    "producers": "turnaudit.producers",
}
ROOT_PACKAGE = "turnaudit"


@dataclass(frozen=True)
class Module:
    name: str  # dotted
    path: Path
    is_package: bool  # an __init__.py


def module_name(root: Path, path: Path) -> tuple[str, bool]:
    """Dotted module name of ``path`` and whether it is a package's ``__init__``."""
    relative = path.relative_to(root).as_posix()
    for folder, package in PACKAGES.items():
        if relative.startswith(folder + "/"):
            parts = relative[len(folder) + 1 : -len(".py")].split("/")
            is_init = parts[-1] == "__init__"
            if is_init:
                parts = parts[:-1]
            return ".".join([package, *parts]), is_init
    raise ValueError(relative)


def modules(root: Path) -> dict[str, Module]:
    found = {}
    for folder in PACKAGES:
        for path in sorted((root / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            name, is_init = module_name(root, path)
            found[name] = Module(name, path, is_init)
    return found


def imported(root: Path, path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of everything ``path`` imports, relative imports resolved;
    for ``from X import a`` both ``X`` and ``X.a``."""
    name, is_init = module_name(root, path)
    package = name if is_init else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def module_graph(root: Path) -> dict[str, dict[str, int]]:
    """Module -> {project module it imports: the first line that does}."""
    known = modules(root)
    graph: dict[str, dict[str, int]] = {}
    for name, module in known.items():
        package = name if module.is_package else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(module.path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    anchor = parts[: len(parts) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # ``from X import a``: the submodule X.a when there is one, else X.
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                    for alias in node.names
                ]
            for named in targets:
                target = named
                while target and target not in known:  # a name inside a module: the module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def folder_of(name: str, known: Mapping[str, Module]) -> str:
    """A module's floor at folder level: its package, except that the modules lying
    directly in ``src/turnaudit`` (the namespace, which holds the domain modules beside
    the CLI) are each a floor of their own."""
    module = known[name]
    package = name if module.is_package else name.rpartition(".")[0]
    return name if package == ROOT_PACKAGE else package


def folder_graph(root: Path) -> dict[str, dict[str, str]]:
    """Folder -> {folder it imports: one module-level import that makes the edge}."""
    known = modules(root)
    graph: dict[str, dict[str, str]] = {}
    for source, edges in module_graph(root).items():
        here = folder_of(source, known)
        graph.setdefault(here, {})
        for target, line in edges.items():
            there = folder_of(target, known)
            if there != here:
                graph[here].setdefault(there, f"{source}:{line} imports {target}")
    return graph


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Every group of two or more nodes that reach each other (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups)


def a_circle(graph: Mapping[str, Iterable[str]], group: list[str]) -> list[str]:
    """One shortest circle through the group's first node: ``[a, b, …, a]``."""
    members = set(group)
    start = group[0]
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph.get(node, ())):
            if child not in members:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise ValueError(f"{group} is not a circle")


def circles(graph: Mapping[str, Mapping[str, object]]) -> list[str]:
    """Each circle of ``graph`` as one line: ``a -> b -> a (a -> b: why; …)``, where
    ``why`` is the importing line (``a:LINE``) or the import a folder edge stands for."""
    lines = []
    for group in strongly_connected(graph):
        circle = a_circle(graph, group)
        why = "; ".join(
            f"{a} -> {b}: " + (f"{a}:{how}" if isinstance(how, int) else str(how))
            for a, b in itertools.pairwise(circle)
            for how in (graph[a][b],)
        )
        lines.append(" -> ".join(circle) + f" ({why})")
    return lines


def assert_one_circle_named(graph: Mapping[str, Mapping[str, object]], members: set[str]) -> None:
    """The graph holds exactly one circle, through ``members``, and the check's one line
    names it step by step (each step with the import or use behind it)."""
    groups = strongly_connected(graph)
    assert len(groups) == 1
    assert members <= set(groups[0])
    [line] = circles(graph)
    circle = a_circle(graph, groups[0])
    assert circle[0] == circle[-1]
    assert line.startswith(" -> ".join(circle))
    assert all(f"{a} -> {b}: " in line for a, b in itertools.pairwise(circle))
