"""The replace-by-key rules on stored entries: what :func:`classify` counts as scheduling or
cancelling, and what :class:`KeyedSchedule` then supersedes and forgets; the C twin of
:func:`classify_run` against its reference."""

from __future__ import annotations

from typing import NoReturn

import mmh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap
from sampling import examples

from broker.delayed.replace_by_key import KeyedSchedule, classify, key_hash
from protocol import pulsar_pb as pb
from protocol.metadata import encode_batch_payload, encode_entry
from storage.positions import Position


def entry(payload: bytes = b"job", **fields: object) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1_760_000_000_000)
    for name, value in fields.items():
        setattr(md, name, value)
    return encode_entry(md, payload)


def batch(*messages: tuple[str | None, bytes]) -> bytes:
    singles = []
    for key, data in messages:
        single = pb.SingleMessageMetadata(payload_size=len(data))
        if key is not None:
            single.partition_key = key
        singles.append((single, data))
    return entry(encode_batch_payload(singles), num_messages_in_batch=len(messages))


def test_keyed_delayed_message_schedules_and_empty_keyed_message_is_a_tombstone() -> None:
    scheduled = classify(entry(partition_key="k", deliver_at_time=5))
    assert scheduled is not None and scheduled[0] == ((key_hash("k"), False),)
    assert not scheduled[1]
    tombstone = classify(entry(b"", partition_key="k"))
    assert tombstone is not None and tombstone[0] == ((key_hash("k"), True),)
    assert tombstone[1]
    null_value = classify(entry(b"", partition_key="k", null_value=True))
    assert null_value is not None and null_value[1]
    compressed_empty = classify(entry(b"\x00", partition_key="k", compression=pb.LZ4,
                                      uncompressed_size=0))
    assert compressed_empty is not None and compressed_empty[1]


def test_ordinary_messages_neither_replace_nor_cancel() -> None:
    assert classify(entry(partition_key="k")) is None              # no deliver time
    assert classify(entry(deliver_at_time=5)) is None              # no key
    assert classify(entry(b"")) is None                            # empty, no key
    assert classify(batch(("k", b"x"), (None, b""))) is None       # no keyed empty message
    assert classify(b"\x00\x00") is None                           # malformed: nothing


def test_batch_of_tombstones_is_withheld_and_a_mixed_batch_is_delivered() -> None:
    only = classify(batch(("a", b""), ("b", b"")))
    assert only is not None and only[1]
    assert only[0] == ((key_hash("a"), True), (key_hash("b"), True))
    mixed = classify(batch(("a", b""), ("b", b"payload")))
    assert mixed is not None and not mixed[1] and mixed[0] == ((key_hash("a"), True),)


def test_newer_message_supersedes_older_and_tombstone_supersedes_both() -> None:
    schedule = KeyedSchedule()
    schedule.record(7, 0, classify(entry(partition_key="k", deliver_at_time=5)) or _fail())
    assert not schedule.superseded(Position(7, 0))
    schedule.record(7, 3, classify(entry(partition_key="k", deliver_at_time=9)) or _fail())
    assert schedule.superseded(Position(7, 0)) and not schedule.superseded(Position(7, 3))
    assert len(schedule) == 1 and schedule.replaced_total == 1
    other = classify(entry(partition_key="other", deliver_at_time=9)) or _fail()
    schedule.record(7, 4, other)
    tombstone = classify(entry(b"", partition_key="k")) or _fail()
    schedule.record(8, 0, tombstone)
    assert schedule.superseded(Position(7, 3)) and schedule.superseded(Position(8, 0))
    assert not schedule.superseded(Position(7, 4))
    assert len(schedule) == 1 and schedule.tombstones_total == 1
    # a new message after the tombstone schedules again and supersedes nothing
    schedule.record(8, 1, classify(entry(partition_key="k", deliver_at_time=9)) or _fail())
    assert not schedule.superseded(Position(8, 1)) and len(schedule) == 2


