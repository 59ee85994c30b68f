"""Labels independent of the auditor under test, checked against its pinned identity.

The oracle label must not come from the auditor being evaluated. Once the
battery has pinned the auditor (both tiers for the two-tier auditor), the
evidence producer refuses, naming every offending case:

* a case whose ``oracle_source`` names the auditor under test: its name or any
  tier's name (a model's tag counts, with or without its ``ollama/`` prefix), or
  its digest or any tier's digest (in full or as a prefix of 12 or more hex
  digits);
* a case that carries auditor verdicts: an auditor-output key anywhere in it
  (``observations``, ``prefix_end``, ``first_alarm_step``, ``auditor_id``,
  ``auditor_verdict(s)``, or a ``verdict`` of ``alarm``/``ok``), or the auditor's
  digest anywhere in its trace (steps or source metadata).

A label pack's top-level ``auditor_id`` and its cases' ``observations`` are
already refused when the pack is read (``files.parse_labels``), for any auditor.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence

from turnaudit.evaluation.errors import DependentLabelsError
from turnaudit.evaluation.files import AuditorIdentity

# Keys that only auditor output has; a label pack holding any of them was built with
# an auditor's answers in hand.
AUDITOR_OUTPUT_KEYS = frozenset(
    {
        "observations",
        "prefix_end",
        "first_alarm_step",
        "auditor_id",
        "auditor_verdict",
        "auditor_verdicts",
    }
)
AUDITOR_VERDICTS = frozenset({"alarm", "ok"})
# A shorter hex run would match digests by chance; 12 is the usual short-digest length.
MIN_DIGEST_PREFIX = 12
# A shorter name (e.g. a bare "2b") would match unrelated sources.
MIN_NAME_MARKER = 4
_HEX_RUN = re.compile(rf"[0-9a-f]{{{MIN_DIGEST_PREFIX},64}}")
# Error messages name at most this many cases, then say how many more.
CASE_LIMIT = 20

JsonValue = object


def _digests(identity: AuditorIdentity) -> list[tuple[str, str]]:
    """(what, 64-hex digest) for the auditor and each of its tiers."""
    found = [("the auditor", identity.digest)] + [
        (f"its {tier.tier} tier {tier.name}", tier.digest) for tier in identity.tiers
    ]
    return [(what, digest.lower().removeprefix("sha256:")) for what, digest in found]


def _names(identity: AuditorIdentity) -> list[tuple[str, str]]:
    """(what, lowercase marker) for the auditor's name and each tier's name and tag."""
    found: list[tuple[str, str]] = [("the auditor", identity.name.lower())]
    for tier in identity.tiers:
        what = f"its {tier.tier} tier"
        name = tier.name.lower()
        found.append((what, name))
        tag = name.rsplit("/", 1)[-1]
        found.append((what, tag))
        found.append((what, tag.removesuffix(":latest")))
    return [(what, marker) for what, marker in found if len(marker) >= MIN_NAME_MARKER]


def digest_named(text: str, identity: AuditorIdentity) -> str | None:
    """Which of the auditor's digests ``text`` contains (in full or a 12+ hex prefix)."""
    for run in _HEX_RUN.findall(text.lower()):
        for what, digest in _digests(identity):
            if digest.startswith(run[:64]) or run.startswith(digest):
                return f"the digest of {what}"
    return None


def oracle_names_auditor(oracle_source: str, identity: AuditorIdentity) -> str | None:
    """What of the auditor under test ``oracle_source`` names, or None."""
    lowered = oracle_source.lower()
    for what, marker in _names(identity):
        if marker in lowered:
            return f"the name of {what} ({marker})"
    return digest_named(oracle_source, identity)


def _walk(value: JsonValue, path: str) -> Iterator[tuple[str, str | None, JsonValue]]:
    """(path, key, value) for every value inside ``value``, the key None in arrays."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            yield where, str(key), item
            yield from _walk(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            where = f"{path}[{i}]"
            yield where, None, item
            yield from _walk(item, where)


def carried_verdicts(case: Mapping[str, JsonValue], identity: AuditorIdentity) -> str | None:
    """Where the case carries auditor output or the auditor's identity, or None."""
    for path, key, value in _walk(case, ""):
        if key in AUDITOR_OUTPUT_KEYS:
            return f"carries auditor output at {path}"
        if key == "verdict" and value in AUDITOR_VERDICTS:
            return f"carries an auditor verdict at {path} ({value!r})"
        if path.startswith("trace") and isinstance(value, str):
            named = digest_named(value, identity)
            if named is not None:
                return f"carries {named} at {path}"
    return None


def dependence_problems(
    cases: Sequence[Mapping[str, JsonValue]], identity: AuditorIdentity
) -> dict[str, str]:
    """Task id (or position) -> why that label is not independent of ``identity``."""
    problems: dict[str, str] = {}
    for i, case in enumerate(cases):
        task_id = case.get("task_id")
        key = task_id if isinstance(task_id, str) else f"cases[{i}]"
        oracle = case.get("oracle_source")
        named = oracle_names_auditor(oracle, identity) if isinstance(oracle, str) else None
        if named is not None:
            problems[key] = f"oracle_source {oracle!r} names the auditor under test: {named}"
            continue
        carried = carried_verdicts(case, identity)
        if carried is not None:
            problems[key] = carried
    return problems


def refuse_dependent_labels(
    cases: Sequence[Mapping[str, JsonValue]], identity: AuditorIdentity
) -> None:
    """Raise ``DependentLabelsError`` naming every case whose label is not independent."""
    problems = dependence_problems(cases, identity)
    if not problems:
        return
    listed = [f"case {task_id!r}: {why}" for task_id, why in problems.items()]
    more = len(listed) - CASE_LIMIT
    raise DependentLabelsError(
        f"{len(problems)} label(s) not independent of the auditor under test {identity.name} "
        f"({identity.digest}); labels must never come from it: "
        + "; ".join(listed[:CASE_LIMIT])
        + (f"; and {more} more" if more > 0 else ""),
        sorted(problems),
    )
