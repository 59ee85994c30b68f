"""The publisher's counts add up for any sequence of deliveries, failures,
spools, drains, purges and losses: the ledger against a reference model that
keeps every event's place."""

from __future__ import annotations

import enum

from hypothesis import given
from hypothesis import strategies as st

from turnaudit.producers.accounting import CloseReport, Ledger, PublisherStats


class Place(enum.Enum):
    CLIENT = "in_flight"
    SPOOL = "spooled"
    DELIVERED = "delivered"
    REFUSED = "refused"
    FAILED = "failed"


STEPS = ("to_client", "to_spool", "refuse", "deliver", "fail", "drain", "purge", "lose")


def apply(step: str, ledger: Ledger, places: list[Place], pick: int) -> None:
    """One step on both the ledger and the model (skipped when nothing is where it starts)."""

    def first(place: Place) -> int | None:
        found = [i for i, p in enumerate(places) if p is place]
        return found[pick % len(found)] if found else None

    if step == "to_client":
        ledger.to_client()
        places.append(Place.CLIENT)
    elif step == "to_spool":
        ledger.to_spool()
        places.append(Place.SPOOL)
    elif step == "refuse":
        ledger.refuse(("spool_full", "disk_error")[pick % 2])
        places.append(Place.REFUSED)
    elif step == "lose":
        spooled = [i for i, p in enumerate(places) if p is Place.SPOOL]
        lost = spooled[: pick % (len(spooled) + 1)]
        ledger.lose(len(lost))
        for i in lost:
            places[i] = Place.FAILED
    else:
        moves = {
            "deliver": (Place.CLIENT, Place.DELIVERED, _deliver),
            "fail": (Place.CLIENT, Place.FAILED, Ledger.failed),
            "drain": (Place.SPOOL, Place.CLIENT, Ledger.drained),
            "purge": (Place.CLIENT, Place.SPOOL, Ledger.purged_back),
        }
        source, target, method = moves[step]
        index = first(source)
        if index is not None:
            method(ledger)
            places[index] = target


def _deliver(ledger: Ledger) -> None:
    ledger.delivered += 1  # the one writer's step: the delivery report


def expected(places: list[Place], inherited: int) -> dict[str, int]:
    counts = {place.value: sum(p is place for p in places) for place in Place}
    return {**counts, "published": len(places) - inherited, "inherited": inherited}


@given(
    inherited=st.integers(0, 5),
    steps=st.lists(st.tuples(st.sampled_from(STEPS), st.integers(0, 50)), max_size=200),
)
def test_stats_always_add_up_and_match_where_every_event_is(
    inherited: int, steps: list[tuple[str, int]]
) -> None:
    ledger = Ledger(inherited)
    places = [Place.SPOOL] * inherited
    for step, pick in steps:
        apply(step, ledger, places, pick)
        with ledger.lock:
            stats = ledger.snapshot()
        assert stats.balanced, (step, stats)
        want = expected(places, inherited)
        got = {name: getattr(stats, name) for name in want}
        assert got == want, step
        assert ledger.refused == sum(ledger.refused_by_reason.values())


def test_balanced_refuses_a_negative_count_or_a_sum_that_does_not_add_up() -> None:
    assert PublisherStats(published=3, delivered=1, failed=0, spooled=1, in_flight=1).balanced
    assert not PublisherStats(published=3, delivered=1, failed=0, spooled=1, in_flight=0).balanced
    assert not PublisherStats(published=1, delivered=2, failed=0, spooled=0, in_flight=-1).balanced


def test_a_close_report_is_ok_only_when_nothing_is_left_refused_failed_or_lost() -> None:
    assert CloseReport(delivered=5, undelivered=0, failed=0, spool_dir="s").ok
    for field in ("undelivered", "failed", "refused", "lost"):
        report = CloseReport(
            **{"delivered": 5, "undelivered": 0, "failed": 0, "spool_dir": "s", field: 1}
        )
        assert not report.ok
        assert "1 " in report.describe()