def test_prune_forgets_what_every_subscription_acknowledged() -> None:
    schedule = KeyedSchedule()
    keys = [classify(entry(partition_key=f"k{i % 3}", deliver_at_time=5)) for i in range(9)]
    for i, k in enumerate(keys):
        schedule.record(1, i, k or _fail())
    assert schedule.superseded_count == 6 and len(schedule) == 3
    schedule.prune(Position(1, 6))
    assert schedule.superseded_count == 0                   # 0..5 were the superseded ones
    assert len(schedule) == 2                               # k0's newest (1:6) is acknowledged
    assert not schedule.superseded(Position(1, 7))
    schedule.prune(Position(2, -1))                         # a later ledger: everything before
    assert len(schedule) == 0
    assert schedule.memory_bytes > 0


def _fail() -> NoReturn:
    raise AssertionError("classify found nothing")


def test_entries_without_a_key_tag_are_answered_alike_with_and_without_a_parse() -> None:
    """The tag-byte test that spares most unkeyed entries a parse never changes a verdict:
    random producer names (digits '2' and letters 'X' are the two tag bytes), sequence ids,
    publish and deliver times (whose varint bytes hit the tags too), keys, empty payloads and
    null values, against the rules stated on the fields."""
    import random

    rnd = random.Random(23)
    spared = 0
    for _ in range(4000):
        md = pb.MessageMetadata(
            producer_name="".join(rnd.choice("ab2X-09") for _ in range(rnd.randrange(1, 40))),
            sequence_id=rnd.randrange(1 << rnd.choice((7, 14, 35, 63))),
            publish_time=1_700_000_000_000 + rnd.randrange(1 << 40))
        key = rnd.choice((None, "k", "key-2", "X"))
        if key is not None:
            md.partition_key = key
        if rnd.random() < 0.5:
            md.deliver_at_time = 1_700_000_000_000 + rnd.randrange(1 << 40)
        if rnd.random() < 0.1:
            md.null_value = True
        payload = b"" if rnd.random() < 0.3 else b"job"
        raw = encode_entry(md, payload)
        size = int.from_bytes(raw[:4], "big")
        body = raw[6 + raw[5]:4 + size] if raw[5] < 0x80 else b"\x32"
        spared += b"\x32" not in body and b"\x58" not in body
        got = classify(raw)
        if key is None:
            assert got is None
        elif md.null_value or not payload:
            assert got == (((key_hash(key), True),), True)
        elif md.HasField("deliver_at_time"):
            assert got == (((key_hash(key), False),), False)
        else:
            assert got is None
    assert spared > 500        # the test without a parse was taken, and often


def test_classify_timed_gives_the_deliver_time_of_a_scheduling_message_only() -> None:
    """The deliver time comes with the verdict, from the same parse: a scheduling message's;
    0 for a tombstone, an unkeyed delayed message, a batch, anything else."""
    from broker.delayed.replace_by_key import classify_timed

    keys, at = classify_timed(entry(partition_key="k", deliver_at_time=1_760_000_123_456))
    assert at == 1_760_000_123_456 and keys == classify(entry(partition_key="k",
                                                              deliver_at_time=5))
    assert classify_timed(entry(b"", partition_key="k"))[1] == 0
    assert classify_timed(entry(deliver_at_time=9)) == (None, 0)
    assert classify_timed(batch(("a", b""), ("b", b"")))[1] == 0


