"""IdRanges (the stored sequence ids of a producer name) against a plain set, and its
persisted form."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.topics.dedup_state import MAX_ID_RANGES, NO_FLOOR, IdRanges, SequenceState

RANGES = st.lists(st.tuples(st.integers(0, 300), st.integers(0, 20)), max_size=60)


def _ids(ranges: IdRanges) -> set[int]:
    b = ranges.bounds
    return {i for k in range(0, len(b), 2) for i in range(b[k], b[k + 1] + 1)}


@settings(max_examples=300)
@given(adds=RANGES, probes=st.lists(st.tuples(st.integers(0, 330), st.integers(0, 5)),
                                    max_size=20))
def test_ranges_hold_what_was_added_and_stay_sorted_disjoint_and_bounded(
        adds: list[tuple[int, int]], probes: list[tuple[int, int]]) -> None:
    ranges = IdRanges()
    model: set[int] = set()
    for lo, length in adds:
        ranges.add(lo, lo + length)
        model.update(range(lo, lo + length + 1))
    b = ranges.bounds
    assert len(b) <= 2 * MAX_ID_RANGES and len(b) % 2 == 0
    assert all(b[i] <= b[i + 1] for i in range(0, len(b), 2))
    assert all(b[i] + 1 < b[i + 1] for i in range(1, len(b) - 1, 2))
    held = _ids(ranges)
    assert model <= held   # a filled hole only adds ids
    if len(adds) <= MAX_ID_RANGES:
        assert held == model
    for lo, length in probes:
        assert ranges.contains(lo, lo + length) == (set(range(lo, lo + length + 1)) <= held)
    if b:
        assert IdRanges.decode(ranges.encode()).bounds == b


def test_cover_takes_the_ids_a_batch_holds_beyond_an_out_of_order_delayed_message() -> None:
    # The C++ client: plain 0, plain 1, delayed 2 (sent at once), plain 3: the batch says
    # sequence_id 0, 3 messages (ids 0..2 by count) but holds 0, 1 and 3.
    ranges = IdRanges()
    ranges.add(2, 2)
    ranges.cover(0, 2)
    assert ranges.bounds == [0, 3]
    ranges.add(4, 7)   # the next batch: no hole left behind
    assert ranges.bounds == [0, 7]


def test_the_persisted_form_reads_the_plain_highest_id_as_every_id_up_to_it() -> None:
    assert IdRanges.decode("41").bounds == [NO_FLOOR, 41]
    assert IdRanges([NO_FLOOR, 41]).encode() == ":41"
    assert IdRanges.decode("0:41,43:50").bounds == [0, 41, 43, 50]
    for bad in ("x", "5:3", "0:4,5:9", "3:9,0:1", ",".join(
            f"{i * 3}:{i * 3}" for i in range(MAX_ID_RANGES + 1))):
        with pytest.raises(ValueError):
            IdRanges.decode(bad)


def test_a_send_inside_the_stored_ranges_is_new_only_above_the_floor() -> None:
    state = SequenceState("p")
    state.record(0, 4, 1, 0)   # a batch claiming 0..4
    assert state.stored_at(0, 4) == (1, 0)
    assert state.stored_at(4, 4) is None
    assert state.never_stored(4, 4)   # above the floor, not in the window: never stored
    state.drop_window()
    assert not state.never_stored(4, 4) and not state.never_stored(0, 4)
    assert state.never_stored(5, 5) and state.never_stored(3, 6)


@settings(max_examples=200)
@given(sends=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 3)), max_size=40))
def test_recording_a_lone_send_equals_recording_a_run_of_one(
        sends: list[tuple[int, int]]) -> None:
    one = SequenceState("p")
    run = SequenceState("p")
    for entry_id, (seq, extra) in enumerate(sends):
        one.record_one(seq, seq + extra, 1, entry_id)
        run.record_run([seq], [seq + extra], 1, entry_id)
        assert (one.persisted, one.floor, list(one.window), one.stored.bounds) == \
            (run.persisted, run.floor, list(run.window), run.stored.bounds)
