"""Where ``publish()`` sends an event, and when the spool may drain: the routing
decisions alone (no I/O, unit-tested).

New events go to the spool while it holds anything (so a session's order is
kept), once librdkafka's queue was full or refused a message, and while every
broker is unreachable or the oldest unacknowledged event passed the age bound;
the broker is probed at most once per interval while it is down; the spool
drains once the broker answers and librdkafka's queue is empty.
"""

from __future__ import annotations


class Route:
    """Where ``publish()`` sends an event, and when the spool may drain."""

    def __init__(self, *, spooling: bool, probe_interval: float) -> None:
        # Read by publish() on every call: a plain attribute, set under the
        # publisher's lock wherever an event could otherwise overtake another.
        self.spooling = spooling
        self.broker_down = False
        self._probe_interval = probe_interval
        self._last_probe = float("-inf")

    def client_refused(self) -> None:
        """librdkafka's queue is full, or it refused a message: the spool takes the next."""
        self.spooling = True

    def brokers_down(self) -> bool:
        """Every broker is unreachable; True when that is news."""
        news = not self.broker_down
        self.broker_down = self.spooling = True
        return news

    def unacked_too_old(self, now: float) -> None:
        """The oldest event in librdkafka waited longer than the age bound: treat
        the broker as away (a hung broker is not declared down by librdkafka for
        a long time), spool from now on, and probe it after one interval."""
        self.broker_down = self.spooling = True
        self._last_probe = now

    def probe_due(self, now: float) -> bool:
        """Whether to ask the broker now (spooling, broker down, interval passed)."""
        waited = now - self._last_probe
        if not (self.spooling and self.broker_down) or waited < self._probe_interval:
            return False
        self._last_probe = now
        return True

    def probed(self, reachable: bool) -> bool:
        """The probe's answer; True when the broker is back."""
        back = self.broker_down and reachable
        self.broker_down = not reachable
        return back

    def may_drain(self, queued: int) -> bool:
        """Drain only behind everything librdkafka holds, to the broker that answers."""
        return self.spooling and not self.broker_down and queued == 0

    def spool_empty(self) -> None:
        self.spooling = False

    def closed(self) -> None:
        """After close(), events go to the spool, for the next publisher."""
        self.spooling = True
