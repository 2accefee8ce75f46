"""One error hierarchy for the codec and the broker, mapped to Pulsar's ``ServerError`` codes.

Theory of operation
-------------------
Everything the codec raises derives from :class:`ProtocolError`, split in two:

* :class:`ConnectionFatalError` -- the byte stream itself cannot be trusted any more (a frame
  larger than the limit, a length that points outside its frame, a command that does not parse,
  a TLS handshake or HTTP request sent to the binary port). The connection handler logs it and
  closes the connection; no reply is attempted because framing is lost.
* :class:`RequestError` -- one request failed but the stream is intact. It carries a
  :class:`ServerError` ``code`` and a human ``message``; the connection handler answers with
  ERROR (request-scoped commands) or SEND_ERROR (publishes) and keeps the connection open.

Subclasses of :class:`RequestError` have a fixed code (``TopicNotFoundError`` is always
``TopicNotFound``). :func:`error_for_code` is the one read-only registry from a wire code back
to the exception class, used when a code arrives from elsewhere (e.g. a storage layer result).

Note for the broker: the C++ client (pulsar-client 3.13) treats every SEND_ERROR code except
``ChecksumError`` by closing the connection and re-sending its pending queue (its
``ProducerImpl::handleSendError`` / ``ClientConnection::handleSendError``).
"""

from __future__ import annotations

from enum import IntEnum
from types import MappingProxyType
from typing import ClassVar


class ServerError(IntEnum):
    """Pulsar's ``ServerError`` wire enum (values equal ``pb.ServerError``; a test pins that)."""

    UnknownError = 0
    MetadataError = 1
    PersistenceError = 2
    AuthenticationError = 3
    AuthorizationError = 4
    ConsumerBusy = 5
    ServiceNotReady = 6
    ProducerBlockedQuotaExceededError = 7
    ProducerBlockedQuotaExceededException = 8
    ChecksumError = 9
    UnsupportedVersionError = 10
    TopicNotFound = 11
    SubscriptionNotFound = 12
    ConsumerNotFound = 13
    TooManyRequests = 14
    TopicTerminatedError = 15
    ProducerBusy = 16
    InvalidTopicName = 17
    IncompatibleSchema = 18
    ConsumerAssignError = 19
    TransactionCoordinatorNotFound = 20
    InvalidTxnStatus = 21
    NotAllowedError = 22
    TransactionConflict = 23
    TransactionNotFound = 24
    ProducerFenced = 25


class ProtocolError(Exception):
    """Base of everything the codec raises."""


# --------------------------------------------------------------------------- connection-fatal


class ConnectionFatalError(ProtocolError):
    """The byte stream is unusable: the connection must be closed."""


class FrameTooLargeError(ConnectionFatalError):
    """A frame header declares more bytes than the connection accepts.

    Raised from the 4-byte length alone, before any of the body is buffered.
    """

    def __init__(self, size: int, limit: int, message: str | None = None) -> None:
        self.size = size
        self.limit = limit
        super().__init__(message or f"frame of {size} bytes exceeds the limit of {limit} bytes")


class ForeignProtocolError(FrameTooLargeError):
    """The peer speaks another protocol (TLS, HTTP) on the Pulsar binary port.

    Such a greeting always reads as an absurd frame length (``0x16 0x03 ..`` is ~369 MB,
    ``GET `` ~1.2 GB), so this is a :class:`FrameTooLargeError` with a better diagnosis.
    ``detected`` is ``"tls"`` or ``"http"``.
    """

    def __init__(self, detected: str, size: int, limit: int) -> None:
        self.detected = detected
        hint = {
            "tls": "a TLS ClientHello on the plaintext Pulsar port (client uses pulsar+ssl://?)",
            "http": "an HTTP request on the Pulsar binary port (the HTTP API has its own port)",
        }.get(detected, detected)
        super().__init__(size, limit, f"received {hint}; declared frame length {size}")


class MalformedFrameError(ConnectionFatalError):
    """Lengths inside a frame are inconsistent, or its command does not parse."""


class UnknownCommandTypeError(MalformedFrameError):
    """A well-formed command whose ``BaseCommand.type`` this codec does not know (a command of
    a newer protocol). Fatal where nothing can answer it; the frame decoder consumes the frame
    and yields :class:`protocol.frames.UnknownCommand` instead, so the stream goes on."""

    def __init__(self, type_number: int) -> None:
        self.type_number = type_number
        super().__init__(f"unknown command type {type_number}")


