"""One demo run: a fresh topic prefix, a fresh signing key and keyring, a spool of its own.

Every run publishes under ``<prefix>demo-<id>.`` (the configured prefix, so a secured
cluster's prefixed ACLs still apply), so its signed checkpoints, stream heads and the
continuous verifier's state start empty: nothing an earlier run (or anyone else on the
cluster) wrote is judged against this run's key. The run is recorded in
``<output>/last-run.json`` first; the next run deletes what it names (its topics, key
files and spool folder) before it starts, so re-running leaves one run's worth behind.
What a record names is checked against the shape a run gives its names before anything
is deleted: a hand-edited record cannot point the demo at other topics or files.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypedDict

import structlog

from turnaudit.checkpoints import Keyring, parse_keyring
from turnaudit.files import private_dir, write_private
from turnaudit.kafka.state_topic import verify_state_topic
from turnaudit.kafka.topic_deletion import delete_topics
from turnaudit.kafka.topics import topic_specs
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import CheckpointSettings, generate_keys, load_signing_key
from turnaudit.topic_names import TopicNames

log = structlog.get_logger("turnaudit.demo")

RUN_FILE = "last-run.json"
KEYS_DIR = "keys"
KEYRING_FILE = "keyring.toml"
# The publisher signs a checkpoint every this many turns (and one on close), so a
# 3,000-turn run has a chain of several; the interval is the runtime default.
CHECKPOINT_EVERY_TURNS = 1000
_RUN_ID = re.compile(r"[0-9a-f]{8}")


class RunJson(TypedDict):
    run_id: str
    prefix: str


@dataclass(frozen=True)
class DemoRun:
    run_id: str
    settings: KafkaSettings  # under the run's own prefix
    key_id: str
    key_path: Path
    public_path: Path
    keyring_path: Path
    keyring: Keyring  # require_signed: every stream must be signed
    checkpoints: CheckpointSettings
    spool_dir: Path

    @property
    def prefix(self) -> str:
        return self.settings.topics.prefix


def run_prefix(base: str, run_id: str) -> str:
    return f"{base}demo-{run_id}."


def run_topics(settings: KafkaSettings) -> list[str]:
    """Every topic a run creates under its prefix."""
    return [spec.name for spec in topic_specs(settings)] + [verify_state_topic(settings)]


def start_run(
    settings: KafkaSettings, output_dir: Path, spool_root: Path, run_id: str | None = None
) -> DemoRun:
    """Remove the previous run's leftovers, then make this run's prefix, key and keyring."""
    run_id = run_id or uuid.uuid4().hex[:8]
    private_dir(output_dir)
    remove_previous_run(settings, output_dir, spool_root)
    run_settings = replace(settings, topics=TopicNames(run_prefix(settings.topics.prefix, run_id)))
    record: RunJson = {"run_id": run_id, "prefix": run_settings.topics.prefix}
    write_private(output_dir / RUN_FILE, json.dumps(record).encode())
    key_id = f"demo-{run_id}"
    made = generate_keys(output_dir / KEYS_DIR, key_id)
    keyring_path = output_dir / KEYRING_FILE
    text = "require_signed = true\n\n" + made.keyring_entry
    write_private(keyring_path, text.encode("utf-8"))
    checkpoints = CheckpointSettings(
        load_signing_key(made.private_path, key_id, setting="the demo's key"),
        max_turns=CHECKPOINT_EVERY_TURNS,
    )
    return DemoRun(
        run_id,
        run_settings,
        key_id,
        made.private_path,
        made.public_path,
        keyring_path,
        parse_keyring(text, source=str(keyring_path)),
        checkpoints,
        private_dir(spool_root / run_id),
    )


def remove_previous_run(settings: KafkaSettings, output_dir: Path, spool_root: Path) -> None:
    """Delete the topics, key files and spool folder of the run ``last-run.json`` names,
    when its names have a run's shape; a failure is logged, never fatal."""
    previous = read_previous(output_dir, settings.topics.prefix)
    if previous is None:
        return
    run_id = previous["run_id"]
    old = replace(settings, topics=TopicNames(previous["prefix"]))
    left = delete_topics(old, run_topics(old))
    if left:
        log.warning("demo_previous_topics_left", prefix=previous["prefix"], topics=left)
    else:
        log.info("demo_previous_run_removed", prefix=previous["prefix"])
    for suffix in (".key", ".pub"):
        (output_dir / KEYS_DIR / f"demo-{run_id}{suffix}").unlink(missing_ok=True)
    shutil.rmtree(spool_root / run_id, ignore_errors=True)
    (output_dir / RUN_FILE).unlink(missing_ok=True)


def read_previous(output_dir: Path, base_prefix: str) -> RunJson | None:
    """The previous run's record, when it names a run of this prefix (else None)."""
    try:
        data = json.loads((output_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    run_id, prefix = data.get("run_id"), data.get("prefix")
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        log.warning("demo_run_record_ignored", reason="not a run id", run_id=str(run_id))
        return None
    if prefix != run_prefix(base_prefix, run_id):
        log.warning("demo_run_record_ignored", reason="another prefix", prefix=str(prefix))
        return None
    return {"run_id": run_id, "prefix": prefix}
