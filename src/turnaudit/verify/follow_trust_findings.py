"""What ``verify --follow --keyring`` finds (``follow_trust``): the reasons a stream is
forged (the forgeries counter's label values), the trust gauge's states, and a finding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from turnaudit.identity import StreamId
from turnaudit.verify.trust import STATUSES, Status

# What makes a stream forged (the forgeries counter's label values): a checkpoint's
# problem, or what the turns show against valid checkpoints.
Reason = Literal[
    "bad_signature",
    "unknown_key",
    "key_not_valid",
    "chain_break",
    "rewritten",
    "uncovered",
    "after_final",
    "legacy_in_signed_session",
    "unnamed_schema",
    "unsigned",
]
REASONS: tuple[Reason, ...] = get_args(Reason)
# The gauge's label values: the four statuses, and streams still within the grace.
GaugeState = Status | Literal["pending"]
GAUGE_STATES: tuple[GaugeState, ...] = (*STATUSES, "pending")


@dataclass(frozen=True)
class Forgery:
    """A stream found forged, or an invalid checkpoint (``stream`` None)."""

    reason: Reason
    detail: str
    stream: StreamId | None = None
