"""Plain SENDs on the producer's run loop: an entry whose metadata the scan reads as one plain
message (``scan_publish_metadata(entry) is SINGLE``) and no larger than the plain bound of
``Topic.send_bounds()`` is taken without ``Topic.check_publish``; so is one delayed or keyed
message that ``publish_bounds.single_message`` passes within the single bound. That is right
only if each bound is exactly the condition under which ``check_publish`` returns such an entry
unchanged (noting the same deliver time): checked on a real topic in every state that matters,
and over the wire within one run."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

from broker_rawclient import RawClient, make_batch_entry, make_entry

from broker.delayed.known_times import UNKNOWN
from broker.topics.publish_bounds import single_message
from broker.topics.topic_state import TopicState
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import RequestError, ServerError
from protocol.metadata_scan import SINGLE, scan_publish_metadata

T = pb.BaseCommand
TOPIC = "persistent://public/default/plain-sends"


def _create_topic(broker: Any) -> None:
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        assert raw.create_producer(TOPIC, 1).type == T.PRODUCER_SUCCESS


def _plain(size: int, seq: int = 0) -> bytes:
    entry = make_entry(b"x" * size, sequence_id=seq)
    assert scan_publish_metadata(entry) is SINGLE
    return entry


def _verdict(topic: Any, entry: bytes) -> str:
    """What check_publish does with *entry*: "unchanged", "changed" or the refusal."""
    try:
        stored, messages, partial = topic.check_publish(entry)
    except RequestError as exc:
        return f"refused: {exc}"
    return "unchanged" if (stored is entry and messages == 1 and not partial) else "changed"


def _states(base: Any) -> list[tuple[str, dict[str, Any]]]:
    """Every topic state in which check_publish could act on a one-message entry, and its
    neighbours: (name, the topic attributes to set, "policy" meaning the resolved delay
    policy)."""
    return [
        ("default", {}),
        ("maxMessageSize 100", {"max_message_size_policy": 100}),
        ("encryption required", {"encryption_required": True}),
        ("shadow", {"shadow_source": "persistent://public/default/source"}),
        ("terminated", {"state": TopicState.TERMINATED}),
        ("fixed delay", {"policy": dataclasses.replace(base, active=True,
                                                       fixed_delay_ms=60_000)}),
        ("max delay", {"policy": dataclasses.replace(base, active=True, max_delay_ms=60_000)}),
        ("delivery off, fixed delay", {"policy": dataclasses.replace(
            base, active=False, fixed_delay_ms=60_000)}),
        ("delivery off, max delay", {"policy": dataclasses.replace(
            base, active=False, max_delay_ms=60_000)}),
    ]


@contextlib.contextmanager
def _in_state(topic: Any, changes: dict[str, Any]) -> Iterator[None]:
    """The topic in one of :func:`_states`, restored after."""
    base = topic.delivery.resolved
    saved = {k: getattr(topic, k) for k in changes if k != "policy"}
    try:
        for key, value in changes.items():
            if key == "policy":
                topic.delivery.resolved = value
            else:
                setattr(topic, key, value)
        yield
    finally:
        for key, value in saved.items():
            setattr(topic, key, value)
        topic.delivery.resolved = base


def test_the_bound_is_exactly_where_check_publish_passes_a_plain_entry_unchanged(
        broker: Any) -> None:
    _create_topic(broker)

    def probe() -> list[tuple[str, int, list[str]]]:
        topic = broker.service.topics[TOPIC]
        topic.delivery.resolved = topic.delivery.delay_policy()
        entries = [_plain(size) for size in (0, 10, 85, 86, 87, 500)]
        out = []
        for name, changes in _states(topic.delivery.resolved):
            with _in_state(topic, changes):
                bound = topic.send_bounds().plain
                out.append((name, bound, [_verdict(topic, e) for e in entries]))
                for entry in entries:   # the rule the producer relies on
                    if len(entry) <= bound:
                        assert _verdict(topic, entry) == "unchanged", (name, len(entry))
        return out

    results = {name: (bound, verdicts) for name, bound, verdicts in broker.call(probe)}
    # open, no policy: every plain entry passes, bounded by the record size alone
    assert results["default"][1] == ["unchanged"] * 6
    assert results["default"][0] > 500
    assert results["max delay"] == results["default"]   # a plain message carries no delay
    assert results["delivery off, fixed delay"] == results["default"]
    # maxMessageSize 100 counts metadata and payload (entry - 4): the bound is exact
    bound, verdicts = results["maxMessageSize 100"]
    assert bound == 104
    sizes = [len(_plain(size)) for size in (0, 10, 85, 86, 87, 500)]
    assert [v == "unchanged" for v in verdicts] == [s <= bound for s in sizes]
    assert sizes.count(bound) == 1   # one entry sits exactly on it
    assert "refused: Exceed maximum message size" in verdicts
    # every state where check_publish would act on a plain entry takes it off the fast path
    for name in ("encryption required", "shadow", "terminated", "fixed delay"):
        bound, verdicts = results[name]
        assert bound == -1, name
        assert "unchanged" not in verdicts, (name, verdicts)


def test_one_run_of_plain_batched_and_oversized_sends_is_answered_in_order(
        broker: Any) -> None:
    plain_ok, too_big = b"a" * 200, b"b" * 400
    sends = [
        make_entry(plain_ok, sequence_id=0),
        make_entry(too_big, sequence_id=1),   # over the topic's limit: refused in the run
        make_batch_entry([b"m1", b"m2"], sequence_id=2),   # a batch: through check_publish
        make_entry(plain_ok, sequence_id=4),
        make_entry(plain_ok, sequence_id=5, partition_key="k"),   # not plain for the scan
        make_entry(plain_ok, sequence_id=6),
    ]
    seqs, nums = [0, 1, 2, 4, 5, 6], [1, 1, 2, 1, 1, 1]
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        assert raw.create_producer(TOPIC, 2, name="plain").type == T.PRODUCER_SUCCESS
        # the topic's maxMessageSize (set after PRODUCER, which reads the topic's policies)
        broker.call(lambda: setattr(broker.service.topics[TOPIC], "max_message_size_policy",
                                    300))
        frames = [C.encode_send(2, seq, entry, num_messages=num,
                                highest_sequence_id=seq + num - 1 if num > 1 else None)
                  for seq, num, entry in zip(seqs, nums, sends, strict=True)]
        raw.send(b"".join(frames))   # one write: the SENDs of one read form one run
        answers = [raw.recv_command() for _ in sends]
    kinds = [(a.type, a.send_receipt.sequence_id if a.type == T.SEND_RECEIPT
              else a.send_error.sequence_id) for a in answers]
    assert kinds == [(T.SEND_RECEIPT, 0), (T.SEND_ERROR, 1), (T.SEND_RECEIPT, 2),
                     (T.SEND_RECEIPT, 4), (T.SEND_RECEIPT, 5), (T.SEND_RECEIPT, 6)]
    assert answers[1].send_error.error == ServerError.NotAllowedError
    entry_ids = [a.send_receipt.message_id.entryId for a in answers if a.type == T.SEND_RECEIPT]
    assert entry_ids == sorted(entry_ids) and len(set(entry_ids)) == 5
    stored = broker.call(lambda: broker.service.topics[TOPIC].meters.entries_added_counter)
    assert stored == 5


def test_one_read_with_the_sends_of_two_producers_answers_each_in_its_order(
        broker: Any) -> None:
    # a read of one producer's SENDs alone is handed over whole; one that mixes producers
    # (or holds another command) still reaches each producer with its own SENDs, in order
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        assert raw.create_producer(TOPIC, 1, name="one").type == T.PRODUCER_SUCCESS
        assert raw.create_producer(TOPIC, 2, name="two").type == T.PRODUCER_SUCCESS
        alone = [C.encode_send(1, seq, make_entry(b"a", sequence_id=seq, producer_name="one"))
                 for seq in range(3)]
        raw.send(b"".join(alone))
        first = [raw.recv_command() for _ in alone]
        assert [(a.send_receipt.producer_id, a.send_receipt.sequence_id) for a in first] == [
            (1, 0), (1, 1), (1, 2)]
        mixed = []
        for seq in range(3, 7):
            mixed.append(C.encode_send(1, seq, make_entry(b"a", sequence_id=seq,
                                                          producer_name="one")))
            mixed.append(C.encode_send(2, seq - 3, make_entry(b"b", sequence_id=seq - 3,
                                                              producer_name="two")))
        raw.send(b"".join(mixed))
        answers = [raw.recv_command() for _ in mixed]
    assert all(a.type == T.SEND_RECEIPT for a in answers)
    got = [(a.send_receipt.producer_id, a.send_receipt.sequence_id) for a in answers]
    assert [seq for pid, seq in got if pid == 1] == [3, 4, 5, 6]
    assert [seq for pid, seq in got if pid == 2] == [0, 1, 2, 3]


def _singles() -> list[bytes]:
    """Entries of one message that are not plain: delayed, keyed, a tombstone, a batch of
    one, the chunks of a message, and ones the scan declines or check_publish refuses."""
    at = 1_900_000_000_000
    return [
        make_entry(b"d" * 40, deliver_at_time=at),
        make_entry(b"d" * 200, deliver_at_time=at),
        make_entry(b"k", partition_key="key", deliver_at_time=at + 1),
        make_entry(b"", partition_key="key"),                      # a tombstone
        make_entry(b"o", partition_key="k2", ordering_key=b"o"),   # keyed, no delay
        make_entry(b"p", deliver_at_time=at, schema_version=b"\x01"),
        make_entry(b"", deliver_at_time=-5),
        make_batch_entry([b"one"], deliver_at_time=at),            # a batch of one
        make_batch_entry([b"m1", b"m2"]),                          # two messages: no
        make_entry(b"c", chunk_id=0, num_chunks_from_msg=2, total_chunk_msg_size=2,
                   uuid="u"),                                       # a chunk, not the last
        make_entry(b"c", chunk_id=1, num_chunks_from_msg=2, total_chunk_msg_size=2,
                   uuid="u"),                                       # the last chunk
        make_entry(b"z" * 9, compression=pb.LZ4, uncompressed_size=5,
                   deliver_at_time=at),                             # compressed
        make_entry(b"q", deliver_at_time=at, replicated_from="elsewhere"),
    ]


def test_the_single_bound_is_exactly_where_check_publish_passes_one_message_unchanged(
        broker: Any) -> None:
    """single_message takes an entry only where check_publish would return it unchanged as one
    message, not a chunk, and it notes the same deliver time check_publish notes; in every
    state where check_publish acts on a delayed entry (the max-delay guard among them) the
    single bound is -1."""
    _create_topic(broker)

    def probe() -> list[tuple[str, tuple[int, int], list[str], int]]:
        topic = broker.service.topics[TOPIC]
        topic.delivery.resolved = topic.delivery.delay_policy()
        out = []
        for name, changes in _states(topic.delivery.resolved):
            with _in_state(topic, changes):
                bounds = topic.send_bounds()
                assert bounds.single in (bounds.plain, -1)
                assert bounds.single <= bounds.plain
                taken = 0
                verdicts = []
                for entry in _singles():
                    topic.checked_times.forget()
                    verdict = _verdict(topic, entry)
                    noted = (list(topic.checked_times.entries),
                             list(topic.checked_times.varints))
                    verdicts.append(verdict)
                    topic.checked_times.forget()
                    if len(entry) > bounds.single:
                        continue
                    if single_message(entry, bounds):  # the rule the producer relies on
                        taken += 1
                        assert verdict == "unchanged", (name, entry)
                        assert (topic.checked_times.entries,
                                topic.checked_times.varints) == noted, (name, entry)
                    else:
                        assert not topic.checked_times
                    topic.checked_times.forget()
                out.append((name, (bounds.plain, bounds.single), verdicts, taken))
        return out

    results = {name: (bounds, verdicts, taken)
               for name, bounds, verdicts, taken in broker.call(probe)}
    bounds, verdicts, taken = results["default"]
    assert bounds[1] == bounds[0] > 500
    # the delayed, keyed, tombstone, batch-of-one, last-chunk and other one-message layouts
    assert taken == 11
    assert verdicts.count("unchanged") == 11     # the two-message batch and the first chunk
    # max delay: every delayed entry must meet the guard
    bounds, _, taken = results["max delay"]
    assert bounds[0] > 500 and bounds[1] == -1 and taken == 0
    assert results["delivery off, max delay"][0] == results["default"][0]
    assert results["maxMessageSize 100"][0] == (104, 104)
    for name in ("encryption required", "shadow", "terminated", "fixed delay"):
        assert results[name][0] == (-1, -1), name


def test_one_run_of_delayed_keyed_and_plain_sends_is_answered_in_order_with_known_times(
        broker: Any) -> None:
    """Delayed and keyed SENDs taken on single_message in one run with plain ones: every
    receipt in order, and the run's deliver times known to the dispatchers as check_publish
    would have noted them."""
    at = int(time.time() * 1000) + 3_600_000
    sends = [
        make_entry(b"a", sequence_id=0),
        make_entry(b"b", sequence_id=1, deliver_at_time=at),
        make_entry(b"c", sequence_id=2, partition_key="k", deliver_at_time=at + 1),
        make_entry(b"", sequence_id=3, partition_key="k"),
        make_entry(b"e", sequence_id=4),
        make_entry(b"f", sequence_id=5, deliver_at_time=at + 2),
    ]
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        assert raw.create_producer(TOPIC, 3, name="singles").type == T.PRODUCER_SUCCESS
        raw.send(b"".join(C.encode_send(3, seq, entry) for seq, entry in enumerate(sends)))
        answers = [raw.recv_command() for _ in sends]
    assert [(a.type, a.send_receipt.sequence_id) for a in answers] == [
        (T.SEND_RECEIPT, seq) for seq in range(len(sends))]
    ids = [(a.send_receipt.message_id.ledgerId, a.send_receipt.message_id.entryId)
           for a in answers]
    assert len(set(ids)) == len(ids) and ids == sorted(ids)

    def known() -> list[int]:
        topic = broker.service.topics[TOPIC]
        times, n = topic.replace_by_key.known_times.run_from(ids[0][0], ids[0][1], len(ids))
        assert not topic.checked_times      # everything noted was taken by the append
        return list(times[:n])

    assert known() == [UNKNOWN, at, at + 1, UNKNOWN, UNKNOWN, at + 2]
