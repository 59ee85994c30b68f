"""Replay: a bounded range of the turn-events topic, decoded by today's reader, into an output.

A replay is bounded, isolated, deterministic, resumable and scales out:

* **Bounded**: the end offsets (the high-water marks, or the offsets of the
  ``--to`` time) are resolved once, when the replay starts, and recorded in
  the checkpoint; a resumed replay keeps them, so it always covers the same
  events.
* **Isolated**: one consumer is assigned every partition of the range by hand
  with explicit offsets; nothing joins or commits to any consumer group (a
  ``group`` replay, :func:`replay_group`, uses a group of its own, named
  ``<prefix>replay.NAME``).
* **Ordered, deterministic**: each partition by offset; partitions interleave
  in blocks of ``BLOCK_MESSAGES`` messages in ascending partition order
  (partition 0's first block, partition 1's first block, …, then every
  partition's second block; a partition whose range has ended drops out).
  The order depends on the range only, never on which partition the broker
  answered first: partitions running ahead are buffered, and paused while
  their buffer is full. Every JSONL line is canonical JSON (sorted keys, no
  spaces). The same range gives the same bytes.
* **Resumable**: every ``checkpoint_every`` events or ``checkpoint_seconds``
  seconds, the output is made durable (fsync) and the checkpoint (per-partition
  next offset, place in the block order, the output's position) replaces the
  previous one atomically (write, fsync, rename). A re-run with the same
  arguments truncates the output to the recorded position and carries on from
  the recorded offsets. Outputs whose result is computed over the whole range
  (metrics, verify) restart their recorded range instead.
* **Windows by event time**: ``ReplayRequest(event_time=True)`` keeps the
  events whose ``occurred_at`` falls in ``[since, until)``, read from a broker
  range widened by ``slack`` on both sides (default: the whole retained
  stream), since a record's broker timestamp is the time it was stored, not
  the time the turn happened.

The modules: ``request`` (what and where), ``checkpoint``, ``order`` (the
block order, pure), ``reader`` (the block order fed from Kafka), ``run``
(``replay()`` and the prologue and epilogue it shares with ``group``'s
``replay_group()``), ``outputs`` (the output hooks and the registry of kinds),
``jsonl`` and ``canonical`` (the JSONL output, canonical JSON), ``files``.
The outputs that drive the services' sinks are ``turnaudit.consumers.replay``.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnaudit.replay.canonical import canonical_json
from turnaudit.replay.checkpoint import CheckpointJson, ReplayCheckpoint
from turnaudit.replay.files import fsync_path, open_for_resume, write_atomically
from turnaudit.replay.group import group_id, replay_group
from turnaudit.replay.jsonl import JsonlOutput, jsonl_line
from turnaudit.replay.order import BLOCK_MESSAGES, BlockOrder
from turnaudit.replay.outputs import (
    OutputContext,
    OutputFactory,
    OutputKind,
    OutputKinds,
    ReplayOutput,
)
from turnaudit.replay.reader import READER_CONFIG, OrderedReader
from turnaudit.replay.request import (
    CHECKPOINT_SUFFIX,
    ReplayRequest,
    ReplayTarget,
    parse_partitions,
)
from turnaudit.replay.run import BatchHook, ReplaySummary, replay

__all__: Sequence[str] = (
    "BLOCK_MESSAGES",
    "CHECKPOINT_SUFFIX",
    "READER_CONFIG",
    "BatchHook",
    "BlockOrder",
    "CheckpointJson",
    "JsonlOutput",
    "OrderedReader",
    "OutputContext",
    "OutputFactory",
    "OutputKind",
    "OutputKinds",
    "ReplayCheckpoint",
    "ReplayOutput",
    "ReplayRequest",
    "ReplaySummary",
    "ReplayTarget",
    "canonical_json",
    "fsync_path",
    "group_id",
    "jsonl_line",
    "open_for_resume",
    "parse_partitions",
    "replay",
    "replay_group",
    "write_atomically",
)