def test_known_deliver_times_hold_one_ledgers_latest_entries_bounded() -> None:
    """Runs noted in log order make one window per ledger: a gap is unknown (0), a new
    ledger starts afresh, a run not after the window is ignored, and past the bound the older
    half goes (what falls out is unknown, never a wrong time)."""
    from broker.delayed.known_times import UNKNOWN, WINDOW, KnownDeliverTimes

    known = KnownDeliverTimes()
    assert known.run_from(3, 0, 10)[1] == 0
    known.note(3, 10, [100, 101])
    known.note(3, 14, [104])                       # 12 and 13 were not keyed: unknown
    times, n = known.run_from(3, 10, 10)
    assert n == 5 and list(times) == [100, 101, UNKNOWN, UNKNOWN, 104]
    times, n = known.run_from(3, 11, 2)
    assert n == 2 and list(times) == [101, UNKNOWN]
    assert known.run_from(3, 9, 5)[1] == 0 and known.run_from(3, 15, 5)[1] == 0
    assert known.run_from(4, 10, 5)[1] == 0
    known.note(3, 12, [7])                         # not after the window: ignored
    assert list(known.run_from(3, 12, 1)[0]) == [UNKNOWN]
    known.note(5, 0, [500])                        # a new ledger
    assert known.run_from(3, 10, 5)[1] == 0 and list(known.run_from(5, 0, 5)[0]) == [500]
    known.note(5, 1_000_000, [9])                  # a long gap: a new window, not filled
    assert len(known) == 1 and list(known.run_from(5, 1_000_000, 1)[0]) == [9]
    first = 1_000_001
    for start in range(first, first + 3 * WINDOW, 1000):
        known.note(5, start, list(range(start, start + 1000)))
    assert WINDOW // 2 <= len(known) <= WINDOW
    last = start + 999
    times, n = known.run_from(5, last - 9, 100)
    assert n == 10 and list(times) == list(range(last - 9, last + 1))
    assert known.run_from(5, first, 1)[1] == 0    # dropped: unknown
    assert known.memory_bytes <= 64 + 8 * 2 * WINDOW


@pytest.mark.parametrize("ordered", [True, False])
def test_pruning_in_steps_forgets_exactly_what_was_acknowledged(
        monkeypatch: pytest.MonkeyPatch, ordered: bool) -> None:
    """Keys recorded, re-scheduled and cancelled between prunes whose work takes several
    calls (a small step), also while a sweep is under way: once the prune of the latest bound
    is through, ``latest`` holds exactly the keys whose newest position is past it. Recorded
    in log order, the map's head holds its lowest positions and a prune takes only those;
    otherwise it is swept, and a bound below every kept position starts no sweep at all."""
    import random

    from broker.delayed import replace_by_key

    monkeypatch.setattr(replace_by_key, "PRUNE_STEP", 7)
    rnd = random.Random(3)
    schedule = KeyedSchedule()
    schedule._ordered = ordered
    reference: dict[str, int] = {}
    entry_id, bound, skipped = 0, -1, 0
    for _ in range(300):
        for _ in range(rnd.randrange(1, 12)):
            key = f"k{rnd.randrange(40)}"
            if rnd.random() < 0.2:
                schedule.record(1, entry_id, classify(entry(b"", partition_key=key)) or _fail())
                reference.pop(key, None)
            else:
                schedule.record(1, entry_id, classify(entry(partition_key=key, deliver_at_time=5))
                                or _fail())
                reference[key] = entry_id
            entry_id += 1
        bound = min(entry_id - 1, bound + rnd.randrange(0, 12))
        if rnd.random() < 0.5:
            schedule.prune(Position(1, bound))      # a step: records come in before the next
            continue
        schedule.prune_fully(Position(1, bound))
        if schedule._pruned_up_to < (1 << 32) + bound:
            schedule.prune_fully(Position(1, bound))  # the sweep that ended was an older one
        reference = {k: v for k, v in reference.items() if v > bound}
        assert len(schedule) == len(reference)
        base = 1 << 32                       # ledger 1, packed
        assert sorted(schedule.export()[0].values()) == sorted(base + v for v in reference.values())
        if reference and not ordered:
            assert schedule._floor <= base + min(reference.values())
            if schedule._floor > base + bound + 1:   # nothing at or below floor - 1: no sweep
                before = schedule._pruned_up_to
                schedule.prune(Position(1, schedule._floor - base - 1))
                assert schedule._prune_from is None and schedule._pruned_up_to == before
                skipped += 1
    assert skipped > 10 or ordered
    assert schedule._ordered == ordered
    # a sweep that keeps nothing of its copy, with a key recorded while it ran: that key
    # is still found by the next bound past it
    monkeypatch.setattr(replace_by_key, "PRUNE_STEP", 2)
    fresh = KeyedSchedule()
    fresh._ordered = ordered
    for i in range(4):
        fresh.record(2, i, classify(entry(partition_key=f"a{i}", deliver_at_time=5)) or _fail())
    fresh.prune(Position(2, 3))                   # 2 of 4 looked at: the sweep goes on
    fresh.record(2, 4, classify(entry(partition_key="b", deliver_at_time=5)) or _fail())
    fresh.prune_fully(Position(2, 3))
    assert len(fresh) == 1
    fresh.prune_fully(Position(2, 4))
    assert len(fresh) == 0


