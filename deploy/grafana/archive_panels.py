"""The dashboard's archive panels (``turnaudit archive run``, docs/archive.md "On call"):
how far behind the topic each archiver is, how old each partition's last signed digest is,
and the oldest record held unwritten against half the topic's retention (the page)."""

from __future__ import annotations

from panel_spec import J, PanelSpec, Target

# The archivers' jobs, whatever the scrape configuration calls them: those that export
# the archived topic's retention (read at start, so there from the first scrape).
ARCHIVER_JOBS = f"sum by (job) (turnaudit_archive_topic_retention_seconds{J})"
ROW_Y = 136

ARCHIVE_PANELS: tuple[PanelSpec, ...] = (
    PanelSpec(
        33,
        "Archive: lag",
        (0, ROW_Y, 12, 8),
        "short",
        [
            Target(
                f"sum by (job, partition) (turnaudit_consumer_lag{J}) and on (job) {ARCHIVER_JOBS}",
                "{{job}} p{{partition}} records behind",
            ),
        ],
        "Records of the archived topic each archiver has not taken yet (the consumer runtime's "
        "lag for the archivers' jobs: its stored offsets wait for written segments, so this "
        "counts what is not in the archive).",
    ),
    PanelSpec(
        34,
        "Archive: age of the last digest",
        (12, ROW_Y, 12, 8),
        "s",
        [
            Target(
                "time() - max by (job, partition) "
                f"(turnaudit_archive_last_digest_timestamp_seconds{J})",
                "{{job}} p{{partition}} last digest",
            ),
            Target(
                f"max by (job, partition) (turnaudit_archive_undigested_segments{J})",
                "{{job}} p{{partition}} segments in no digest",
            ),
        ],
        "How long ago each partition's last digest was signed, and the segments written since "
        "(alert TurnAuditArchiveDigestStale: segments waiting over two hours). The digest "
        "interval is TURNAUDIT_ARCHIVE_DIGEST_INTERVAL_S (an hour by default).",
    ),
    PanelSpec(
        35,
        "Archive: oldest unarchived record against half the retention",
        (0, ROW_Y + 8, 24, 8),
        "s",
        [
            Target(
                "time() - min by (job, partition) "
                f"(turnaudit_archive_oldest_unarchived_timestamp_seconds{J})",
                "{{job}} p{{partition}} oldest record not yet in a segment",
            ),
            Target(
                f"0.5 * max by (job) (turnaudit_archive_topic_retention_seconds{J})",
                "{{job}} half the topic's retention (pages above)",
            ),
        ],
        "Age of the first record an archiver took and has not written into a segment yet "
        "(an hour's window and its grace is the usual), against half the archived topic's "
        "retention.ms: above that line TurnAuditArchiveBehindRetention pages, since at a "
        "whole retention the broker deletes the record unarchived.",
    ),
)
