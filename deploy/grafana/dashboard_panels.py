"""The turn-audit dashboard's panels (title, place, unit, queries) and variable queries;
verify --follow's are in verify_panels.py, the archive's in archive_panels.py. generate.py
builds the dashboard from these; alert_rules.py links each alert to its panel."""

from __future__ import annotations

from archive_panels import ARCHIVE_PANELS
from panel_spec import LIVE, J, P, PanelSpec, Target
from verify_panels import VERIFY_PANELS

SERVICE_PANELS: tuple[PanelSpec, ...] = (
    PanelSpec(
        15,
        "Firing alerts",
        (0, 0, 24, 8),
        "short",
        [
            Target(
                "sum by (alertname, severity, pack, job, instance, contract, reason, kind) "
                '(ALERTS{alertstate="firing", alertname=~"TurnAudit.+"})',
                "{{alertname}}",
            )
        ],
        "Turn-audit alerts Prometheus has firing now, with the pack, service or runtime they "
        "name (routed by Alertmanager: severity=page pages, the rest are tickets).",
        kind="table",
    ),
    PanelSpec(
        1,
        "Refusal rate by pack",
        (0, 8, 12, 8),
        "percentunit",
        [
            Target(
                f"sum by (pack) (rate(turnaudit_refused_turns_total{P}[5m])) "
                f"/ sum by (pack) (rate(turnaudit_turns_total{P}[5m]))",
                "{{pack}}",
            )
        ],
        "Share of turns with refusal_emitted over 5 minutes (alert: TurnAuditRefusalRateHigh).",
    ),
    PanelSpec(
        2,
        "Hedge rate by pack",
        (12, 8, 12, 8),
        "percentunit",
        [
            Target(
                f"sum by (pack) (rate(turnaudit_hedged_turns_total{P}[5m])) "
                f"/ sum by (pack) (rate(turnaudit_turns_total{P}[5m]))",
                "{{pack}}",
            )
        ],
        "Share of turns with hedge_injected over 5 minutes (alert: TurnAuditHedgeRateHigh).",
    ),
    PanelSpec(
        3,
        "Refusal rate by domain",
        (0, 16, 12, 8),
        "percentunit",
        [
            Target(
                f"sum by (pack, domain) (rate(turnaudit_refused_turns_total{P}[5m])) "
                f"/ sum by (pack, domain) (rate(turnaudit_turns_total{P}[5m]))",
                "{{pack}}/{{domain}}",
            )
        ],
    ),
    PanelSpec(
        4,
        "Hedge rate by domain",
        (12, 16, 12, 8),
        "percentunit",
        [
            Target(
                f"sum by (pack, domain) (rate(turnaudit_hedged_turns_total{P}[5m])) "
                f"/ sum by (pack, domain) (rate(turnaudit_turns_total{P}[5m]))",
                "{{pack}}/{{domain}}",
            )
        ],
    ),
    PanelSpec(
        5,
        "Turns per second by path",
        (0, 24, 12, 8),
        "ops",
        [
            Target(f"sum by (path) (rate(turnaudit_turns_total{P}[5m]))", "{{path}}"),
            Target(f"sum(rate(turnaudit_stub_turns_total{P}[5m]))", "stub (all packs)"),
        ],
    ),
    PanelSpec(
        6,
        "Action risk by output policy",
        (12, 24, 12, 8),
        "ops",
        [
            Target(
                f"sum by (output_policy) (rate(turnaudit_action_risk_total{J}[5m]))",
                "{{output_policy}}",
            )
        ],
        "Read from action_risk_verdict, risk_tier and output_policy; never from execution_verdict.",
    ),
    PanelSpec(
        7,
        "Action risk by risk tier",
        (0, 32, 12, 8),
        "ops",
        [Target(f"sum by (risk_tier) (rate(turnaudit_action_risk_total{J}[5m]))", "{{risk_tier}}")],
    ),
    PanelSpec(
        8,
        "Contract breaches (last 1h)",
        (12, 32, 12, 8),
        "short",
        [
            Target(
                f"sum by (job, pack, contract) "
                f"(increase(turnaudit_contract_breaches_total{J}[1h]))",
                "{{job}} {{pack}} {{contract}}",
            ),
            Target(
                f"sum by (pack, contract) (increase(turnaudit_publisher_breaches_total{J}[1h]))",
                "runtimes {{pack}} {{contract}}",
            ),
        ],
        "Turns that broke a contract (docs/contracts.md), by service, pack and contract; they "
        "are counted as turns too (alerts: TurnAuditContractBreach, "
        "TurnAuditRuntimeContractBreach).",
        kind="bargauge",
    ),
    PanelSpec(
        9,
        "Sequence gaps and missing turns",
        (0, 40, 12, 8),
        "short",
        [
            Target(f"sum(increase(turnaudit_sequence_gaps_total{J}[5m]))", "gaps"),
            Target(
                f"sum(increase(turnaudit_sequence_missing_turns_total{J}[5m]))", "missing turns"
            ),
            Target(
                f"sum(increase(turnaudit_redelivered_turns_total{J}[5m]))",
                "redelivered (explained)",
            ),
        ],
        "Sessions whose sequence skipped numbers (alert: TurnAuditSequenceGaps).",
    ),
    PanelSpec(
        10,
        "Dead letters by reason",
        (12, 40, 12, 8),
        "short",
        [
            Target(
                f"sum by (job, reason) (increase(turnaudit_dead_letters_total{J}[5m]))",
                "{{job}} {{reason}}",
            )
        ],
        "Messages parked on the dead-letter topic (alert: TurnAuditDeadLettersGrowing).",
    ),
    PanelSpec(
        11,
        "Consumer lag by partition",
        (0, 48, 12, 8),
        "short",
        [Target(f"turnaudit_consumer_lag{J}", "{{job}} p{{partition}}")],
        "Messages each service is behind the end of its topic (alert: TurnAuditConsumerLagHigh).",
    ),
    PanelSpec(
        12,
        "Delay from turn to counted (p50, p99)",
        (12, 48, 12, 8),
        "s",
        [
            Target(
                "histogram_quantile(0.5, sum by (le) "
                f"(rate(turnaudit_turn_count_delay_seconds_bucket{J}[5m])))",
                "p50",
            ),
            Target(
                "histogram_quantile(0.99, sum by (le) "
                f"(rate(turnaudit_turn_count_delay_seconds_bucket{J}[5m])))",
                "p99",
            ),
        ],
    ),
    PanelSpec(
        13,
        "Log lines written per second",
        (0, 56, 12, 8),
        "ops",
        [Target(f"sum(rate(turnaudit_log_lines_total{J}[5m]))", "lines/s")],
    ),
    PanelSpec(
        14,
        "Service memory (resident)",
        (12, 56, 12, 8),
        "bytes",
        [
            Target('process_resident_memory_bytes{job=~"$job"}', "{{job}} {{instance}}"),
            Target('up{job=~"$job"} == 0', "DOWN {{job}} {{instance}}"),
        ],
        "Resident memory of each scraped service process; a DOWN line is a target "
        "Prometheus cannot scrape (alert: TurnAuditServiceDown).",
    ),
    PanelSpec(
        16,
        "Sink and dead-letter failures",
        (0, 64, 12, 8),
        "short",
        [
            Target(
                f"sum by (job) (increase(turnaudit_sink_failures_total{J}[5m]))",
                "sink failures {{job}}",
            ),
            Target(
                f"sum by (job) (increase(turnaudit_dead_letter_failures_total{J}[5m]))",
                "dead-letter failures {{job}}",
            ),
        ],
        "Batches a sink could not take (retried; alert TurnAuditSinkFailures) and dead "
        "letters the broker refused (alert TurnAuditDeadLetterFailures).",
    ),
    PanelSpec(
        17,
        "HTIR traces published",
        (12, 64, 12, 8),
        "short",
        [Target(f"sum by (closed_by) (rate(turnaudit_htir_traces_total{J}[5m]))", "{{closed_by}}")],
        "Traces the HTIR feeder published per second, by what closed them (end of task, "
        "idle timeout, shutdown).",
    ),
    PanelSpec(
        18,
        "HTIR open traces",
        (0, 72, 12, 8),
        "short",
        [
            Target(f"sum by (job) (turnaudit_htir_open_traces{J})", "open {{job}}"),
            Target(f"sum by (job) (turnaudit_htir_partial_turns_skipped{J})", "skipped {{job}}"),
        ],
        "Task runs the feeder is still assembling, and turns of already-published tasks it "
        "skipped.",
    ),
    PanelSpec(
        19,
        "Pack and domain labels named",
        (12, 72, 12, 8),
        "short",
        [
            Target(f"sum by (job, label) (turnaudit_metrics_label_values{J})", "{{label}} named"),
            Target(f"max by (job, label) (turnaudit_metrics_label_limit{J})", "{{label}} limit"),
        ],
        "Distinct pack and domain ids given their own series, against "
        "TURNAUDIT_METRICS_LABEL_LIMIT (alert TurnAuditMetricsLabelBoundReached).",
    ),
    PanelSpec(
        20,
        "Turn streams: new turns and redeliveries",
        (0, 80, 12, 8),
        "ops",
        [
            Target(f"sum by (job) (rate(turnaudit_new_turns_total{J}[5m]))", "{{job}} new"),
            Target(
                f"sum by (job) (rate(turnaudit_redelivered_turns_total{J}[5m]))",
                "{{job}} redelivered",
            ),
        ],
        "Turns counted once by event id, and the same events read again (at-least-once "
        "redeliveries, not counted).",
    ),
    PanelSpec(
        21,
        "Turn streams: missing turns, chain breaks, key mismatches",
        (12, 80, 12, 8),
        "short",
        [
            Target(f"max by (job) (turnaudit_stream_missing_turns{J})", "{{job}} missing now"),
            Target(
                f"sum by (job, kind) (increase(turnaudit_chain_breaks_total{J}[1h]))",
                "{{job}} chain breaks ({{kind}}), 1h",
            ),
            Target(
                f"sum by (job) (increase(turnaudit_key_mismatches_total{J}[1h]))",
                "{{job}} key mismatches, 1h",
            ),
        ],
        "Positions still missing from ordered streams (alert TurnAuditTurnsStillMissing after "
        "15 minutes), hash-chain breaks (TurnAuditChainBreak) and messages whose key is not "
        "their session id.",
    ),
    PanelSpec(
        22,
        "Publisher: events/s by outcome",
        (0, 88, 12, 8),
        "ops",
        [
            Target(f"sum(rate(turnaudit_publisher_events_published_total{J}[5m]))", "published"),
            Target(f"sum(rate(turnaudit_publisher_events_delivered_total{J}[5m]))", "delivered"),
            Target(f"sum(rate(turnaudit_publisher_events_spooled_total{J}[5m]))", "spooled"),
            Target(
                f"sum by (reason) (rate(turnaudit_publisher_events_refused_total{J}[5m]))",
                "refused {{reason}}",
            ),
            Target(f"sum(rate(turnaudit_publisher_events_failed_total{J}[5m]))", "failed"),
            Target(
                f"sum(rate(turnaudit_publisher_events_rejected_total{J}[5m]))", "rejected (DLQ)"
            ),
        ],
        "What the runtimes' publishers did with turn events (alerts "
        "TurnAuditPublisherRefusing, TurnAuditPublisherDeadLettering, TurnAuditRuntimeSilent, "
        "TurnAuditStreamSilent).",
    ),
    PanelSpec(
        23,
        "Publisher spool: age of the oldest event",
        (12, 88, 12, 8),
        "s",
        [
            Target(
                f"max by (job, instance) (turnaudit_publisher_spool_oldest_event_age_seconds{J})",
                "{{instance}}",
            )
        ],
        "How long the oldest spooled turn event has waited for the broker (alert "
        "TurnAuditPublisherSpooling at 10 minutes).",
    ),
    PanelSpec(
        24,
        "Publisher spool: events and bytes",
        (0, 96, 12, 8),
        "short",
        [
            Target(
                f"sum by (instance) (turnaudit_publisher_spool_events{J})", "{{instance}} events"
            ),
            Target(f"sum by (instance) (turnaudit_publisher_spool_bytes{J})", "{{instance}} bytes"),
        ],
        "Turn events held on the runtimes' disks while the broker is away.",
    ),
    PanelSpec(
        25,
        "Publisher delivery latency p50 / p99",
        (12, 96, 12, 8),
        "s",
        [
            Target(
                "histogram_quantile(0.5, sum by (le) "
                f"(rate(turnaudit_publisher_delivery_latency_seconds_bucket{J}[5m])))",
                "p50",
            ),
            Target(
                "histogram_quantile(0.99, sum by (le) "
                f"(rate(turnaudit_publisher_delivery_latency_seconds_bucket{J}[5m])))",
                "p99",
            ),
        ],
        "From produce() to the broker's acknowledgement.",
    ),
)
PANELS: tuple[PanelSpec, ...] = (*SERVICE_PANELS, *VERIFY_PANELS, *ARCHIVE_PANELS)

# The job variable: every job that exports turn-audit metrics (services and runtimes),
# whatever the scrape configuration names them.
JOB_QUERY = 'label_values({__name__=~"turnaudit_.+",' + LIVE + "}, job)"
PACK_QUERY = "label_values(turnaudit_turns_total{" + LIVE + "}, pack)"