def test_a_record_out_of_log_order_or_an_unsorted_restore_turns_to_sweeping() -> None:
    """The head-first prune relies on ``latest`` being in position order: a run recorded
    before what was recorded, or a restored map that is not sorted, turns it off, and the
    prune is still exact (a sweep)."""
    schedule = KeyedSchedule()
    schedule.record(1, 10, classify(entry(partition_key="a", deliver_at_time=5)) or _fail())
    schedule.record(1, 11, classify(entry(partition_key="b", deliver_at_time=5)) or _fail())
    assert schedule._ordered
    schedule.record(1, 3, classify(entry(partition_key="c", deliver_at_time=5)) or _fail())
    assert not schedule._ordered
    schedule.prune_fully(Position(1, 10))
    assert sorted(schedule.export()[0].values()) == [(1 << 32) + 11]
    restored = KeyedSchedule()
    restored.restore({1: 9, 2: 5, 3: 7}, {}, 9)
    assert not restored._ordered
    restored.prune_fully(Position(0, 6))
    assert sorted(restored.export()[0].values()) == [7, 9]
    in_order = KeyedSchedule()
    in_order.restore({2: 5, 3: 7, 1: 9}, {}, 9)
    assert in_order._ordered
    in_order.prune(Position(0, 6))
    assert sorted(in_order.export()[0].values()) == [7, 9]


def test_superseding_runs_tells_each_position_once_in_log_order() -> None:
    """Runs of keyed entries over several ledgers, some recorded twice (a rebuild over what
    was recorded live), against a model: the superseded positions, the count, and what
    ``on_superseded`` is told (each position once, in the order the runs supersede them)."""
    import random

    rnd = random.Random(17)
    told: list[int] = []

    def on_superseded(packed: list[int], groups: list[tuple[int, BitMap]]) -> None:
        # the bitmaps are the very positions, one per ledger
        assert sorted((lid << 32) + e for lid, ids in groups for e in ids) == sorted(packed)
        assert len({lid for lid, _ in groups}) == len(groups)
        told.extend(packed)

    schedule = KeyedSchedule(on_superseded=on_superseded)
    latest: dict[str, int] = {}
    superseded: set[int] = set()
    expected: list[int] = []
    ledger, entry_id = 3, 0
    history: list[tuple[int, int, list[tuple[str, bool]]]] = []
    for _ in range(400):
        if rnd.random() < 0.05:
            ledger, entry_id = ledger + 1, 0
        if history and rnd.random() < 0.1:
            lid, first, ops = rnd.choice(history)        # recorded again: nothing new
        else:
            lid, first = ledger, entry_id
            ops = [(f"k{rnd.randrange(30)}", rnd.random() < 0.25)
                   for _ in range(rnd.randrange(1, 20))]
            entry_id += len(ops)
            history.append((lid, first, ops))
        run = []
        for i, (key, tombstone) in enumerate(ops):
            here = (lid << 32) + first + i
            older = latest.pop(key, None)
            for gone in ([older] if older is not None else []) + ([here] if tombstone else []):
                if gone not in superseded:
                    superseded.add(gone)
                    expected.append(gone)
            if not tombstone:
                latest[key] = here
            run.append(classify(entry(b"", partition_key=key) if tombstone
                                else entry(partition_key=key, deliver_at_time=5)))
        schedule.record_run(lid, first, run)
        assert told == expected
    assert schedule.superseded_count == len(superseded)
    for lid, first, ops in history:
        for e in range(first, first + len(ops)):
            assert schedule.superseded(Position(lid, e)) == ((lid << 32) + e in superseded)


