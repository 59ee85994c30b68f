"""Replay outputs beyond JSONL, one module each: the services' sinks (runtime validation
and ``Sink``, unchanged), ``turnaudit verify``'s report, another topic, HTIR traces; and
the evidence rebuilt from the turn stream.

* ``sink``: ``SinkReplayOutput``, any runtime ``Sink`` behind ``TurnEventValidation``;
* ``logs``: ``logs:PATH``; ``metrics``: ``metrics:PATH``; ``verify``: ``verify:PATH``;
* ``topic``: ``topic:NAME`` (and ``writable_topic``, the refusal of live topics);
* ``htir``: ``htir:PATH`` and ``htir-topic:NAME``;
* ``evidence``: ``rebuild_evidence`` (``turnaudit eval rebuild``).

Only the app wires stages: ``turnaudit replay`` registers these as output
kinds and hands them to :func:`turnaudit.replay.replay`.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnaudit.consumers.replay.evidence import RebuildResult, file_digest, rebuild_evidence
from turnaudit.consumers.replay.history import SteppedMetricsReplayOutput, TsdbReplayOutput
from turnaudit.consumers.replay.htir import (
    HtirFileReplayOutput,
    HtirTopicReplayOutput,
    TraceReplaySink,
    register_htir_outputs,
    trace_line,
)
from turnaudit.consumers.replay.logs import LogReplayOutput
from turnaudit.consumers.replay.metrics import REPLAY_JOB, MetricsReplayOutput
from turnaudit.consumers.replay.sink import SinkReplayOutput
from turnaudit.consumers.replay.topic import SOURCE_HEADER, TopicReplayOutput, writable_topic
from turnaudit.consumers.replay.verify import VerifyReplayOutput

__all__: Sequence[str] = (
    "REPLAY_JOB",
    "SOURCE_HEADER",
    "HtirFileReplayOutput",
    "HtirTopicReplayOutput",
    "LogReplayOutput",
    "MetricsReplayOutput",
    "RebuildResult",
    "SinkReplayOutput",
    "SteppedMetricsReplayOutput",
    "TopicReplayOutput",
    "TraceReplaySink",
    "TsdbReplayOutput",
    "VerifyReplayOutput",
    "file_digest",
    "rebuild_evidence",
    "register_htir_outputs",
    "trace_line",
    "writable_topic",
)
