"""No circles among the native crate's modules (native/src), neither module by module nor
folder by folder (docs/architecture.md, "The crate's floors").

The graph is computed from the Rust source (``tests/support/rust_imports.py``: ``use``
trees, paths in code and macro arguments, ``super::`` and ``self::`` resolved, names a
``use`` brought in); a failure names each circle and the line behind each of its steps.
``mod child;`` is no edge (a declaration places the child, it does not use it). The
check is proved on circles planted in a copy of the crate.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import PROJECT_ROOT
from tests.support.imports import assert_one_circle_named, circles
from tests.support.rust_imports import (
    CRATE_SOURCE,
    rust_folder_graph,
    rust_module_graph,
    rust_modules,
    tokens,
)


def test_no_crate_module_uses_itself_round_a_circle() -> None:
    found = circles(rust_module_graph(PROJECT_ROOT))
    assert found == [], "crate module circles:\n" + "\n".join(found)


def test_no_crate_folder_uses_itself_round_a_circle() -> None:
    found = circles(rust_folder_graph(PROJECT_ROOT))
    assert found == [], "crate folder circles:\n" + "\n".join(found)


def test_the_graph_sees_the_crate() -> None:
    """A reader that found nothing would pass the checks above: it finds the crate's
    files and these edges, each of a different kind."""
    known = rust_modules(PROJECT_ROOT)
    files = {
        p.relative_to(PROJECT_ROOT / CRATE_SOURCE)
        for p in (PROJECT_ROOT / CRATE_SOURCE).rglob("*.rs")
    }
    assert {m.path.relative_to(PROJECT_ROOT / CRATE_SOURCE) for m in known.values()} == files
    assert "crate::constants::tests" in known  # an inline `mod tests { … }`
    graph = rust_module_graph(PROJECT_ROOT)
    # `use crate::decode::{compile_schema, …}`
    assert "crate::decode" in graph["crate::encode"]
    # `use crate::ffi::{self, Held, Obj}`: `self` in a use tree
    assert "crate::ffi" in graph["crate::encode"]
    # `pub(crate) use body::{Body, Fail}`: a child named without `self::`
    assert "crate::decode::body" in graph["crate::decode"]
    # `use super::stream::{Stream, StreamKey}`
    assert "crate::track::stream" in graph["crate::track::state"]
    # `.map_err(crate::spill::os_error)`: a path in an expression, no `use`
    assert "crate::spill" in graph["crate::track::stream_spill"]
    # `wrap_pyfunction!(track::follow::start_partition, m)`: a path in a macro's arguments
    assert "crate::track::follow" in graph["crate"]
    # `use contracts::*` and `use super::*` (in an inline module)
    assert "crate::verify::contracts" in graph["crate::verify"]
    assert "crate::constants" in graph["crate::constants::tests"]
    # `mod methods;` declares, it does not use: no edge
    assert "crate::track::methods" not in graph["crate::track"]
    folders = rust_folder_graph(PROJECT_ROOT)
    assert "crate::spill" in folders["crate::track"]
    assert "crate::decode" in folders["crate::verify"]


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(PROJECT_ROOT / CRATE_SOURCE, tmp_path / CRATE_SOURCE)
    return tmp_path


def _plant(root: Path, relative: str, text: str) -> None:
    with (root / CRATE_SOURCE / relative).open("a", encoding="utf-8") as source:
        source.write(text)


@pytest.mark.parametrize(
    ("relative", "text", "members"),
    [
        # A `use` up into the floor above: the id runs reading the tracker.
        ("spill/runs.rs", "use crate::track::Prev;\n", {"crate::spill::runs", "crate::track"}),
        # A path in an expression, no `use`: the Bloom filter asking the chain rule.
        (
            "bloom.rs",
            "fn late() { let _ = crate::track::chain_digest; }\n",
            {"crate::bloom", "crate::track", "crate::track::state"},
        ),
        # `super::` in code: the state encoding reaching the tracker's class.
        (
            "track/codec.rs",
            "fn late() { let _ = super::tracker::busy; }\n",
            {"crate::track::codec", "crate::track::tracker", "crate::track::stream"},
        ),
        # `super::super` out of an inline module its parent uses, then a floor by its name.
        (
            "constants.rs",
            "use late::*;\n"
            "mod late {\n    fn f() { let _ = super::super::verify::VerifyStep::new; }\n}\n",
            {"crate::constants", "crate::constants::late", "crate::verify"},
        ),
        # A name a `use` brought in (`ffi` is `crate::ffi` in encode.rs), used in ffi.rs.
        (
            "ffi.rs",
            "use crate::encode as writer;\nfn late() { let _ = writer::long; }\n",
            {"crate::ffi", "crate::encode"},
        ),
    ],
)
def test_the_check_names_a_module_circle_planted_in_a_copy(
    tmp_path: Path, relative: str, text: str, members: set[str]
) -> None:
    root = _copy(tmp_path)
    assert circles(rust_module_graph(root)) == []
    _plant(root, relative, text)
    assert_one_circle_named(rust_module_graph(root), members)


def test_a_declared_child_is_no_edge_and_a_used_one_is(tmp_path: Path) -> None:
    """A parent declaring a child and the child using its parent is the crate's shape
    everywhere (lib.rs declares every floor): no circle, until the parent uses the child."""
    root = _copy(tmp_path)
    (root / CRATE_SOURCE / "bloom").mkdir()
    (root / CRATE_SOURCE / "bloom/sizing.rs").write_text("use super::BloomFilter;\n")
    _plant(root, "bloom.rs", "mod sizing;\n")
    graph = rust_module_graph(root)
    assert graph["crate::bloom::sizing"] == {"crate::bloom": 1}
    assert circles(graph) == []
    _plant(root, "bloom.rs", "use sizing::*;\n")
    [line] = circles(rust_module_graph(root))
    assert "crate::bloom -> crate::bloom::sizing -> crate::bloom" in line


def test_the_check_names_a_folder_circle_planted_in_a_copy(tmp_path: Path) -> None:
    """The spill's tests reaching the tracker: no module circle (nothing uses a test
    module), but the spill and track floors would use each other."""
    root = _copy(tmp_path)
    _plant(root, "spill/tests.rs", "fn late() { let _ = crate::track::chain_digest; }\n")
    assert circles(rust_module_graph(root)) == []
    [line] = circles(rust_folder_graph(root))
    assert "crate::spill -> crate::track -> crate::spill" in line or (
        "crate::track -> crate::spill -> crate::track" in line
    )
    assert "crate::spill::tests (native/src/spill/tests.rs:" in line  # the use behind the step


def test_comments_strings_and_chars_name_no_module(tmp_path: Path) -> None:
    """Paths inside comments (nested ones too), strings, raw strings and after a `'"'`
    char are text, not uses; the same path in code is one."""
    root = _copy(tmp_path)
    _plant(
        root,
        "constants.rs",
        "// use crate::verify::VerifyStep;\n"
        "/* crate::verify::A /* nested */ crate::verify::B */\n"
        "const QUOTE: char = '\"';\n"
        'const S: &str = "crate::verify::C";\n'
        'const R: &str = r#"crate::verify::D "quoted" "#;\n'
        "fn life<'a>(x: &'a str) -> &'a str { x }\n",
    )
    assert circles(rust_module_graph(root)) == []
    _plant(root, "constants.rs", "fn late() { let _ = crate::verify::VerifyStep::new; }\n")
    assert len(circles(rust_module_graph(root))) == 1


def test_tokens_keep_lines_and_drop_text() -> None:
    found = tokens('use a::b; // c::d\n/* e */ let s = "f::g";\nh::i')
    assert [t for t, _ in found] == [
        "use",
        "a",
        "::",
        "b",
        ";",
        "let",
        "s",
        "=",
        ";",
        "h",
        "::",
        "i",
    ]
    assert dict(found)["h"] == 3


def test_a_path_attribute_is_refused(tmp_path: Path) -> None:
    """A `#[path]` module would be read from the wrong file: the reader says so."""
    root = _copy(tmp_path)
    _plant(root, "bloom.rs", '#[path = "elsewhere.rs"]\nmod moved;\n')
    with pytest.raises(ValueError, match="#\\[path\\]"):
        rust_modules(root)
