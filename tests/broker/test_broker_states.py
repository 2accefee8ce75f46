"""Every (state, command type) pair of the connection state table, without sockets.

Handlers are replaced by recorders: this pins what the table does with each pair (which
handler, which next state, or the ERROR/close/drop rule). What the handlers themselves do is
tested over real sockets in test_broker_wire.py and with the official client.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.net.connection import ServerConnection, StateTables, build_tables
from broker.net.states import (
    ALL_COMMAND_TYPES,
    LIFECYCLE,
    TRANSITIONS,
    ConnState,
    Lifecycle,
    Unexpected,
    request_id_of,
    send_verdict,
    subcommand_field,
)
from protocol import pulsar_pb as pb
from protocol.client_commands import encode_send
from protocol.errors import ServerError
from protocol.frames import Frame, FrameDecoder
from protocol.metadata import encode_entry
from protocol.send_path import SendFrame

T = pb.BaseCommand


class FakeTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.reading = True

    def write(self, data: bytes) -> None:
        self.written += data

    def writelines(self, parts: list[bytes]) -> None:
        for part in parts:
            self.written += part

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 6650)}.get(name, default)

    def frames(self) -> list[pb.BaseCommand]:
        dec = FrameDecoder()
        dec.receive_data(bytes(self.written))
        out = []
        while True:
            f = dec.next_frame()
            if not isinstance(f, Frame):
                return out
            out.append(f.command)


def make_connection(tables: StateTables | None = None,
                    **config: Any) -> tuple[ServerConnection, FakeTransport]:
    service = SimpleNamespace(config=BrokerConfig(**config), loop=asyncio.get_running_loop(),
                              closing=False)
    owner = SimpleNamespace(connection_opened=lambda c: None, connection_closed=lambda c: None)
    conn = ServerConnection(service, owner, tables=tables)  # type: ignore[arg-type]
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def command_of(cmd_type: int, request_id: int = 7) -> pb.BaseCommand:
    cmd = T(type=cmd_type)  # type: ignore[arg-type]
    sub = getattr(cmd, subcommand_field(cmd_type))
    sub.SetInParent()
    if "request_id" in sub.DESCRIPTOR.fields_by_name:
        sub.request_id = request_id
    return cmd


def recording_tables(calls: list[str]) -> StateTables:
    """The broker's table with every handler replaced by one that records its name."""
    fake = {}
    for key, transition in TRANSITIONS.items():
        def record(self: ServerConnection, frame: Frame,
                   name: str = transition.handler.__name__) -> None:
            calls.append(name)
        fake[key] = (record, transition.next_state)
    return build_tables(fake)


def test_every_handler_in_the_table_is_a_command_handler_function() -> None:
    for (_, cmd_type), transition in TRANSITIONS.items():
        assert callable(transition.handler)
        assert transition.handler.__module__ == "broker.net.handlers"
        assert transition.handler.__name__.startswith("on_"), T.Type.Name(cmd_type)


@pytest.mark.parametrize("state", list(ConnState), ids=lambda s: s.name)
@pytest.mark.parametrize("cmd_type", ALL_COMMAND_TYPES, ids=lambda t: T.Type.Name(t))
async def test_every_state_and_command_pair_follows_the_table(state: ConnState, cmd_type: int) -> None:
    recorded: list[str] = []
    conn, transport = make_connection(recording_tables(recorded))
    conn.state = state
    cmd = command_of(cmd_type)
    conn._dispatch(Frame(cmd))
    conn._output.flush()
    transition = TRANSITIONS.get((state, cmd_type))
    if transition is not None:
        assert recorded == [transition.handler.__name__]
        assert conn.state is transition.next_state
        assert not transport.closed
    elif state is ConnState.CLOSED:
        assert recorded == [] and transport.written == b""  # dropped
    elif state in (ConnState.CONNECTING, ConnState.AUTHENTICATING):
        assert recorded == []
        assert transport.closed and transport.written == b""  # nothing may precede CONNECTED
    elif request_id_of(cmd) is not None:
        assert recorded == [] and not transport.closed
        [answer] = transport.frames()
        assert answer.type == T.ERROR
        assert answer.error.request_id == 7
        assert answer.error.error == ServerError.NotAllowedError
    else:
        assert recorded == [] and transport.closed


