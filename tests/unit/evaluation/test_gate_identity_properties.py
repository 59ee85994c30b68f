"""Property tests: evidence whose auditor identity is removed or mutated always makes the
gate decide hold and name the seed's "pinned identities" requirement; never a refusal."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnaudit.evaluation.files import parse_evidence
from turnaudit.evaluation.gate import evaluate, exit_code, run_gate

from .builders import DIGEST, battery, evidence

PINNED = re.compile(r"sha256:[0-9a-f]{64}")
BASE = evidence(battery())  # passes the gate as it is

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=80)
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _unpinned_digest() -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=90),
        st.text("0123456789abcdefABCDEF", max_size=70).map(lambda h: "sha256:" + h),
        st.sampled_from(
            [
                "",
                "sha256:",
                DIGEST.upper(),
                DIGEST[7:],
                DIGEST + "0",
                "md5:" + "ab" * 32,
                " " + DIGEST,
            ]
        ),
    ).filter(lambda d: not PINNED.fullmatch(d))


@st.composite
def broken_identities(draw: st.DrawFn) -> tuple[str, Any]:
    """(what was done, the new auditor_id or a marker to remove it)."""
    kind = draw(
        st.sampled_from(
            [
                "removed",
                "replaced",
                "no digest",
                "digest mutated",
                "digest not a string",
                "name not a string",
                "name blank",
            ]
        )
    )
    identity: dict[str, Any] = {"name": "test-auditor", "digest": DIGEST}
    if kind == "removed":
        return kind, None
    if kind == "replaced":
        return kind, draw(
            json_values.filter(
                lambda v: not isinstance(v, dict) or not PINNED.fullmatch(str(v.get("digest")))
            )
        )
    if kind == "no digest":
        del identity["digest"]
        identity.update(
            draw(
                st.dictionaries(st.sampled_from(["name", "sha", "model"]), json_scalars, max_size=2)
            )
        )
    elif kind == "digest mutated":
        identity["digest"] = draw(_unpinned_digest())
    elif kind == "digest not a string":
        identity["digest"] = draw(json_values.filter(lambda v: not isinstance(v, str)))
    elif kind == "name not a string":
        identity["name"] = draw(json_values.filter(lambda v: not isinstance(v, str)))
    else:
        identity["name"] = draw(st.text(" \t\n", max_size=5))
    return kind, identity


def _with_identity(kind: str, identity: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    if kind == "removed":
        del raw["auditor_id"]
    else:
        raw["auditor_id"] = identity
    return raw


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_identities())
def test_an_unpinned_identity_always_holds_and_names_pinned_identities(
    broken: tuple[str, Any],
) -> None:
    raw = _with_identity(*broken)

    report = evaluate(parse_evidence(raw))

    assert report["decision"] == "hold"
    assert exit_code(report) == 1
    (failure,) = [
        f for f in report["failed_requirements"] if f["requirement"] == "integrity.pinned_identity"
    ]
    assert failure["integrity_requirement"] == "pinned identities"
    assert "pinned identities" in failure["detail"]
    # Nothing else about this otherwise perfect battery fails.
    assert len(report["failed_requirements"]) == 1
    json.dumps(report)  # the report stays JSON


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(min_size=1, max_size=40).filter(lambda n: n.strip()))
def test_any_named_auditor_with_a_pinned_digest_passes(name: str) -> None:
    raw = copy.deepcopy(BASE)
    raw["auditor_id"] = {"name": name, "digest": DIGEST}

    assert evaluate(parse_evidence(raw))["decision"] == "pass"


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(broken_identities())
def test_the_gate_file_form_writes_a_hold_report(tmp_path: Path, broken: tuple[str, Any]) -> None:
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(_with_identity(*broken)), encoding="utf-8")

    report = run_gate(path, tmp_path / "report.json")

    assert report["decision"] == "hold"
    assert json.loads((tmp_path / "report.json").read_text())["decision"] == "hold"
