"""The decoder's UTF-8 walk skips sub-messages that cannot hold a string (an ACK's thousand
MessageIdData) and still finds an invalid string wherever one can be."""

from __future__ import annotations

import struct

import pytest

from protocol import commands as c
from protocol import pulsar_pb as pb
from protocol.errors import MalformedFrameError
from protocol.frames import NEED_DATA, FrameDecoder

T = pb.BaseCommand


def ack_with_property(key: str, ids: int) -> bytes:
    cmd = pb.BaseCommand(type=T.ACK)
    cmd.ack.consumer_id = 1
    cmd.ack.ack_type = pb.CommandAck.Individual
    for entry_id in range(ids):
        cmd.ack.message_id.add(ledgerId=12, entryId=entry_id)
    cmd.ack.properties.add(key=key, value=1)
    return cmd.SerializeToString()


def frame_of(command: bytes) -> bytes:
    return struct.pack(">II", len(command) + 4, len(command)) + command


def test_ack_of_many_ids_with_an_invalid_utf8_property_key_is_refused() -> None:
    command = ack_with_property("k", 1000).replace(b"\x0a\x01k\x10\x01", b"\x0a\x01\xff\x10\x01")
    decoder = FrameDecoder()
    decoder.receive_data(frame_of(command))
    with pytest.raises(MalformedFrameError) as caught:
        decoder.next_frame()
    assert "pulsar.proto.KeyLongValue.key" in str(caught.value)


def test_ack_of_many_ids_decodes_with_all_ids() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(c.encode_ack(3, [(12, i) for i in range(1000)]))
    frame = decoder.next_frame()
    assert frame is not NEED_DATA
    assert [m.entryId for m in frame.command.ack.message_id] == list(range(1000))


def test_valid_property_key_passes() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(frame_of(ack_with_property("k", 3)))
    frame = decoder.next_frame()
    assert frame is not NEED_DATA
    assert frame.command.ack.properties[0].key == "k"
