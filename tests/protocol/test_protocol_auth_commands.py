"""AUTH_CHALLENGE / AUTH_RESPONSE encoders, pinned byte for byte to hand-written protobuf wire bytes."""

from __future__ import annotations

import struct

from protocol import pulsar_pb as pb
from protocol.auth_commands import (
    REFRESH_AUTH_DATA,
    auth_response_fields,
    encode_auth_challenge,
    encode_auth_response,
)
from protocol.frames import NEED_DATA, Frame, FrameDecoder


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2); all lengths here are < 128."""
    assert len(payload) < 128
    return bytes(((number << 3) | 2, len(payload))) + payload


def _varint_field(number: int, value: int) -> bytes:
    assert value < 128
    return bytes(((number << 3) | 0, value))


def _frame(command: bytes) -> bytes:
    return struct.pack(">II", len(command) + 4, len(command)) + command


def _decode(data: bytes) -> Frame:
    decoder = FrameDecoder()
    decoder.receive_data(data)
    frame = decoder.next_frame()
    assert isinstance(frame, Frame)
    assert decoder.next_frame() is NEED_DATA
    return frame


def test_auth_challenge_is_byte_exact() -> None:
    auth_data = _field(1, b"token") + _field(2, b"PulsarAuthRefresh")
    inner = _field(1, b"Horae-1") + _field(2, auth_data) + _varint_field(3, 20)
    # BaseCommand: type = 36 (field 1, varint), authChallenge = field 36 (tag 36<<3|2 = 290 -> 2 bytes)
    command = _varint_field(1, 36) + bytes((0xA2, 0x02, len(inner))) + inner
    assert encode_auth_challenge("Horae-1", "token", REFRESH_AUTH_DATA, 20) == _frame(command)


def test_auth_response_is_byte_exact_and_reads_back() -> None:
    auth_data = _field(1, b"token") + _field(2, b"abc.def")
    inner = _field(1, b"cli") + _field(2, auth_data) + _varint_field(3, 20)
    # authResponse = field 37: tag (37<<3|2) = 298 = 0xAA 0x02
    command = _varint_field(1, 37) + bytes((0xAA, 0x02, len(inner))) + inner
    data = encode_auth_response("cli", "token", b"abc.def", 20)
    assert data == _frame(command)
    frame = _decode(data)
    assert frame.command.type == pb.BaseCommand.AUTH_RESPONSE
    assert auth_response_fields(frame.command.authResponse) == ("token", b"abc.def")


def test_auth_response_without_credentials_reads_as_none() -> None:
    assert auth_response_fields(pb.CommandAuthResponse()) == (None, b"")
    msg = pb.CommandAuthResponse()
    msg.response.auth_data = b"x"
    assert auth_response_fields(msg) == (None, b"x")
