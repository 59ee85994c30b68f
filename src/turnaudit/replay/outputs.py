"""What a replay writes into: the ``ReplayOutput`` hooks, the context an output is built
from, and the registry of output kinds (``--into KIND:WHERE``)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from turnaudit.records import Record
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

if TYPE_CHECKING:
    from turnaudit.replay.request import ReplayRequest, ReplayTarget


class ReplayOutput(abc.ABC):
    """Where a replay puts the messages of its range. Hooks, in the order the replay calls them:

    * ``open(position)`` once: ``position`` is what ``sync`` returned at the
      last checkpoint (0 for a new replay). A resumable output drops anything
      after it; a non-resumable one is always opened at 0 and gets the whole
      range again.
    * ``warm(messages)`` on resume, for ``needs_warmup`` outputs only: the
      messages already written before ``position``, in order, to rebuild state
      (e.g. the runtime's stream tracker) without writing anything.
    * ``write(messages)`` for every batch in the replay's order; returns how
      many of them it could not use (undecodable, rejected).
    * ``sync()`` at every checkpoint: makes what was written durable and
      returns the position to record.
    * ``finish()`` once at the end of the range: completes the output (a
      whole-range output writes its file here, atomically).
    * ``close()`` always, last, also after a failure or an interruption.
    """

    resumable: ClassVar[bool] = False
    needs_warmup: ClassVar[bool] = False

    def open(self, position: int) -> None:
        return

    def warm(self, messages: Sequence[Record]) -> None:
        return

    @abc.abstractmethod
    def write(self, messages: Sequence[Record]) -> int: ...

    def sync(self) -> int:
        return 0

    @abc.abstractmethod
    def finish(self) -> None: ...

    def close(self) -> None:
        return


@dataclass(frozen=True)
class OutputContext:
    """What an output is built from: the target and the recorded range."""

    settings: KafkaSettings
    decode: TurnEventDeserializer
    topic: str
    target: ReplayTarget
    request: ReplayRequest
    label: str  # a short digest of the replay's arguments
    start: Mapping[int, int]
    end: Mapping[int, int]


OutputFactory = Callable[[OutputContext], ReplayOutput]


@dataclass(frozen=True)
class OutputKind:
    """A kind of ``--into KIND:WHERE``: a file, or a topic when ``writes_file`` is False."""

    name: str
    help: str
    build: OutputFactory
    writes_file: bool = True


class OutputKinds:
    """The registry of output kinds a replay can write; one ``add`` per kind."""

    def __init__(self) -> None:
        self._kinds: dict[str, OutputKind] = {}

    def add(self, name: str, help: str, build: OutputFactory, *, writes_file: bool = True) -> None:
        if name in self._kinds:
            raise ValueError(f"output kind {name!r} is registered twice")
        self._kinds[name] = OutputKind(name, help, build, writes_file)

    def get(self, name: str) -> OutputKind | None:
        return self._kinds.get(name)

    def names(self) -> list[str]:
        return list(self._kinds)

    def describe(self) -> str:
        return "; ".join(
            f"{k.name}:{'PATH' if k.writes_file else 'TOPIC'} ({k.help})"
            for k in self._kinds.values()
        )