def test_a_run_is_classified_as_each_of_its_entries_alone() -> None:
    """classify_run over runs mixing scheduling messages, tombstones (empty, null_value,
    compressed with uncompressed_size 0), unkeyed delayed and plain messages, batches with and
    without tombstones, a deliver time of 0 or below, truncated and unparsable entries: each
    entry's verdict is its own (nothing carried from the entry before), the known time follows
    the verdict, and the count of nothing is right."""
    import random

    from broker.delayed.known_times import UNKNOWN, WITHHELD
    from broker.delayed.replace_by_key import classify_run

    rnd = random.Random(31)
    makers = [
        lambda: entry(partition_key=f"k{rnd.randrange(9)}",
                      deliver_at_time=rnd.choice((1_760_000_000_000 + rnd.randrange(1 << 30),
                                                  0, -5))),
        lambda: entry(b"", partition_key="k1"),
        lambda: entry(partition_key="k2", null_value=True, deliver_at_time=7),
        lambda: entry(b"zz", partition_key="k3", compression=pb.LZ4, uncompressed_size=0),
        lambda: entry(b"zz", partition_key="k3", compression=pb.LZ4, uncompressed_size=9,
                      deliver_at_time=11),
        lambda: entry(deliver_at_time=1_760_000_000_000),
        lambda: entry(),
        lambda: batch(("a", b""), ("b", b"")),
        lambda: batch(("a", b""), (None, b"x")),
        lambda: batch(("a", b"y")),
        lambda: entry(partition_key="k4", deliver_at_time=3)[:rnd.randrange(0, 12)],
        lambda: bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 40))),
    ]
    for _ in range(300):
        run = [rnd.choice(makers)() for _ in range(rnd.randrange(1, 25))]
        keys, times, nothing = classify_run(run)
        assert keys == [classify(e) for e in run]
        assert nothing == keys.count(None)
        for e, found, known in zip(run, keys, times, strict=True):
            if found is None:
                assert known == UNKNOWN
            elif found[1]:
                assert known == WITHHELD
            elif len(found[0]) == 1 and not found[0][0][1]:     # a scheduling message
                md = pb.MessageMetadata.FromString(e[4:4 + int.from_bytes(e[:4], "big")])
                assert known == (md.deliver_at_time if md.deliver_at_time > 0 else UNKNOWN)
            else:
                assert known == UNKNOWN     # a batch with tombstones, delivered


def test_a_runs_checked_times_read_as_each_alone() -> None:
    """deliver_times over a run equals deliver_time of each varint: none, the usual 6 bytes,
    shorter and longer ones, zero and negative times (unknown: read)."""
    import random

    from broker.delayed.known_times import deliver_time, deliver_times

    def varint(value: int) -> bytes:
        value &= 2**64 - 1
        out = bytearray()
        while value >= 0x80:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        out.append(value)
        return bytes(out)

    rnd = random.Random(43)
    pool = [None, varint(0), varint(-1), varint(-(2**63)), varint(5), varint(2**35 - 1),
            varint(2**42), varint(2**63 - 1)]
    for _ in range(200):
        run = [rnd.choice(pool) if rnd.random() < 0.3 else
               varint(rnd.randrange(2**35, 2**42)) for _ in range(rnd.randrange(0, 30))]
        assert deliver_times(run) == [deliver_time(v) for v in run]


def test_a_run_past_the_packable_entry_ids_records_only_those_below() -> None:
    """Entry ids past 2**32 - 1 cannot be packed: a run crossing that bound records its
    entries up to it and none after (the counts follow)."""
    scheduled = classify(entry(partition_key="a", deliver_at_time=5))
    again = classify(entry(partition_key="a", deliver_at_time=6))
    other = classify(entry(partition_key="b", deliver_at_time=7))
    schedule = KeyedSchedule()
    last = (1 << 32) - 1
    schedule.record_run(2, last - 1, [scheduled, again, other, scheduled])
    assert schedule.export()[0] == {key_hash("a"): (2 << 32) + last}
    assert schedule.replaced_total == 1 and schedule.recorded_up_to == (2 << 32) + last
    schedule.record_run(2, last + 1, [other])       # wholly past the bound: nothing
    assert len(schedule) == 1 and schedule.replaced_total == 1


# ------------------------------------------------------------------ the C twin of the run


def _mutated(raw: bytes, edits: list[tuple[int, int]]) -> bytes:
    data = bytearray(raw)
    for where, value in edits:
        if not data:
            break
        if value < 0:
            del data[where % len(data):]
        else:
            data[where % len(data)] = value
    return bytes(data)