# --------------------------------------------------------------------------- request-scoped


class RequestError(ProtocolError):
    """One request failed; answered with ERROR / SEND_ERROR, the connection stays open."""

    default_code: ClassVar[ServerError] = ServerError.UnknownError

    def __init__(self, message: str, code: ServerError | int | None = None) -> None:
        self.code: ServerError = ServerError(self.default_code if code is None else code)
        self.message = message
        super().__init__(message)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code.name})"


class UnknownServerError(RequestError):
    default_code = ServerError.UnknownError


class MetadataError(RequestError):
    default_code = ServerError.MetadataError


class PersistenceError(RequestError):
    default_code = ServerError.PersistenceError


class ConsumerBusyError(RequestError):
    default_code = ServerError.ConsumerBusy


class ServiceNotReadyError(RequestError):
    default_code = ServerError.ServiceNotReady


class ChecksumError(RequestError):
    default_code = ServerError.ChecksumError


class TopicNotFoundError(RequestError):
    default_code = ServerError.TopicNotFound


class SubscriptionNotFoundError(RequestError):
    default_code = ServerError.SubscriptionNotFound


class ConsumerNotFoundError(RequestError):
    default_code = ServerError.ConsumerNotFound


class ProducerBusyError(RequestError):
    default_code = ServerError.ProducerBusy


class ProducerFencedError(RequestError):
    default_code = ServerError.ProducerFenced


class InvalidTopicNameError(RequestError):
    default_code = ServerError.InvalidTopicName


class IncompatibleSchemaError(RequestError):
    default_code = ServerError.IncompatibleSchema


class NotAllowedError(RequestError):
    default_code = ServerError.NotAllowedError


class TopicTerminatedError(RequestError):
    default_code = ServerError.TopicTerminatedError


class ProducerBlockedQuotaExceededException(RequestError):
    """A backlog quota (policy ``producer_exception``) refuses the producer; on this code the
    C++ client fails its pending sends instead of re-sending them."""

    default_code = ServerError.ProducerBlockedQuotaExceededException


class MalformedEntryError(ChecksumError):
    """An entry ([metadataSize][MessageMetadata][payload]) or batch payload does not parse.

    It answers with ``ChecksumError`` on purpose: the bytes are corrupt, and ChecksumError is the
    only SEND_ERROR code the C++ client fails a single message for instead of reconnecting and
    re-sending the same corrupt bytes until its send timeout.
    """


_BY_CODE: dict[ServerError, type[RequestError]] = {
    cls.default_code: cls
    for cls in (
        UnknownServerError,
        MetadataError,
        PersistenceError,
        ConsumerBusyError,
        ServiceNotReadyError,
        ChecksumError,
        TopicNotFoundError,
        SubscriptionNotFoundError,
        ConsumerNotFoundError,
        ProducerBusyError,
        ProducerFencedError,
        InvalidTopicNameError,
        IncompatibleSchemaError,
        NotAllowedError,
        TopicTerminatedError,
        ProducerBlockedQuotaExceededException,
    )
}

ERROR_CLASSES = MappingProxyType(_BY_CODE)
"""Read-only registry ``ServerError -> RequestError subclass`` (codes without one use the base)."""


def error_for_code(code: ServerError | int, message: str) -> RequestError:
    """The request-scoped exception for a wire ``code`` (the base class for unmapped codes)."""
    server_error = ServerError(code)
    cls = ERROR_CLASSES.get(server_error)
    if cls is None:
        return RequestError(message, server_error)
    return cls(message)


__all__ = [
    "ERROR_CLASSES",
    "ChecksumError",
    "ConnectionFatalError",
    "ConsumerBusyError",
    "ConsumerNotFoundError",
    "ForeignProtocolError",
    "FrameTooLargeError",
    "IncompatibleSchemaError",
    "InvalidTopicNameError",
    "MalformedEntryError",
    "MalformedFrameError",
    "MetadataError",
    "NotAllowedError",
    "PersistenceError",
    "ProducerBlockedQuotaExceededException",
    "ProducerBusyError",
    "ProducerFencedError",
    "ProtocolError",
    "RequestError",
    "ServerError",
    "ServiceNotReadyError",
    "SubscriptionNotFoundError",
    "TopicNotFoundError",
    "TopicTerminatedError",
    "UnknownServerError",
    "error_for_code",
]
