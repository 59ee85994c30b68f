"""The dashboard's verify --follow panels: turns proved, turns lost by cause (gap, crash,
vanished) and by pack and runtime, cut streams and vanished producers, positions missing
within and past the grace, the follower's lag, its trust counts."""

from __future__ import annotations

from panel_spec import J, PanelSpec, Target

# The follower's jobs, whatever the scrape configuration calls them: those that export
# its checkpoint counter.
FOLLOWER_JOBS = f"sum by (job) (turnaudit_verify_checkpoints_total{J})"

VERIFY_PANELS: tuple[PanelSpec, ...] = (
    PanelSpec(
        26,
        "verify --follow: streams by trust, forgeries",
        (0, 104, 12, 8),
        "short",
        [
            Target(f"sum by (trust) (turnaudit_verify_stream_trust{J})", "{{trust}}"),
            Target(
                f"sum by (reason) (increase(turnaudit_verify_forgeries_total{J}[1h]))",
                "forgeries ({{reason}}), 1h",
            ),
        ],
        "Streams judged against the signed checkpoints (verify --follow --keyring): signed, "
        "unsigned, forged, truncated, pending within the trust grace; and forgeries found "
        "by reason (alert TurnAuditForgedStream).",
    ),
    PanelSpec(
        27,
        "verify --follow: turns proved",
        (12, 104, 12, 8),
        "ops",
        [
            Target(
                f"sum by (job) (rate(turnaudit_verify_turns_proved_total{J}[5m]))",
                "{{job}} proved",
            ),
            Target(
                f"sum by (job) (rate(turnaudit_verify_late_turns_total{J}[5m]))",
                "{{job}} late (closed a gap)",
            ),
        ],
        "Turns the continuous verifier proved present, chained and in order, per second; "
        "late ones arrived after later positions of their stream.",
    ),
    PanelSpec(
        28,
        "verify --follow: turns lost by cause (1h)",
        (0, 112, 12, 8),
        "short",
        [
            Target(
                f"sum by (cause) (increase(turnaudit_verify_lost_turns_total{J}[1h]))",
                "{{cause}}",
            )
        ],
        "Turns lost: gap (positions still missing after the grace; alert "
        "TurnAuditVerifyTurnsLost), crash (announced cut heads past the stream; "
        "TurnAuditVerifyTurnsLostInCrash), vanished (a vanished producer's open heads past "
        "the stream; TurnAuditVerifyProducerVanished).",
    ),
    PanelSpec(
        29,
        "verify --follow: cut streams, vanished producers",
        (12, 112, 12, 8),
        "short",
        [
            Target(
                f"sum by (job) (increase(turnaudit_verify_cut_streams_total{J}[1h]))",
                "{{job}} streams cut, 1h",
            ),
            Target(
                f"max by (job) (turnaudit_verify_vanished_producers{J})",
                "{{job}} producers vanished",
            ),
            Target(
                f"sum by (job) (turnaudit_verify_streams_at_risk{J})",
                "{{job}} streams at risk",
            ),
            Target(
                f"sum by (job) (turnaudit_verify_stream_ends_waiting{J})",
                "{{job}} stream ends waiting",
            ),
        ],
        "Streams a crashed publisher's successor announced cut; producers silent past the "
        "bound without their closing note, with their open streams (at risk); announced "
        "ends waiting for the follower to read the turn topic as far as it stood then.",
    ),
    PanelSpec(
        30,
        "verify --follow: crash and vanished losses by pack and runtime (1h)",
        (0, 120, 12, 8),
        "short",
        [
            Target(
                "sum by (cause, pack, runtime) "
                f"(increase(turnaudit_verify_lost_turns_by_pack_total{J}[1h]))",
                "{{cause}} {{pack}} {{runtime}}",
            )
        ],
        "Whose turns a crash or a vanished producer lost: the pack and runtime name the "
        "stream's head announced (bounded like every pack label; the rest are 'other').",
        kind="bargauge",
    ),
    PanelSpec(
        31,
        "verify --follow: positions missing, overdue",
        (12, 120, 12, 8),
        "short",
        [
            Target(f"sum by (state) (turnaudit_verify_missing_turns{J})", "{{state}}"),
        ],
        "Positions of ordered streams missing now: within the grace for late arrivals, or "
        "overdue (past it: counted lost with cause gap).",
    ),
    PanelSpec(
        32,
        "verify --follow: lag",
        (0, 128, 12, 8),
        "short",
        [
            Target(
                f"sum by (job) (turnaudit_consumer_lag{J}) and on (job) {FOLLOWER_JOBS}",
                "{{job}} messages behind",
            ),
        ],
        "Messages the follower is behind the end of the turn topic (the consumer runtime's "
        "lag for the follower's jobs): announced stream ends wait for it.",
    ),
)
