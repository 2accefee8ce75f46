"""The error hierarchy: wire codes, the fatal/request split and the code registry."""

from __future__ import annotations

import pytest

from protocol import errors
from protocol import pulsar_pb as pb
from protocol.errors import (
    ConnectionFatalError,
    ForeignProtocolError,
    FrameTooLargeError,
    MalformedEntryError,
    MalformedFrameError,
    ProtocolError,
    RequestError,
    ServerError,
    error_for_code,
)


def test_server_error_enum_equals_the_protobuf_enum() -> None:
    wire = {value.name: value.number for value in pb.ServerError.DESCRIPTOR.values}
    assert {member.name: member.value for member in ServerError} == wire


def test_fatal_and_request_errors_are_disjoint_protocol_errors() -> None:
    for cls in (FrameTooLargeError, ForeignProtocolError, MalformedFrameError):
        assert issubclass(cls, ConnectionFatalError)
        assert not issubclass(cls, RequestError)
    assert issubclass(ConnectionFatalError, ProtocolError)
    assert issubclass(RequestError, ProtocolError)
    assert not issubclass(RequestError, ConnectionFatalError)


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (errors.NotAllowedError, ServerError.NotAllowedError),
        (errors.TopicNotFoundError, ServerError.TopicNotFound),
        (errors.SubscriptionNotFoundError, ServerError.SubscriptionNotFound),
        (errors.ConsumerBusyError, ServerError.ConsumerBusy),
        (errors.ProducerBusyError, ServerError.ProducerBusy),
        (errors.ServiceNotReadyError, ServerError.ServiceNotReady),
        (errors.PersistenceError, ServerError.PersistenceError),
        (errors.InvalidTopicNameError, ServerError.InvalidTopicName),
        (errors.ChecksumError, ServerError.ChecksumError),
        (errors.MetadataError, ServerError.MetadataError),
        (errors.ConsumerNotFoundError, ServerError.ConsumerNotFound),
        (errors.UnknownServerError, ServerError.UnknownError),
        (errors.IncompatibleSchemaError, ServerError.IncompatibleSchema),
    ],
)
def test_request_error_subclass_carries_its_fixed_code(cls: type[RequestError], code: ServerError) -> None:
    exc = cls("why")
    assert exc.code is code
    assert exc.message == "why"
    assert str(exc) == "why"
    rebuilt = error_for_code(int(code), "again")
    assert type(rebuilt) is cls
    assert rebuilt.code is code


def test_unmapped_code_gives_the_base_request_error_with_that_code() -> None:
    exc = error_for_code(ServerError.TooManyRequests, "slow down")
    assert type(exc) is RequestError
    assert exc.code is ServerError.TooManyRequests


def test_request_error_accepts_an_explicit_code() -> None:
    exc = RequestError("no", code=ServerError.ProducerFenced)
    assert exc.code is ServerError.ProducerFenced
    assert "ProducerFenced" in repr(exc)


def test_malformed_entry_answers_with_checksum_error() -> None:
    exc = MalformedEntryError("bad")
    assert isinstance(exc, RequestError)
    assert exc.code is ServerError.ChecksumError


def test_foreign_protocol_error_is_a_frame_too_large_error() -> None:
    exc = ForeignProtocolError("tls", 0x16030100, 100)
    assert isinstance(exc, FrameTooLargeError)
    assert exc.detected == "tls"
    assert exc.size == 0x16030100
    assert exc.limit == 100
    assert "TLS" in str(exc)
