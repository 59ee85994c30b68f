"""The demo's continuous verifier: ``turnaudit verify --follow --keyring FILE
--require-signed``, in-process beside the log sink and the verdict metrics.

It is built from the parts ``turnaudit.commands.verify.verify_follow_worker`` builds
(the proof state, its metrics, the trust feed reading the signed checkpoints, the
checkpointing sink and the validation), with the settings given rather than read from
the environment, and serves no HTTP. What it proved is read from its own metrics
(``turnaudit_verify_*``) and reconciled against the simulator and the publisher.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry

from turnaudit.checkpoints import Keyring
from turnaudit.commands.demo_consumers import sample_total
from turnaudit.commands.demo_summary import ReconciliationRow
from turnaudit.consumers.runtime import ConsumerService
from turnaudit.consumers.runtime.settings import ServiceSettings
from turnaudit.consumers.verify_follow import FollowValidation, VerifyFollowSink
from turnaudit.consumers.verify_follow_metrics import FollowMetrics
from turnaudit.consumers.verify_follow_trust import TrustFeed, partition_judges
from turnaudit.kafka.decoders import decoder_for
from turnaudit.producers.simulator import GroundTruth
from turnaudit.verify.follow import FollowState
from turnaudit.verify.follow_trust_findings import GAUGE_STATES

PROVED = "turnaudit_verify_turns_proved_total"
TRUST = "turnaudit_verify_stream_trust"
VALID_CHECKPOINTS = "turnaudit_verify_signed_checkpoints_total"
FORGERIES = "turnaudit_verify_forgeries_total"
# Counters of what must not happen to an honest run's turns, by what the summary calls them.
TURNS_NEVER = {
    "lost": "turnaudit_verify_lost_turns_total",
    "duplicated": "turnaudit_verify_duplicates_total",
    "chain breaks": "turnaudit_verify_chain_breaks_total",
    "undecodable": "turnaudit_verify_undecodable_total",
    "breaching": "turnaudit_verify_breaches_total",
}


class DemoFollower:
    """The follower service and its registry; ``settled`` once it has proved the run."""

    def __init__(
        self,
        settings: ServiceSettings,
        keyring: Keyring,
        *,
        grace_s: float,
        trust_grace_s: float,
        start_offsets: Mapping[int, int],
    ) -> None:
        self.registry = CollectorRegistry()
        state = FollowState(grace_s=grace_s)
        metrics = FollowMetrics(self.registry)
        trust = TrustFeed(
            settings.kafka,
            partition_judges(settings.kafka, keyring, grace_s=trust_grace_s),
            metrics,
        )
        sink = VerifyFollowSink(settings.kafka, state, metrics, trust=trust)
        validation = FollowValidation(
            decoder_for(settings.kafka, registry=self.registry),
            state,
            metrics,
            sink.load,
            trust=trust,
        )
        self.service = ConsumerService(
            settings,
            sink,
            registry=self.registry,
            validation=validation,
            start_offsets=start_offsets,
            serve_http=False,
        )
        self._turns = 0
        self._streams = 0
        # The trust gauges as last seen running: a member's gauges count the streams of
        # the partitions it holds, and the partitions are revoked when the service stops.
        self._held: dict[str, int] = {}

    def expect(self, turns: int, streams: int) -> None:
        """What the run published: the turns to prove, the chained streams to judge."""
        self._turns, self._streams = turns, streams

    def _trust(self, state: str) -> int:
        return self._held.get(state, 0)

    def settled(self) -> bool:
        """Every turn proved and every stream judged (none still pending)."""
        self._held = {s: sample_total(self.registry, TRUST, trust=s) for s in GAUGE_STATES}
        judged = sum(self._trust(s) for s in GAUGE_STATES if s != "pending")
        return (
            sample_total(self.registry, PROVED) >= self._turns
            and judged >= self._streams
            and self._trust("pending") == 0
        )

    def rows(self, truth: GroundTruth, publisher_checkpoints: int) -> list[ReconciliationRow]:
        r = self.registry
        streams = len(truth.chained_sessions)
        no_turn, none = "no turn", "none"
        return [
            ReconciliationRow(
                "turns proved (present once, chained, in order)",
                sample_total(r, PROVED),
                truth.events,
            ),
            ReconciliationRow(
                "turns missing now",
                sample_total(r, "turnaudit_verify_missing_turns"),
                0,
                no_turn,
                "missing",
            ),
            *(
                ReconciliationRow(f"turns {name}", sample_total(r, metric), 0, no_turn, name)
                for name, metric in TURNS_NEVER.items()
            ),
            ReconciliationRow(
                "streams signed, judged as they arrived", self._trust("signed"), streams
            ),
            ReconciliationRow(
                "signed checkpoints read, valid",
                sample_total(r, VALID_CHECKPOINTS, result="valid"),
                publisher_checkpoints,
            ),
            *(
                ReconciliationRow(f"streams {state}", self._trust(state), 0, none, part)
                for state, part in (
                    ("pending", "pending"),
                    ("unsigned", "unsigned"),
                    ("forged", "forged"),
                    ("truncated", "truncated streams"),
                )
            ),
            ReconciliationRow("forgeries found", sample_total(r, FORGERIES), 0, none, "forgeries"),
            ReconciliationRow(
                "invalid checkpoints",
                sample_total(r, VALID_CHECKPOINTS, result="invalid"),
                0,
                none,
                "invalid checkpoints",
            ),
        ]
