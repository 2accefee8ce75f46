"""Validation of a decoded ``BaseCommand`` (rule 3 of :mod:`protocol.frames`).

Theory of operation
-------------------
A command is valid when its ``type`` is known, the sub-message for that type is present (PING
and PONG may omit their empty one), every required field is set, and every string field holds
valid UTF-8. upb hands out a proto2 string field holding invalid UTF-8 as *bytes*, so commands
that can carry a string get a walk over their set fields, which skips sub-messages that cannot
hold one (an ACK's MessageIdData), so that the broker only ever sees ``str``. The SEND hot path
proves its required fields from the serialized bytes with one regex (:data:`send_is_complete`)
instead. Every violation raises :class:`~protocol.errors.MalformedFrameError`; a ``type``
number the proto does not declare (protobuf keeps it among the unknown fields) raises its
subclass :class:`~protocol.errors.UnknownCommandTypeError`, naming the number. Used by
:class:`protocol.frames.FrameDecoder`; sans-IO.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from google.protobuf import unknown_fields
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from protocol import pulsar_pb as pb
from protocol.errors import MalformedFrameError, UnknownCommandTypeError

#: BaseCommand.Type value -> name of the sub-message field that must accompany it (Pulsar numbers
#: each sub-message field after its type, so the descriptor gives the map). The one such map:
#: the connection state machine (broker/net/states.py) reads it too.
SUBFIELD_BY_TYPE: Final[Mapping[int, str]] = MappingProxyType({
    value.number: pb.BaseCommand.DESCRIPTOR.fields_by_number[value.number].name
    for value in pb.BaseCommand.Type.DESCRIPTOR.values
})
# Empty sub-messages some clients leave out; the command is still unambiguous.
_OPTIONAL_SUBFIELD: Final = frozenset({pb.BaseCommand.PING, pb.BaseCommand.PONG})


def _has_string_fields(descriptor: Descriptor, seen: frozenset[str] = frozenset()) -> bool:
    if descriptor.full_name in seen:
        return False
    seen = seen | {descriptor.full_name}
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_STRING:
            return True
        if field.type == FieldDescriptor.TYPE_MESSAGE and _has_string_fields(
            field.message_type, seen
        ):
            return True
    return False


def _all_nested(descriptor: Descriptor) -> list[Descriptor]:
    """``descriptor`` and every message type nested in it."""
    found = [descriptor]
    for nested in descriptor.nested_types:
        found += _all_nested(nested)
    return found


# Command types whose sub-message can hold a string somewhere. upb hands out a proto2 string
# field holding invalid UTF-8 as *bytes*; those commands get a walk over their set fields so
# that the broker only ever sees str. SEND, MESSAGE, SEND_RECEIPT and FLOW have no strings and
# skip it (the hot path).
_TYPES_WITH_STRINGS: Final = frozenset(
    number
    for number, name in SUBFIELD_BY_TYPE.items()
    if _has_string_fields(pb.BaseCommand.DESCRIPTOR.fields_by_name[name].message_type)
)


# Message types (by full name) that can hold a string somewhere, for the walk below: an ACK of
# 1,000 message ids must not descend into 1,000 MessageIdData that cannot hold one.
_MESSAGES_WITH_STRINGS: Final = frozenset(
    descriptor.full_name
    for descriptor in pb.DESCRIPTOR.message_types_by_name.values()
    for descriptor in _all_nested(descriptor)
    if _has_string_fields(descriptor)
)


def _invalid_string_field(message: Message) -> str | None:
    """Full name of the first string field holding invalid UTF-8 (returned as bytes), if any."""
    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_STRING:
            for item in value if field.is_repeated else (value,):
                if type(item) is not str:
                    return str(field.full_name)
        elif (
            field.type == FieldDescriptor.TYPE_MESSAGE
            and field.message_type.full_name in _MESSAGES_WITH_STRINGS
        ):
            for item in value if field.is_repeated else (value,):
                found = _invalid_string_field(item)
                if found is not None:
                    return found
    return None


def parse_command(data: bytes | bytearray | memoryview) -> pb.BaseCommand:
    """Parse and validate one serialized ``BaseCommand`` (rule 3 of the module docstring)."""
    try:
        cmd: pb.BaseCommand = _from_string(data)
    except DecodeError as exc:
        raise MalformedFrameError(f"command does not parse as BaseCommand: {exc}") from None
    validate_command(cmd)
    return cmd


def validate_command(cmd: pb.BaseCommand) -> None:
    """Rule 3 on a parsed command; raises MalformedFrameError."""
    if not cmd.HasField("type"):
        # An unknown enum value of a proto2 field lands in the unknown fields: type unset.
        type_number = _unknown_type_number(cmd)
        if type_number is None:
            raise MalformedFrameError("command has no type")
        raise UnknownCommandTypeError(type_number)
    field = SUBFIELD_BY_TYPE[cmd.type]
    if not cmd.HasField(field) and cmd.type not in _OPTIONAL_SUBFIELD:
        raise MalformedFrameError(f"command of type {cmd.type} lacks its '{field}' field")
    if not cmd.IsInitialized():
        raise MalformedFrameError(
            f"command of type {cmd.type} misses required fields: "
            + ", ".join(cmd.FindInitializationErrors())
        )
    if cmd.type in _TYPES_WITH_STRINGS:
        bad = _invalid_string_field(cmd)
        if bad is not None:
            raise MalformedFrameError(f"string field {bad} is not valid UTF-8")


_TYPE_FIELD: Final = pb.BaseCommand.DESCRIPTOR.fields_by_name["type"].number
_VARINT: Final = 0


def _unknown_type_number(cmd: pb.BaseCommand) -> int | None:
    """The ``type`` value protobuf kept among the unknown fields (not a declared command type)."""
    for item in unknown_fields.UnknownFieldSet(cmd):
        if item.field_number == _TYPE_FIELD and item.wire_type == _VARINT:
            return int(item.data)
    return None


_from_string: Final = pb.BaseCommand.FromString
_SEND: Final = pb.BaseCommand.SEND


def _send_fast_path_pattern() -> re.Pattern[bytes]:
    """A regex that proves, in one C call, that a *successfully parsed* command whose final
    type is SEND has every required field, for the byte layout every client produces::

        08 06             type = SEND
        32 L              send = sub-message of L bytes (L < 128)
        08 <varint:k>     producer_id, a varint of k bytes (k = 1..10)
        10 ...            sequence_id, still inside the sub-message: 5 + k < 4 + L
        and no 0x4a byte anywhere (send.message_id, whose own fields are required)

    The caller also requires ``4 + L == len(raw)``: no other field follows, so no other
    sub-message could hide a missing required field. A non-match means "run the generic
    check", never "invalid". The parse having succeeded guarantees the sequence_id varint is
    complete inside the sub-message.
    """
    alternatives = [
        b"["
        + re.escape(bytes([k + 2]))
        + rb"-\x7f]\x08"
        + rb"[\x80-\xff]" * (k - 1)
        + rb"[\x00-\x7f]\x10"
        for k in range(1, 11)
    ]
    return re.compile(rb"(?s)(?!.*\x4a)\x08\x06\x32(?:" + b"|".join(alternatives) + b")")


send_is_complete: Final = _send_fast_path_pattern().match
"""``send_is_complete(raw)`` is a match when a parsed SEND's bytes prove its required fields."""


__all__ = ["parse_command", "send_is_complete", "validate_command"]
