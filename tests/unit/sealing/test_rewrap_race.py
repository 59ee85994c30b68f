"""KEK rotation never undoes an erasure: whatever lands on the key topic between a rewrap's
read and its writes, every data key erased is gone at the end, and every other rewritten
key is there, wrapped anew (the key topic is one partition: a total order)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from turnaudit.sealing.rewrap import resurrected

ids = [f"{n:032x}" for n in range(6)]


@given(
    st.lists(st.sampled_from(ids), unique=True, min_size=1),
    st.lists(st.tuples(st.sampled_from(["erase", "rewrite"]), st.sampled_from(ids)), max_size=20),
)
def test_a_rewrap_racing_erasures_leaves_every_erased_key_gone_and_the_others_there(
    held: list[str], interleaving: list[tuple[str, str]]
) -> None:
    # The run read ``held`` (the keys on the topic at its read); then erasures (tombstones)
    # and the run's own rewrites land in any order after it, each rewrite once.
    log: list[tuple[str, bool]] = []  # (key, tombstone), offset = index
    rewritten: dict[str, int] = {}
    erased: set[str] = set()
    for what, key in interleaving:
        if what == "erase" and key in held:
            erased.add(key)
            log.append((key, True))
        elif what == "rewrite" and key in held and key not in rewritten:
            rewritten[key] = len(log)
            log.append((key, False))
    since = [(offset, key.encode(), tomb) for offset, (key, tomb) in enumerate(log)]
    again = resurrected(since, rewritten)
    log += [(key, True) for key in sorted(again)]
    # Compaction: the last record of each key wins.
    final: dict[str, bool] = {}
    for key, tomb in log:
        final[key] = tomb
    present = {key for key, tomb in final.items() if not tomb}
    assert present.isdisjoint(erased)
    assert present == set(rewritten) - erased
    assert again <= erased & set(rewritten)
