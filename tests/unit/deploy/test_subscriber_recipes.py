"""docs/subscribers.md: its facts are the software's, and its Python recipe reads a real broker."""

from __future__ import annotations

import re

import avro.schema

from tests.support import PROJECT_ROOT
from turnaudit.commands.schemas import java_long
from turnaudit.dead_letters import DeadLetterReason, dead_letter_headers
from turnaudit.kafka.topics import topic_specs
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

GUIDE = (PROJECT_ROOT / "docs" / "subscribers.md").read_text()


def test_the_guide_names_every_topic_and_its_key() -> None:
    prefix = "turn-audit."
    for spec in topic_specs(KafkaSettings(topics=TopicNames(prefix))):
        assert f"`<prefix>{spec.name.removeprefix(prefix)}`" in GUIDE, spec.name
    assert "compact, 1 partition" in GUIDE


def test_the_guide_names_every_dead_letter_header_and_reason() -> None:
    headers = dead_letter_headers(
        reason="r", error="e", topic="t", partition=0, offset=0, stage="s"
    )
    for name, _ in headers:
        assert f"`{name}`" in GUIDE or name in GUIDE, name
    for reason in DeadLetterReason:
        assert reason.value.removeprefix("contract:") in GUIDE, reason


def test_the_worked_fingerprint_example_is_the_real_one() -> None:
    v2 = shipped_catalog("turn_event").version(2)
    spaced = " ".join(f"{b:02x}" for b in v2.fingerprint)
    assert f"c3 01 {spaced}" in GUIDE
    assert f"`{v2.fingerprint_hex}`" in GUIDE
    assert f"`{java_long(v2.fingerprint)}`" in GUIDE
    assert f"`{v2.fingerprint[::-1].hex()}`" in GUIDE


def test_recomputing_with_apache_python_avro_gives_other_fingerprints_as_the_guide_says() -> None:
    """Why the fingerprints are published: this library disagrees on logical types."""
    for schema in shipped_catalog("turn_event").versions:
        theirs = bytes(avro.schema.parse(schema.schema_json).fingerprint("CRC-64-AVRO"))
        assert theirs not in (schema.fingerprint, schema.fingerprint[::-1])
    trace = shipped_catalog("htir_trace").latest  # no logical types: they agree
    assert bytes(avro.schema.parse(trace.schema_json).fingerprint("CRC-64-AVRO")) == (
        trace.fingerprint
    )
    assert "Apache's Python `avro` 1.12" in GUIDE


def test_the_kcat_recipe_runs_only_the_programs_the_guide_says_it_needs() -> None:
    """kcat, python3, java (and coreutils' tail): no jq, no xxd to install for one message."""
    section = GUIDE.split("## Recipe: kcat and avro-tools", 1)[1].split("\n## ", 1)[0]
    (script,) = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    # Quoted text (the Python snippets, kcat's formats) and comments out, continuations joined,
    # command substitutions opened: each piece between | ; ( ) and line ends is one command.
    plain = re.sub(r"'[^']*'|#[^\n]*", "", script).replace("\\\n", " ").replace("$(", "(")
    programs = {
        words[0]
        for command in re.split(r"[|;()\n]", plain)
        if (words := [w for w in command.split() if not re.match(r"\w+=", w)])
    }
    assert programs == {"kcat", "python3", "tail", "java"}
    for needed in ("kcat", "`python3`", "Java runtime"):
        assert needed in section, needed
