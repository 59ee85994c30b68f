"""The follower's metric families, ``turnaudit_verify_*``: every label value from a closed set."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from turnaudit.contracts import Contract
from turnaudit.verify.follow_records import CHAIN_KINDS
from turnaudit.verify.follow_trust_findings import REASONS

MISSING_STATES = ("within_grace", "overdue")
STREAM_STATES = ("open", "began_before_retention")
# gap: the proof's grace ran out; crash and vanished: announced heads (verify_follow_heads).
LOSS_CAUSES = ("gap", "crash", "vanished")


class FollowMetrics:
    """``turnaudit_verify_*``: what the follower proved since it started."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.proved = Counter(
            "turnaudit_verify_turns_proved",
            "Turns proved present, in order or late, since start",
            registry=registry,
        )
        self.late = Counter(
            "turnaudit_verify_late_turns",
            "Turns that closed a gap (stored after later positions of their stream)",
            registry=registry,
        )
        self.duplicates = Counter(
            "turnaudit_verify_duplicates",
            "Copies of a stored turn (same bytes at a taken position)",
            registry=registry,
        )
        self.chain_breaks = Counter(
            "turnaudit_verify_chain_breaks",
            "Chain breaks (chain) and another event at a taken position (position_reused)",
            ["kind"],
            registry=registry,
        )
        self.lost = Counter(
            "turnaudit_verify_lost_turns",
            "Turns lost, by cause: gap (positions still missing after the grace for late "
            "arrivals), crash (an announced cut or ended head past the stream's last position), "
            "vanished (a vanished producer's last open head past it)",
            ["cause"],
            registry=registry,
        )
        self.lost_by_pack = Counter(
            "turnaudit_verify_lost_turns_by_pack",
            "The crash and vanished losses of turnaudit_verify_lost_turns_total, by the pack "
            "and runtime name the stream's head announced (bounded: the rest are 'other')",
            ["cause", "pack", "runtime"],
            registry=registry,
        )
        self.cut_streams = Counter(
            "turnaudit_verify_cut_streams",
            "Streams a crashed publisher's successor announced cut, judged (each once)",
            registry=registry,
        )
        self.vanishings = Counter(
            "turnaudit_verify_vanishings",
            "Producers judged vanished (silent past the bound, no closing note) with open "
            "streams, each once per last liveness record",
            registry=registry,
        )
        self.vanished_producers = Gauge(
            "turnaudit_verify_vanished_producers",
            "Producers vanished now with open streams (every member reads them all)",
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.streams_at_risk = Gauge(
            "turnaudit_verify_streams_at_risk",
            "Open streams of vanished producers on this member's partitions",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.ends_waiting = Gauge(
            "turnaudit_verify_stream_ends_waiting",
            "Announced stream ends waiting for the follower to prove their partition up to "
            "where the turn topic stood when they were read",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.breaches = Counter(
            "turnaudit_verify_breaches",
            "Contract breaches of proved turns, by contract",
            ["contract"],
            registry=registry,
        )
        self.undecodable = Counter(
            "turnaudit_verify_undecodable", "Messages that are not TurnEvents", registry=registry
        )
        self.reread = Counter(
            "turnaudit_verify_reread_messages",
            "Messages read again below a partition's checkpoint (skipped)",
            registry=registry,
        )
        self.checkpoints = Counter(
            "turnaudit_verify_checkpoints", "Checkpoints made durable", registry=registry
        )
        self.missing = Gauge(
            "turnaudit_verify_missing_turns",
            "Positions missing now, within the grace or past it",
            ["state"],
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.streams = Gauge(
            "turnaudit_verify_streams",
            "Ordered streams held (open) and those that began before retention",
            ["state"],
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.proved_offset = Gauge(
            "turnaudit_verify_proved_offset",
            "Offset proved to, per partition",
            ["partition"],
            registry=registry,
            multiprocess_mode="livemostrecent",
        )
        self.proved_time = Gauge(
            "turnaudit_verify_proved_event_time_seconds",
            "occurred_at of the last turn proved, per partition",
            ["partition"],
            registry=registry,
            multiprocess_mode="livemostrecent",
        )
        self.trust = Gauge(
            "turnaudit_verify_stream_trust",
            "Streams by trust against the "
            "signed checkpoints (--keyring): signed, unsigned, forged, "
            "truncated, or pending within the grace",
            ["trust"],
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.forgeries = Counter(
            "turnaudit_verify_forgeries",
            "Forgeries found (--keyring): "
            "invalid checkpoints by problem, streams found forged by "
            "reason",
            ["reason"],
            registry=registry,
        )
        self.signed_checkpoints = Counter(
            "turnaudit_verify_signed_checkpoints",
            "Signed checkpoints read (--keyring), valid or invalid",
            ["result"],
            registry=registry,
        )
        self.checkpoints_read_to = Gauge(
            "turnaudit_verify_signed_checkpoints_read_to_seconds",
            "Every signed checkpoint "
            "appended before this time is read (--keyring; 0 until the reader first reaches "
            "the topic's end): streams are judged unsigned only up to it",
            registry=registry,
            multiprocess_mode="livemax",
        )
        for kind in CHAIN_KINDS:
            self.chain_breaks.labels(kind)
        for reason in REASONS:
            self.forgeries.labels(reason)
        for result in ("valid", "invalid"):
            self.signed_checkpoints.labels(result)
        for contract in Contract:
            self.breaches.labels(contract.value)
        for state in MISSING_STATES:
            self.missing.labels(state)
        for cause in LOSS_CAUSES:
            self.lost.labels(cause)