keyed_fields = st.fixed_dictionaries(
    {},
    optional={
        "partition_key": st.one_of(st.text(max_size=6), st.sampled_from(["", "k", "é漢"])),
        "deliver_at_time": st.one_of(st.integers(-(2**63), 2**63 - 1),
                                     st.sampled_from([0, -1, 1, 1_760_000_000_000])),
        "null_value": st.booleans(),
        "compression": st.sampled_from([0, 0, 1, 3]),
        "uncompressed_size": st.sampled_from([0, 1, 9, 2**32 - 1]),
        "ordering_key": st.binary(max_size=3),
        "event_time": st.integers(0, 2**64 - 1),
        "num_messages_in_batch": st.integers(-2, 3),
        "schema_version": st.binary(max_size=3),
    },
)


@settings(max_examples=examples(full=3000, sample=600), deadline=None)
@given(fields=keyed_fields, payload=st.sampled_from([b"", b"job", b"\x32\x58"]),
       property_=st.booleans(), edits=st.lists(st.tuples(st.integers(0, 200),
                                                         st.integers(-1, 255)), max_size=3))
def test_the_c_twin_classifies_a_run_as_the_reference(
        fields: dict[str, object], payload: bytes, property_: bool,
        edits: list[tuple[int, int]]) -> None:
    """Whole, mutated and truncated entries of every layout the rules name, unparsable bytes
    too: the accelerated classify_run gives the reference's keys, times and count, entry by
    entry and as a run."""
    from broker.delayed.replace_by_key import classify_run, classify_run_py

    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1_760_000_000_000,
                            **fields)
    if property_:
        md.properties.add(key="a", value="b")
    whole = encode_entry(md, payload)
    run = [whole, _mutated(whole, edits), whole[:len(whole) - len(payload) - 1], b"", b"\x00"]
    assert classify_run(run) == classify_run_py(run)
    for one in run:
        assert classify_run((one,)) == classify_run_py((one,))


@settings(max_examples=examples(full=1000, sample=300), deadline=None)
@given(key=st.text(max_size=300), at=st.integers(-(2**63), 2**63 - 1),
       tombstone=st.booleans(), null=st.booleans())
def test_the_c_twin_walks_a_reschedule_and_a_tombstone_itself(
        key: str, at: int, tombstone: bool, null: bool) -> None:
    """A single keyed message without properties (a reschedule, a tombstone) is answered by
    the walk, never the reference."""
    from broker.delayed.known_times import UNKNOWN, WITHHELD
    from broker.delayed.replace_by_key import classify_run_py
    from protocol.send_accel import keyed_run

    if keyed_run is None:
        pytest.skip("built without a C compiler: the reference runs alone")

    def no_reference(entry: bytes) -> NoReturn:
        raise AssertionError("the walk handed a usual keyed message to the reference")

    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1,
                            partition_key=key, deliver_at_time=at)
    if null:
        md.null_value = True
    e = encode_entry(md, b"" if tombstone else b"job")
    assert keyed_run(no_reference, mmh3.hash128, WITHHELD, UNKNOWN, [e]) == classify_run_py([e])


@pytest.mark.parametrize("compression", [b"\x40\x05", b"\x40\x63", b"\x40\x01\x40\x05",
                                         b"\x40\x05\x40\x01"])
def test_a_compression_the_enum_does_not_know_is_read_as_the_reference_reads_it(
        compression: bytes) -> None:
    """protobuf keeps an unknown enum value aside (the field keeps its last known value): the
    twin classifies such an entry as the reference does, a tombstone only by the known one."""
    from broker.delayed.replace_by_key import classify_run, classify_run_py

    md = (b"\x0a\x01p\x10\x01\x18\x02\x32\x01k" + compression + b"\x48\x00"
          + b"\x98\x01" + bytes([0x80, 0x80, 0x80, 0x80, 0x80, 0x01]))
    e = len(md).to_bytes(4, "big") + md + b"zz"
    assert classify_run([e]) == classify_run_py([e])
    lz4 = b"\x40\x01" in compression      # the last known value: LZ4, and nothing unpacked
    assert classify_run([e])[0][0] == (((key_hash("k"), lz4),), lz4)
