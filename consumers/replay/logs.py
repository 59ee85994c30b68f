"""``logs:PATH``: the log sink's turn lines, stamped with each turn's time."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from turnaudit.consumers.log_sink import LogSink, service_logging
from turnaudit.consumers.replay.sink import SinkReplayOutput
from turnaudit.consumers.runtime.settings import LogSinkSettings
from turnaudit.records import Record
from turnaudit.replay.files import fsync_path, open_for_resume
from turnaudit.sealing.opening import TurnOpener
from turnaudit.serialization.wire import TurnEventDeserializer


class LogReplayOutput(SinkReplayOutput):
    """The log sink (``LogSink``, unchanged) writing one file, resumable like JSONL.

    Deterministic rendering: each line's ``timestamp`` is the turn's
    ``occurred_at`` (``event_time=True``); while the output is open structlog
    has the services' configuration (``service_logging``), so the sink renders
    its canonical lines itself; and every batch is written in an empty
    ``contextvars`` context, so no context-local value of the caller lands in
    a line. The file never rotates. On resume the runtime's stream tracker is
    warmed with the already-written prefix, so ``redelivered`` flags come out
    as in an uninterrupted run.
    """

    resumable = True
    needs_warmup = True

    def __init__(
        self,
        path: Path,
        decode: TurnEventDeserializer,
        settings: LogSinkSettings | None = None,
        *,
        start_gaps: bool = True,
        opener: TurnOpener | None = None,
    ) -> None:
        self._opener = opener  # sealed turns opened before the policy
        self._path = path
        self._start_gaps = start_gaps
        self._settings = settings or LogSinkSettings()
        self._decode = decode
        self._logging = contextlib.ExitStack()
        self._opened = self._finished = False

    def open(self, position: int) -> None:
        open_for_resume(self._path, position).close()
        self._logging.enter_context(service_logging())
        # One file, never rotated (its length is the checkpoint's position).
        settings = LogSinkSettings(
            self._settings.redaction,
            self._settings.hash_key,
            self._path,
            file_max_bytes=1 << 62,
            file_backups=0,
        )
        super().__init__(
            LogSink(settings, CollectorRegistry(), event_time=True, opener=self._opener),
            self._decode,
            start_gaps=self._start_gaps,
        )
        self._opened = True

    def write(self, messages: Sequence[Record]) -> int:
        return contextvars.Context().run(super().write, messages)

    def sync(self) -> int:
        return fsync_path(self._path)

    def finish(self) -> None:
        super().finish()
        self._finished = True

    def close(self) -> None:
        if self._opened and not self._finished:
            self.sink.close()  # interrupted: release the file (every batch was flushed)
        self._logging.close()
