"""``verify:PATH``: ``turnaudit verify``'s report over the replayed range."""

from __future__ import annotations

import json
from collections.abc import Sequence

from turnaudit.kafka.offsets import resolve_range
from turnaudit.records import Record
from turnaudit.replay.files import write_atomically
from turnaudit.replay.outputs import OutputContext, ReplayOutput
from turnaudit.verify.run import range_report
from turnaudit.verify.verifier import Verifier


class VerifyReplayOutput(ReplayOutput):
    """``turnaudit verify``'s report over the replayed range, as canonical JSON.

    The same ``Verifier`` as ``turnaudit verify`` (every version decoded,
    contracts, the stream tracker, exact counts), fed in the replay's order,
    with the dead letters of the range; written at the end with sorted keys,
    so the same range gives the same bytes (as long as no dead letter for
    the range is added in between).
    """

    def __init__(self, context: OutputContext) -> None:
        self._context = context
        _, _, self._low = resolve_range(context.settings, context.topic, context.request.spec)
        self._verifier = Verifier(
            context.decode, log_start_offsets=self._low, start_gaps=not context.request.event_time
        )

    def write(self, messages: Sequence[Record]) -> int:
        undecodable = len(self._verifier.undecodable)
        self._verifier.feed_batch(messages)  # in the replay's order, as verify feeds a range
        return len(self._verifier.undecodable) - undecodable

    def close(self) -> None:
        self._verifier.close()  # removes the event ids it spilled to disk, if any

    def finish(self) -> None:
        c = self._context
        report = range_report(
            c.settings,
            c.topic,
            c.request.spec,
            self._verifier,
            start=c.start,
            end=c.end,
            low=self._low,
        )
        document = report.as_json()
        document["replay"] = {"label": c.label, "event_time": c.request.event_time}
        write_atomically(
            c.target.path,
            json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False).encode("utf-8")
            + b"\n",
        )