async def test_connect_answers_connected_with_min_protocol_version() -> None:
    for client_version, expected in ((25, 20), (20, 20), (13, 13)):
        conn, transport = make_connection()
        cmd = T(type=T.CONNECT)
        cmd.connect.client_version = "x"
        cmd.connect.protocol_version = client_version
        conn._dispatch(Frame(cmd))
        conn._output.flush()
        [answer] = transport.frames()
        assert answer.type == T.CONNECTED
        assert answer.connected.protocol_version == expected
        assert answer.connected.server_version.startswith("Horae-")
        assert answer.connected.max_message_size == 5 * 1024 * 1024
        assert conn.state is ConnState.CONNECTED


async def test_pending_publishes_pause_reading_and_resume_at_half() -> None:
    conn, transport = make_connection(max_pending_publish_requests_per_connection=10)
    for _ in range(9):
        conn.producer_side.publish_started()
    assert transport.reading
    conn.producer_side.publish_started()
    assert not transport.reading and conn.throttle.paused
    for _ in range(4):
        conn.producer_side.publish_finished()
    assert not transport.reading
    conn.producer_side.publish_finished()  # 5 left = half of 10
    assert transport.reading and not conn.throttle.paused


async def test_first_write_of_an_iteration_goes_out_at_once_the_rest_coalesced() -> None:
    conn, transport = make_connection()
    calls = []
    original = transport.write
    transport.write = lambda data: (calls.append(len(data)), original(data))  # type: ignore[method-assign]
    conn.write(b"a" * 10)
    assert calls == [10]  # a lone receipt does not wait for the next loop iteration
    for _ in range(4):
        conn.write(b"x" * 10)
    assert calls == [10]
    await asyncio.sleep(0)
    assert calls == [10, 40]
    assert bytes(transport.written) == b"a" * 10 + b"x" * 40  # in order
    conn.write(b"b" * 10)  # the flush ran: the next iteration's first frame goes at once
    assert calls == [10, 40, 10]


class RecordingProducer:
    """Stands for a producer: records the SENDs handed to it, call by call."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []

    def on_sends(self, sends: list[Any]) -> None:
        self.calls.append(list(sends))


def _entry(payload: bytes = b"x") -> bytes:
    return encode_entry(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1),
                        payload)


async def test_every_send_takes_one_path_hand_parsed_or_not() -> None:
    conn, transport = make_connection()
    conn.state = ConnState.CONNECTED
    producer = RecordingProducer()
    conn.producer_side.producers[1] = producer  # type: ignore[assignment]
    entry = _entry()
    # One read: two hand-parsed SENDs, one without a checksum (the hand parser declines it),
    # then one more: all four go to the producer together, in order, as SendFrames.
    conn.data_received(encode_send(1, 0, entry) + encode_send(1, 1, entry)
                       + encode_send(1, 2, entry, checksum=False) + encode_send(1, 3, entry))
    [sends] = producer.calls
    assert all(type(s) is SendFrame for s in sends)
    assert [(s.sequence_id, s.checksum_valid, s.entry) for s in sends] == [
        (0, True, entry), (1, True, entry), (2, True, entry), (3, True, entry)]
    assert not transport.closed


@pytest.mark.parametrize("state", list(ConnState), ids=lambda s: s.name)
async def test_a_send_outside_connected_or_for_an_unknown_producer_gets_the_send_verdict(
        state: ConnState) -> None:
    conn, transport = make_connection()
    conn.state = state
    conn.data_received(encode_send(9, 0, _entry()))
    assert send_verdict(state) is (None if state is ConnState.CONNECTED
                                   else Unexpected.DROP if state is ConnState.CLOSED
                                   else Unexpected.CLOSE)
    # SEND has no request id: nothing can be answered; the connection closes, or, once
    # closed, the frame is dropped.
    assert transport.written == b""
    assert transport.closed is (state is not ConnState.CLOSED)


def test_every_lifecycle_move_is_in_the_table() -> None:
    assert LIFECYCLE[(ConnState.AUTHENTICATING, Lifecycle.HANDSHAKE_DONE)] is ConnState.CONNECTED
    for state in ConnState:
        if state is not ConnState.CLOSED:
            assert LIFECYCLE[(state, Lifecycle.CLOSED)] is ConnState.CLOSED
    assert (ConnState.CLOSED, Lifecycle.HANDSHAKE_DONE) not in LIFECYCLE


async def test_a_handshake_done_after_the_close_leaves_the_connection_closed() -> None:
    conn, _ = make_connection()
    conn.state = ConnState.AUTHENTICATING
    conn.close("test")
    conn.handshake_done()
    assert conn.state is ConnState.CLOSED and conn.is_closed
