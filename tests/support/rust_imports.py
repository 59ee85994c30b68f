"""The native crate's module graph, read from the Rust source (nothing is compiled).

A module is a file of ``native/src`` or an inline ``mod name { … }`` in one; its name is
its path from the crate root (``crate::track::state``). An edge is a path that names
another module of the crate, wherever it stands:

- ``use`` trees (``use crate::a::b::{C, d::E}``, ``use super::*``, ``pub(crate) use``),
  a relative first segment resolved as rustc does: a child module declared in the same
  module, or a name an earlier ``use`` brought in (``use crate::ffi::{self}`` and then
  ``ffi::x``), or a name a glob brought in;
- paths in expressions, types and macro arguments (``crate::spill::os_error``,
  ``super::NEW``, ``track::follow::start_partition`` in ``lib.rs``);
- ``super::`` and ``self::`` resolved against the module the path stands in (an inline
  module's ``super`` is the file's module).

A path leads to the longest module prefix it names: ``crate::track::BloomFilter`` is an
edge to ``crate::track`` (the module that re-exports it), as ``from package import name``
is an edge to the package in the Python graph. ``mod child;`` is no edge: declaring a
child only places it in the tree, as a folder holds its files; a parent that *uses* a
child (``pub(crate) use bloom::BloomFilter``) has an edge to it. Test modules
(``#[cfg(test)] mod tests;``) are modules like any other: their paths count.

Folder by folder, a module's floor is its top-level module (``crate::track`` for every
module under ``native/src/track/``); the files lying directly in ``native/src`` are each
a floor of their own, and ``lib.rs`` is ``crate``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

CRATE_SOURCE = "native/src"
ROOT = "crate"
TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<line_comment>//[^\n]*)
  | (?P<block_comment>/\*)
  | (?P<raw_string>b?r(?P<hashes>\#*)")
  | (?P<string>b?"(?:\\.|[^"\\])*")
  | (?P<char>b?'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^'\\])')
  | (?P<lifetime>'[A-Za-z_][A-Za-z0-9_]*)
  | (?P<ident>(?:r\#)?[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>[0-9][0-9A-Za-z_]*)
  | (?P<path_sep>::)
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)


def tokens(text: str) -> list[tuple[str, int]]:
    """(token, line) of a Rust file: comments, strings, chars and lifetimes left out."""
    found: list[tuple[str, int]] = []
    at, line = 0, 1
    while at < len(text):
        match = TOKEN.match(text, at)
        assert match is not None  # the last alternative takes any character
        kind, end = match.lastgroup, match.end()
        if kind == "block_comment":  # nested, as Rust's are
            depth = 1
            while depth and end < len(text):
                if text.startswith("/*", end):
                    depth, end = depth + 1, end + 2
                elif text.startswith("*/", end):
                    depth, end = depth - 1, end + 2
                else:
                    end += 1
        elif kind == "raw_string":
            closing = '"' + (match["hashes"] or "")
            end = text.find(closing, end)
            end = len(text) if end < 0 else end + len(closing)
        elif kind in ("ident", "path_sep", "punct"):
            found.append((match.group().removeprefix("r#"), line))
        line += text.count("\n", at, end)
        at = end
    return found


@dataclass
class RustModule:
    name: str  # crate::a::b
    path: Path  # the file it is in (an inline module's is its file's)
    children: set[str] = field(default_factory=set)  # declared child modules' own names
    aliases: dict[str, list[str]] = field(default_factory=dict)  # `use` name -> its path
    globs: list[list[str]] = field(default_factory=list)  # `use path::*` paths
    paths: list[tuple[list[str], int]] = field(default_factory=list)  # every path, line


def _parent(name: str) -> str:
    return name.rpartition("::")[0] or ROOT


def _use_tree(toks: list[tuple[str, int]], at: int, prefix: list[str], module: RustModule) -> int:
    """Reads one use tree from ``toks[at]``; records its paths and the names it brings
    in. Returns the index just past the tree."""
    path = list(prefix)
    line = toks[at][1] if at < len(toks) else 0
    while at < len(toks):
        word = toks[at][0]
        if word == "::":
            at += 1
        elif word == "{":
            at += 1
            while toks[at][0] != "}":
                at = _use_tree(toks, at, path, module)
                if toks[at][0] == ",":
                    at += 1
            return at + 1
        elif word == "*":
            module.globs.append(path)
            module.paths.append((path, line))
            return at + 1
        elif word.isidentifier():
            path.append(word)
            at += 1
        else:
            break
    if not path:
        return at
    name = path[-1]
    if path[-1] == "self":  # `use a::b::{self}` brings in b
        path = path[:-1]
        name = path[-1]
    if at < len(toks) and toks[at][0] == "as":
        name = toks[at + 1][0]
        at += 2
    if name != "_":
        module.aliases[name] = path
    module.paths.append((path, line))
    return at


def _declare(
    toks: list[tuple[str, int]],
    at: int,
    *,
    scopes: list[tuple[str, int, Path]],
    depth: int,
    path: Path,
    found: dict[str, RustModule],
) -> None:
    """``mod name;`` (its file read) or ``mod name {`` (a scope opened) at ``toks[at]``."""
    here, _, folder = scopes[-1]
    child, after, line = toks[at + 1][0], toks[at + 2][0], toks[at][1]
    found[here].children.add(child)
    child_name = f"{here}::{child}"
    if after == ";":
        existing = [c for c in (folder / f"{child}.rs", folder / child / "mod.rs") if c.exists()]
        if len(existing) != 1:
            raise ValueError(f"{path}:{line}: mod {child}: found {existing}")
        _read_file(existing[0], child_name, found)
    elif after == "{":
        found[child_name] = RustModule(child_name, path)
        scopes.append((child_name, depth, folder / child))


def _path_at(toks: list[tuple[str, int]], at: int) -> tuple[list[str], int]:
    """The path starting at ``toks[at]`` (up to a turbofish) and the index past it."""
    segments = [toks[at][0]]
    at += 1
    while at + 1 < len(toks) and toks[at][0] == "::" and toks[at + 1][0].isidentifier():
        segments.append(toks[at + 1][0])
        at += 2
    return segments, at


def _read_file(path: Path, name: str, found: dict[str, RustModule]) -> None:
    text = path.read_text(encoding="utf-8")
    if re.search(r"#\s*\[\s*path\s*=", text):
        raise ValueError(f"{path}: #[path] modules are not read by this graph")
    toks = tokens(text)
    is_dir_module = path.name in ("mod.rs", "lib.rs")
    # (module, the brace depth it closes at, the folder its `mod x;` children are in)
    scopes = [(name, -1, path.parent if is_dir_module else path.parent / path.stem)]
    found[name] = RustModule(name, path)
    depth = 0
    at = 0
    while at < len(toks):
        word = toks[at][0]
        if word == "{":
            depth += 1
        elif word == "}":
            depth -= 1
            if depth == scopes[-1][1]:
                scopes.pop()
        elif word == "mod" and at + 2 < len(toks) and toks[at + 1][0].isidentifier():
            _declare(toks, at, scopes=scopes, depth=depth, path=path, found=found)
            at += 2  # the `{` of an inline module is counted next
            continue
        elif word == "use":
            at = _use_tree(toks, at + 1, [], found[scopes[-1][0]])
            continue
        elif (
            word.isidentifier()
            and at + 1 < len(toks)
            and toks[at + 1][0] == "::"
            and (at == 0 or toks[at - 1][0] != "::")  # not the middle of `<T as X>::a::b`
        ):
            segments, after = _path_at(toks, at)
            found[scopes[-1][0]].paths.append((segments, toks[at][1]))
            at = after
            continue
        at += 1


def rust_modules(root: Path) -> dict[str, RustModule]:
    """Every module of the crate, from ``lib.rs`` down its ``mod`` declarations."""
    found: dict[str, RustModule] = {}
    source = root / CRATE_SOURCE
    _read_file(source / "lib.rs", ROOT, found)
    return found


def _anchor(first: str, here: str) -> list[str] | None:
    """Where a path's keyword first segment (``crate``, ``self``) points, or None."""
    return {ROOT: [ROOT], "self": here.split("::")}.get(first)


def _resolve(
    segments: list[str], here: str, known: dict[str, RustModule], seen: frozenset[str]
) -> list[str] | None:
    """The absolute path (``crate``, …) a path written in module ``here`` names, or None
    for a path outside the crate (std, pyo3, an enum's variant, a local item)."""
    first, rest = segments[0], segments[1:]
    anchor = _anchor(first, here)
    if anchor is not None:
        return [*anchor, *rest]
    if first == "super":
        base = here
        while segments and segments[0] == "super":
            base, segments = _parent(base), segments[1:]
        return [*base.split("::"), *segments]
    module = known[here]
    if first in module.children:
        return [*here.split("::"), *segments]
    step = f"{here} {first}"  # a name resolved through itself: outside the crate
    target: list[str] | None = None
    if step not in seen and first in module.aliases:
        target = _resolve(module.aliases[first], here, known, seen | {step})
    elif step not in seen:
        for glob in module.globs:
            base = _resolve(glob, here, known, seen | {step})
            owner = known.get("::".join(base)) if base else None
            if owner is not None and (first in owner.children or first in owner.aliases):
                target = _resolve([first], owner.name, known, seen | {step})
                break
    return None if target is None else [*target, *rest]


def rust_module_graph(root: Path) -> dict[str, dict[str, int]]:
    """Module -> {crate module it uses: the first line that does}."""
    known = rust_modules(root)
    graph: dict[str, dict[str, int]] = {}
    for name, module in known.items():
        edges: dict[str, int] = {}
        for segments, line in module.paths:
            named = _resolve(segments, name, known, frozenset())
            if named is None:
                continue
            while named and "::".join(named) not in known:  # an item: the module holding it
                named = named[:-1]
            dotted = "::".join(named)
            if dotted and dotted != name:
                edges.setdefault(dotted, line)
        graph[name] = edges
    return graph


def rust_folder_of(name: str) -> str:
    """A module's floor: its top-level module (``crate`` for lib.rs)."""
    return "::".join(name.split("::")[:2])


def rust_folder_graph(root: Path) -> dict[str, dict[str, str]]:
    """Floor -> {floor it uses: one use that makes the edge}."""
    graph: dict[str, dict[str, str]] = {}
    known = rust_modules(root)
    for source, edges in rust_module_graph(root).items():
        here = rust_folder_of(source)
        graph.setdefault(here, {})
        for target, line in edges.items():
            there = rust_folder_of(target)
            if there != here:
                path = known[source].path.relative_to(root).as_posix()
                graph[here].setdefault(there, f"{source} ({path}:{line}) uses {target}")
    return graph
