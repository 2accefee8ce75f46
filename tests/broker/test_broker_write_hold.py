"""While the store tells a group commit's outcomes, every connection's frames are held and then
written once: a SEND_RECEIPT and the MESSAGE its entry made deliverable to a consumer on the
same connection leave in one write (broker/net/output.py, storage/sync_stage.py).
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

from broker_rawclient import RawClient, make_entry

from broker.net.output import Output, WriteHold
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.frames import NEED_DATA, FrameDecoder
from storage.store import SegmentStore

T = pb.BaseCommand


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def writelines(self, parts: list[bytes]) -> None:
        self.writes.append(b"".join(parts))

    def is_closing(self) -> bool:
        return self.closing


def _output(hold: WriteHold) -> tuple[Output, RecordingTransport]:
    output = Output(asyncio.get_running_loop(), 1 << 30, hold)
    transport = RecordingTransport()
    output.transport = transport  # type: ignore[assignment]
    return output, transport


async def test_held_frames_leave_in_one_write_per_connection_at_the_end() -> None:
    hold = WriteHold()
    one, wire_one = _output(hold)
    two, wire_two = _output(hold)
    hold.begin()
    one.write(b"receipt")
    two.write(b"other")
    one.writelines([b"head", b"entry"])
    assert wire_one.writes == [] and wire_two.writes == []
    hold.end()
    assert wire_one.writes == [b"receipthead" + b"entry"]
    assert wire_two.writes == [b"other"]
    one.write(b"later")  # no hold: the first frame of an iteration goes out at once again
    assert wire_one.writes[-1] == b"later"
    await asyncio.sleep(0)
    assert len(wire_one.writes) == 2


async def test_a_burst_under_way_keeps_its_order_and_its_flush() -> None:
    hold = WriteHold()
    output, wire = _output(hold)
    output.write(b"a")  # at once; its flush is scheduled
    output.write(b"b")  # queued for that flush
    hold.begin()
    output.write(b"c")
    hold.end()
    await asyncio.sleep(0)
    assert b"".join(wire.writes) == b"abc"
    assert wire.writes[0] == b"a"


async def test_a_connection_closed_while_held_writes_nothing() -> None:
    hold = WriteHold()
    output, wire = _output(hold)
    other, other_wire = _output(hold)
    hold.begin()
    output.write(b"receipt")
    other.write(b"message")
    output.close()
    hold.end()
    assert wire.writes == []
    assert other_wire.writes == [b"message"]


class RecordingScope:
    def __init__(self) -> None:
        self.events: list[str] = []

    def begin(self) -> None:
        self.events.append("begin")

    def end(self) -> None:
        self.events.append("end")


async def test_the_store_tells_each_group_commit_inside_its_completion_scope(
        tmp_path: pathlib.Path) -> None:
    scope = RecordingScope()
    store = await SegmentStore.open(tmp_path / "store", completion_scope=scope)
    try:
        ledger = await store.open_ledger("public/default/hold")
        ledger.add_listener(lambda position: scope.events.append(f"durable {position.entry_id}"))
        position = await ledger.append(b"entry")
        assert position.entry_id == 0
        assert scope.events == ["begin", "durable 0", "end"]
    finally:
        await store.close()


def _frames(data: bytes) -> list[int]:
    decoder = FrameDecoder()
    decoder.receive_data(data)
    types = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        types.append(frame.command.type)  # type: ignore[union-attr]
    return types


def test_receipt_and_the_message_it_made_deliverable_share_one_write(broker: Any) -> None:
    topic = "persistent://public/default/write-hold"
    written: list[bytes] = []
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        assert raw.create_producer(topic).type == T.PRODUCER_SUCCESS
        assert raw.request(C.encode_subscribe(topic, "s", pb.Shared, 1, 50)).type == T.SUCCESS

        async def record() -> None:
            (connection,) = broker.server.connections
            transport = connection._output.transport
            real_write, real_writelines = transport.write, transport.writelines

            def write(data: bytes) -> None:
                written.append(bytes(data))
                real_write(data)

            def writelines(parts: list[bytes]) -> None:
                written.append(b"".join(parts))
                real_writelines(parts)

            connection._output.transport = type("Recorder", (), {
                "write": staticmethod(write), "writelines": staticmethod(writelines),
                "is_closing": staticmethod(transport.is_closing)})()

        broker.call(record)
        raw.send(C.encode_flow(1, 10))
        raw.send(C.encode_send(1, 0, make_entry(b"payload", sequence_id=0)))
        received = {raw.recv_command().type, raw.recv_command().type}
        assert received == {T.SEND_RECEIPT, T.MESSAGE}
    assert [sorted(_frames(w)) for w in written if T.MESSAGE in _frames(w)] == [
        sorted([T.SEND_RECEIPT, T.MESSAGE])]
