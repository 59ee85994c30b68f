"""``turnaudit eval bundle``: the evidence artifact, and ``--check`` catching any changed byte."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnaudit.evaluation.auditors import RuleBasedAuditor
from turnaudit.evaluation.bundle import BundleInputs, check_bundle, make_bundle
from turnaudit.evaluation.errors import BundleCheckError, BundleError
from turnaudit.evaluation.files import write_json
from turnaudit.evaluation.gate import evaluate
from turnaudit.evaluation.labels import labels_from_ground_truth
from turnaudit.evaluation.trace_evidence import TraceEvidence

from .test_two_tier import demo_traces

Cli = Callable[[Sequence[str]], int]


@pytest.fixture(scope="module")
def demo_artifacts(tmp_path_factory: pytest.TempPathFactory) -> BundleInputs:
    """What the demo's evaluation stage leaves in var/demo, built in-process."""
    out = tmp_path_factory.mktemp("demo")
    traces, truth = demo_traces(2000)
    manifest = out / "htir-manifest.jsonl"
    manifest.write_text("".join(json.dumps(t.manifest_line()) + "\n" for t in traces))
    builder = TraceEvidence(RuleBasedAuditor(), labels_from_ground_truth(truth))
    builder.begin()
    for trace in traces:
        admission = builder.admit(trace)
        if admission.is_case:
            builder.add_case(trace, admission, builder.observe(trace))
    evidence = builder.finish()
    write_json(out / "evidence.json", evidence.to_json())
    write_json(out / "gate-report.json", evaluate(evidence))
    write_json(out / "labels.json", truth)
    return BundleInputs(
        out / "gate-report.json", out / "evidence.json", out / "labels.json", (manifest,)
    )


@pytest.fixture(scope="module")
def bundle(demo_artifacts: BundleInputs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bundle") / "evidence-bundle.tar"
    make_bundle(demo_artifacts, path)
    return path


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive}  # type: ignore[union-attr]  # every member is a regular file


def test_bundle_then_check_pass_on_the_demo_artifacts(
    bundle: Path, demo_artifacts: BundleInputs, eval_cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    members = _members(bundle)
    assert set(members) == {
        "MANIFEST.json",
        "report.json",
        "evidence.json",
        "auditor-id.json",
        "review/labels.json",
        "sources/1-htir-manifest.jsonl",
    }
    manifest = json.loads(members["MANIFEST.json"])
    report = json.loads(members["report.json"])
    assert manifest["decision"] == report["decision"]
    assert manifest["sources"][0]["given_as"] == str(demo_artifacts.sources[0])
    assert json.loads(members["auditor-id.json"])["tiers"][0]["tier"] == "rules"
    assert eval_cli(["eval", "bundle", "--check", str(bundle)]) == 0
    assert "bundle verified" in capsys.readouterr().out
    # Reproducible: the same files make the same bytes.
    again = bundle.with_name("again.tar")
    make_bundle(demo_artifacts, again)
    assert again.read_bytes() == bundle.read_bytes()


def _flip(archive: Path, member: str, position: int, out: Path) -> None:
    """Change one byte of one member, in place in the tar (headers untouched)."""
    data = bytearray(archive.read_bytes())
    with tarfile.open(archive) as tar:
        info = tar.getmember(member)
    offset = info.offset_data + position % info.size
    data[offset] = (data[offset] + 1 + position % 255) % 256 or 1
    out.write_bytes(bytes(data))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_changed_byte_of_any_member_fails_the_check_naming_it(
    bundle: Path,
    tmp_path: Path,
    data: st.DataObject,
    eval_cli: Cli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    members = _members(bundle)
    member = data.draw(st.sampled_from(sorted(members)))
    position = data.draw(st.integers(0, len(members[member]) - 1))
    changed = tmp_path / "changed.tar"
    _flip(bundle, member, position, changed)
    with pytest.raises(BundleCheckError) as failed:
        check_bundle(changed)
    assert failed.value.member == member
    capsys.readouterr()
    assert eval_cli(["eval", "bundle", "--check", str(changed)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f": {member}: " in err


def _repack(bundle: Path, out: Path, edit: Callable[[dict[str, bytes]], None]) -> None:
    members = _members(bundle)
    edit(members)
    with tarfile.open(out, "w") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))


def test_a_missing_or_an_extra_member_is_named(bundle: Path, tmp_path: Path) -> None:
    _repack(bundle, tmp_path / "missing.tar", lambda m: m.pop("review/labels.json"))
    with pytest.raises(BundleCheckError, match="missing") as failed:
        check_bundle(tmp_path / "missing.tar")
    assert failed.value.member == "review/labels.json"
    _repack(bundle, tmp_path / "extra.tar", lambda m: m.update({"notes.txt": b"hi"}))
    with pytest.raises(BundleCheckError, match="not in the manifest") as failed:
        check_bundle(tmp_path / "extra.tar")
    assert failed.value.member == "notes.txt"


def test_a_report_that_is_not_the_evidences_is_refused_when_bundling(
    demo_artifacts: BundleInputs, tmp_path: Path
) -> None:
    report = json.loads(demo_artifacts.report.read_text())
    report["decision"] = "pass" if report["decision"] == "hold" else "hold"
    forged = tmp_path / "report.json"
    forged.write_text(json.dumps(report))
    inputs = BundleInputs(
        forged, demo_artifacts.evidence, demo_artifacts.labels, demo_artifacts.sources
    )
    with pytest.raises(BundleError, match=r"report\.json: decision"):
        make_bundle(inputs, tmp_path / "b.tar")
    assert not (tmp_path / "b.tar").exists()


def test_a_source_without_the_cases_traces_is_refused(
    demo_artifacts: BundleInputs, tmp_path: Path
) -> None:
    empty = tmp_path / "other.jsonl"
    empty.write_text("")
    inputs = BundleInputs(
        demo_artifacts.report, demo_artifacts.evidence, demo_artifacts.labels, (empty,)
    )
    with pytest.raises(BundleError, match="no source manifest holds the trace"):
        make_bundle(inputs, tmp_path / "b.tar")
