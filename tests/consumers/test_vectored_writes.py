"""Large entries go to the socket by reference: a MESSAGE's head and its entry are separate
buffers of one vectored write (``transport.writelines``), never copied into a frame or a
joined write; smaller frames are still joined. The bytes on the wire are the same frames,
in the same order, as with plain writes.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import broker.subscriptions.consumer as consumer_module
from broker.net.consumers import ConsumerSide
from broker.net.output import BY_REFERENCE_BYTES, Output
from broker.subscriptions.consumer import BY_REFERENCE_BYTES as CONSUMER_BY_REFERENCE_BYTES
from broker.subscriptions.consumer import Consumer
from protocol import commands as C
from protocol import entry_metadata, send_accel
from protocol import pulsar_pb as pb
from protocol.frames import NEED_DATA, Frame, FrameDecoder
from protocol.hot_commands import encode_message_run_py
from protocol.metadata import encode_entry
from storage.positions import Position

BIG = b"B" * (BY_REFERENCE_BYTES + 1)
BIG2 = b"b" * (3 * BY_REFERENCE_BYTES)


class RecordingTransport:
    """Keeps every call and the buffer objects it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[bytes]]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", [data]))

    def writelines(self, parts: list[bytes]) -> None:
        self.calls.append(("writelines", list(parts)))

    def is_closing(self) -> bool:
        return self.closing

    def stream(self) -> bytes:
        return b"".join(b"".join(parts) for _, parts in self.calls)


def _output(high_water_mark: int = 1 << 30) -> tuple[Output, RecordingTransport]:
    output = Output(asyncio.get_running_loop(), high_water_mark)
    transport = RecordingTransport()
    output.transport = transport  # type: ignore[assignment]
    return output, transport


async def test_first_writelines_of_an_iteration_goes_out_at_once_by_reference() -> None:
    output, transport = _output()
    output.writelines([b"head", BIG])
    assert transport.calls == [("writelines", [b"head", BIG])]
    assert transport.calls[0][1][1] is BIG
    await asyncio.sleep(0)  # the scheduled flush has nothing queued
    assert len(transport.calls) == 1


async def test_queued_buffers_join_only_between_large_ones() -> None:
    output, transport = _output()
    output.write(b"first")           # goes out at once, schedules the flush
    output.write(b"s1")
    output.writelines([b"h1", BIG])
    output.write(b"s2")
    output.writelines([b"h2", BIG2, b"h3"])
    assert len(transport.calls) == 1
    await asyncio.sleep(0)
    assert len(transport.calls) == 2
    method, parts = transport.calls[1]
    assert method == "writelines"
    assert parts == [b"s1h1", BIG, b"s2h2", BIG2, b"h3"]
    assert parts[1] is BIG and parts[3] is BIG2
    assert transport.stream() == b"first" + b"s1h1" + BIG + b"s2h2" + BIG2 + b"h3"


async def test_small_buffers_alone_are_still_one_joined_write() -> None:
    output, transport = _output()
    output.write(b"a")
    output.write(b"b")
    output.write(b"c")
    await asyncio.sleep(0)
    assert transport.calls == [("write", [b"a"]), ("write", [b"bc"])]


async def test_queued_large_buffers_past_the_high_water_mark_go_out_at_once() -> None:
    output, transport = _output(high_water_mark=2 * BY_REFERENCE_BYTES)
    output.write(b"x")
    output.writelines([b"h", BIG])
    assert len(transport.calls) == 1  # below the mark: queued
    output.writelines([b"h", BIG2])
    assert len(transport.calls) == 2  # past it: written without waiting for the flush
    assert transport.calls[1] == ("writelines", [b"h", BIG, b"h", BIG2])
    await asyncio.sleep(0)
    assert len(transport.calls) == 2
    assert transport.stream() == b"x" + b"h" + BIG + b"h" + BIG2


async def test_closed_output_writes_nothing_and_drops_the_queue() -> None:
    output, transport = _output()
    output.write(b"x")
    output.writelines([b"h", BIG])
    output.close()
    output.writelines([b"h", BIG])
    await asyncio.sleep(0)
    assert transport.calls == [("write", [b"x"])]


class RecordingConnection:
    protocol_version = 20
    remote_address = "127.0.0.1:1"
    client_version = "test"
    writes_paused = False

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[bytes]]] = []

    def write(self, data: bytes) -> None:
        self.calls.append(("write", [data]))

    def writelines(self, parts: list[bytes]) -> None:
        self.calls.append(("writelines", list(parts)))

    def frames(self) -> list[Frame]:
        decoder = FrameDecoder()
        decoder.receive_data(b"".join(b"".join(parts) for _, parts in self.calls))
        out = []
        while (frame := decoder.next_frame()) is not NEED_DATA:
            out.append(frame)
        return out


def _entry(payload: bytes) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0,
                            publish_time=int(time.time() * 1000))
    return encode_entry(md, payload)


def _consumer() -> tuple[Consumer, RecordingConnection]:
    conn = RecordingConnection()
    side = ConsumerSide(conn)  # type: ignore[arg-type]
    consumer = Consumer(side, 7, name="c", sub_type=1)
    consumer.permits = 1000
    return consumer, conn


