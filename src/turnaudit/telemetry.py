"""The names the services write and the reconcilers read back.

``verify`` and the demo check a log sink's lines and a verdict-metrics
service's counters against the stream; they must not import the services
(``consumers/``), so the names both sides use live here, in the core.

Metric names are the exposed sample names (``…_total``): what a scrape, a
Prometheus query and an alert rule see. ``prometheus_client.Counter`` accepts
them as they are (it drops the ``_total`` suffix from the family name and adds
it back to the sample), so a service declares its counter with the same
constant.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Final

# Verdict metrics: distinct turns (by event id), labelled by pack.
TURNS_TOTAL: Final = "turnaudit_turns_total"
REFUSED_TURNS_TOTAL: Final = "turnaudit_refused_turns_total"
HEDGED_TURNS_TOTAL: Final = "turnaudit_hedged_turns_total"
STUB_TURNS_TOTAL: Final = "turnaudit_stub_turns_total"
# Verdict metrics: turns with an action assessment, labelled by output policy.
ACTION_RISK_TOTAL: Final = "turnaudit_action_risk_total"
# Verdict metrics: turns redriven from the dead-letter topic (``turnaudit dlq redrive``),
# by pack: counted here once instead of in the live counters above, so a burst of old
# turns does not move the live rates the alerts read; verify adds both.
REDRIVEN_TURNS_TOTAL: Final = "turnaudit_redriven_turns_total"
REDRIVEN_REFUSED_TURNS_TOTAL: Final = "turnaudit_redriven_refused_turns_total"
REDRIVEN_HEDGED_TURNS_TOTAL: Final = "turnaudit_redriven_hedged_turns_total"
REDRIVEN_STUB_TURNS_TOTAL: Final = "turnaudit_redriven_stub_turns_total"
# Every consumer service: contract breaches (by contract) and sequence gaps opened.
CONTRACT_BREACHES_TOTAL: Final = "turnaudit_contract_breaches_total"
SEQUENCE_GAPS_TOTAL: Final = "turnaudit_sequence_gaps_total"
# Log sink: turn lines written (a redelivered turn is written again).
LOG_LINES_TOTAL: Final = "turnaudit_log_lines_total"

# The ``event`` of a log sink's line for a turn (its JSON also carries ``event_id``).
TURN_LOG_EVENT: Final = "turn"

# The turn counters ``verify --metrics-url`` reconciles, by the figure they must equal.
TURN_COUNTERS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "turns": TURNS_TOTAL,
        "refused": REFUSED_TURNS_TOTAL,
        "hedged": HEDGED_TURNS_TOTAL,
        "stub": STUB_TURNS_TOTAL,
    }
)
# Their redriven counterparts, by the same figure.
REDRIVEN_TURN_COUNTERS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "turns": REDRIVEN_TURNS_TOTAL,
        "refused": REDRIVEN_REFUSED_TURNS_TOTAL,
        "hedged": REDRIVEN_HEDGED_TURNS_TOTAL,
        "stub": REDRIVEN_STUB_TURNS_TOTAL,
    }
)


def rotated_log_files(path: Path, names: Iterable[str]) -> list[Path]:
    """A log sink's file and its rotated copies, oldest first, among ``names`` (the
    names in ``path``'s folder).

    The log sink rotates with ``logging.handlers.RotatingFileHandler``: the current
    file is ``path``, the copies ``path.1`` (the newest) to ``path.N`` (the oldest,
    N = ``TURNAUDIT_LOG_FILE_BACKUPS``). The current file comes last, listed whether or
    not it is among ``names``.
    """
    pattern = re.compile(re.escape(path.name) + r"\.([1-9][0-9]*)")
    copies = sorted(
        ((int(m.group(1)), name) for name in names if (m := pattern.fullmatch(name))), reverse=True
    )
    return [path.with_name(name) for _, name in copies] + [path]
