"""The offset ledger against a reference model of the loop's at-least-once promise.

Any sequence of assignments, revocations, delivered batches, held offsets and
stores: nothing is ever stored past what the sink took, nor past what it still
holds; stored offsets never move backwards while a partition is owned; a
revoked partition is forgotten whole; commits are exactly what was stored.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from turnaudit.consumers.runtime.ledger import OffsetLedger

PARTITIONS = st.integers(0, 4)
OFFSETS = st.integers(0, 60)
PARTITION_SETS = st.sets(PARTITIONS, min_size=1)


class LedgerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ledger = OffsetLedger()
        self.owned: set[int] = set()
        self.delivered: dict[int, int] = {}  # the sink has taken everything before
        self.stored: dict[int, int] = {}

    @rule(partitions=PARTITION_SETS)
    def assign(self, partitions: set[int]) -> None:
        self.ledger.assigned(partitions)
        self.owned |= partitions

    @rule(partitions=PARTITION_SETS)
    def revoke(self, partitions: set[int]) -> None:
        self.ledger.forget(partitions)
        self.owned -= partitions
        for p in partitions:
            self.delivered.pop(p, None)
            self.stored.pop(p, None)

    @rule(
        batch=st.dictionaries(PARTITIONS, OFFSETS, min_size=1),
        held=st.none() | st.dictionaries(PARTITIONS, OFFSETS),
    )
    def batch_delivered_then_stored(
        self,
        batch: dict[int, int],
        held: dict[int, int] | None,
    ) -> None:
        """A batch the sink flushed: its offsets recorded, then what may be stored."""
        # A batch moves forward from where the partition was (the consumer's order).
        batch = {p: max(o, self.delivered.get(p, 0)) for p, o in batch.items()}
        self.ledger.delivered(batch)
        for p, o in batch.items():
            if p in self.owned:
                self.delivered[p] = o
        stored = self.ledger.to_store(held, batch)
        self._check_stored(stored, batch, held)

    @rule(held=st.none() | st.dictionaries(PARTITIONS, OFFSETS))
    def tick(self, held: dict[int, int] | None) -> None:
        """A tick: held offsets may have moved; every delivered position may be stored."""
        stored = self.ledger.to_store(held)
        self._check_stored(stored, self.delivered, held)

    def _check_stored(
        self, stored: dict[int, int], candidates: dict[int, int], held: dict[int, int] | None
    ) -> None:
        expected = {}
        for p, o in candidates.items():
            capped = min(o, held[p]) if held is not None and p in held else o
            if p in self.owned and capped > self.stored.get(p, -1):
                expected[p] = capped
        assert stored == expected
        for p, o in stored.items():
            assert o <= self.delivered[p]  # never past what the sink took
            if held is not None and p in held:
                assert o <= held[p]  # never past what the sink still holds
        self.stored.update(stored)

    @rule(partitions=st.none() | PARTITION_SETS)
    def commit(self, partitions: set[int] | None) -> None:
        wanted = (
            self.stored
            if partitions is None
            else {p: o for p, o in self.stored.items() if p in partitions}
        )
        assert self.ledger.to_commit(partitions) == wanted

    @invariant()
    def agrees_with_the_model(self) -> None:
        assert self.ledger.stored() == self.stored
        assert self.ledger.owned() == self.owned
        assert set(self.stored) <= self.owned


TestLedger = LedgerModel.TestCase
TestLedger.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)


def test_a_partition_revoked_and_assigned_again_starts_from_nothing() -> None:
    ledger = OffsetLedger()
    ledger.assigned({0})
    ledger.delivered({0: 10})
    assert ledger.to_store(None) == {0: 10}
    ledger.forget({0})
    assert ledger.to_commit() == {}
    ledger.assigned({0})
    ledger.delivered({0: 4})  # the next owner's positions, older than ours
    assert ledger.to_store(None) == {0: 4}