def test_a_large_entry_is_a_buffer_of_its_own_and_the_frames_decode_in_order() -> None:
    consumer, conn = _consumer()
    small = _entry(b"s" * 100)
    big = _entry(b"L" * CONSUMER_BY_REFERENCE_BYTES)
    big2 = _entry(b"M" * (2 * CONSUMER_BY_REFERENCE_BYTES))
    sent = [small, big, small, big2, small]
    for i, entry in enumerate(sent):
        consumer.send(Position(3, i), entry, messages=1, revision=0, redelivery_count=i % 2)
    consumer.flush()
    assert [method for method, _ in conn.calls] == ["writelines"]
    parts = conn.calls[0][1]
    assert len(parts) == 5  # [small frame + head], big, [small frame + head], big2, small frame
    assert parts[1] is big and parts[3] is big2
    frames = conn.frames()
    assert [f.command.message.message_id.entryId for f in frames] == [0, 1, 2, 3, 4]
    assert [f.entry for f in frames] == sent
    assert all(f.checksum_valid for f in frames)
    assert [f.command.message.redelivery_count for f in frames] == [0, 1, 0, 1, 0]
    assert all(f.command.message.consumer_id == 7 for f in frames)
    # each frame is byte for byte the one encode_message builds
    expected = b"".join(
        C.encode_message(7, 3, i, entry, redelivery_count=i % 2) for i, entry in enumerate(sent))
    assert b"".join(parts) == expected


def test_small_entries_alone_are_one_joined_write() -> None:
    consumer, conn = _consumer()
    entries = [_entry(b"s" * 10), _entry(b"t" * 20)]
    for i, entry in enumerate(entries):
        consumer.send(Position(1, i), entry, messages=1, revision=0)
    consumer.flush()
    assert [method for method, _ in conn.calls] == ["write"]
    assert [f.entry for f in conn.frames()] == entries


def test_dropping_queued_large_frames_leaves_a_plain_write() -> None:
    consumer, conn = _consumer()
    big = _entry(b"L" * CONSUMER_BY_REFERENCE_BYTES)
    small = _entry(b"s" * 10)
    consumer.send(Position(1, 0), big, messages=1, revision=0)
    consumer.send(Position(1, 1), small, messages=1, revision=1)
    assert consumer.drop_queued(lambda revision: revision == 0) == [Position(1, 0)]
    assert consumer.permits == 999
    consumer.flush()
    assert [method for method, _ in conn.calls] == ["write"]
    assert [f.command.message.message_id.entryId for f in conn.frames()] == [1]
    # a later large frame is written by reference again
    consumer.send(Position(1, 2), big, messages=1, revision=1)
    consumer.flush()
    assert conn.calls[-1][0] == "writelines" and conn.calls[-1][1][1] is big


def test_a_flush_writes_the_same_buffers_with_the_c_run_encoder_and_its_reference(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer's queue mixing plain and batch entries, redeliveries, an ack set, stored
    forms with broker entry metadata and large entries: the C run encoder and its Python
    reference write the same calls, the same buffers (large entries by reference) and the
    same bytes, frame for frame what encode_message builds."""
    batch_md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1,
                                  num_messages_in_batch=3)
    batch = encode_entry(batch_md, b"m" * 60)
    big_batch = encode_entry(batch_md, b"n" * CONSUMER_BY_REFERENCE_BYTES)
    small = _entry(b"s" * 100)
    big = _entry(b"L" * CONSUMER_BY_REFERENCE_BYTES)
    stored = entry_metadata.prefix(small, 1_700_000_000_000, 41)
    queue = [  # (entry, messages, redelivery count, ack set)
        (small, 1, 0, None), (batch, 3, 0, None), (big, 1, 0, None), (small, 1, 2, None),
        (batch, 3, 0, [5]), (stored, 1, 0, None), (big_batch, 3, 0, None), (small, 1, 0, None),
        (big, 1, 1, None), (batch, 3, 0, None), (small, 1, 0, None),
    ]

    def flushed() -> tuple[list[tuple[str, list[bytes]]], list[Frame]]:
        consumer, conn = _consumer()
        for i, (entry, messages, redelivered, ack_set) in enumerate(queue):
            consumer.send(Position(3 + i // 6, i), entry, messages=messages, revision=0,
                          redelivery_count=redelivered, ack_set=ack_set)
        consumer.flush()
        for i in range(3):   # runs of plain entries only, small and large
            consumer.send(Position(9, i), [small, big, batch][i], messages=1, revision=0)
        consumer.flush()
        return conn.calls, conn.frames()

    assert consumer_module.encode_message_run is send_accel.encode_message_run
    accelerated = flushed()
    monkeypatch.setattr(consumer_module, "encode_message_run", encode_message_run_py)
    reference = flushed()
    calls, frames = accelerated
    assert [method for method, _ in calls] == ["writelines", "writelines"]
    assert [(m, [len(p) for p in parts]) for m, parts in calls] == \
        [(m, [len(p) for p in parts]) for m, parts in reference[0]]
    assert [b"".join(parts) for _, parts in calls] == [b"".join(p) for _, p in reference[0]]
    for _, parts in calls:   # every large entry went by reference
        assert any(p is big for p in parts) and all(len(p) < 2 * CONSUMER_BY_REFERENCE_BYTES
                                                    for p in parts)
    assert any(p is big_batch for p in calls[0][1])
    expected = [C.encode_message(7, 3 + i // 6, i, entry, redelivery_count=redelivered,
                                 ack_set=ack_set)
                for i, (entry, _, redelivered, ack_set) in enumerate(queue)]
    expected += [C.encode_message(7, 9, i, entry) for i, entry in enumerate([small, big, batch])]
    assert b"".join(b"".join(parts) for _, parts in calls) == b"".join(expected)
    assert [f.entry for f in frames] == [f.entry for f in reference[1]]
    assert all(f.checksum_valid for f in frames)
