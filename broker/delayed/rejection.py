"""How a max-delay (PIP-315) rejection is answered, per client kind.

Theory of operation
-------------------
Pulsar answers a message whose delay exceeds the max with ``SEND_ERROR NotAllowedError``.
What a client does with a SEND_ERROR depends on the client, and only one code per client
fails that one send without closing the connection:

* **Java** (CONNECT ``client_version`` ``Pulsar-Java-...``): ``ClientCnx.handleSendError``
  hands ``NotAllowedError`` to ``ProducerImpl.recoverNotAllowedError``, which fails the
  pending send with that sequence id (``NotAllowedException`` carrying the broker's text)
  and keeps the connection and the producer. ``ChecksumError`` would make it check its own
  copy of the message, find it intact and re-send it forever. Answer: ``NotAllowedError``.
* **C++** (``Pulsar-CPP-v...``, also the Python and Node clients, which are built on it):
  ``ClientConnection::handleSendError`` closes the connection on every code but
  ``ChecksumError`` (every producer and consumer of that connection reconnects and re-sends;
  the rejected send is re-sent and rejected again, with no end). On ``ChecksumError``,
  ``ProducerImpl::removeCorruptMessage`` fails the send at the head of its pending queue with
  ``ResultChecksumError`` when the sequence id matches it, and the connection stays. The
  producer answers its sends in the order they arrived, so the rejected send is that head.
  Answer: ``ChecksumError`` with Pulsar's text (the client logs it at WARN:
  ``Received send error from server: Exceeds max allowed delivery delay of N milliseconds``).
* **Go** (``Pulsar-Go-...``): ``connection.handleSendError`` closes the connection on every
  code but ``NotAllowedError`` and ``TopicTerminatedError``; on those two it detaches the
  producer from the connection and keeps the connection. Nothing fails a single send, so the
  least harmful answer is ``NotAllowedError``: the connection and every other producer and
  consumer on it are untouched; that producer's pending sends (the rejected one included)
  fail with the client's send timeout. The client never hears of that producer again, so the
  broker refuses its later sends too (:meth:`DelayRejection.refuse_after`, the producer's
  FAILED state): what the client reports as failed is never stored, and an application that
  re-sends it on a new producer makes no duplicate.
* Anything else (the WebSocket API's in-process link, other clients): Pulsar's
  ``NotAllowedError``.

:class:`DelayRejection` is made once per producer from its connection's ``client_version``
and turns a :class:`~broker.delayed.guard.DelayTooLongError` into the error to answer;
every other error passes through unchanged.
"""

from __future__ import annotations

from typing import Final

from broker.delayed.guard import DelayTooLongError
from protocol.errors import NotAllowedError, RequestError, ServerError

__all__ = ["CHECKSUM_ERROR_CLIENTS", "DETACHED_TEXT", "DETACHING_CLIENTS", "DelayRejection",
           "rejection_code"]

#: CONNECT ``client_version`` prefixes of the clients that close their connection on every
#: SEND_ERROR but ``ChecksumError`` (the C++ library; Python and Node send its version).
CHECKSUM_ERROR_CLIENTS: Final = ("Pulsar-CPP-",)
#: Prefixes of the clients that detach a producer from its connection on NotAllowedError.
DETACHING_CLIENTS: Final = ("Pulsar-Go-",)
#: Why a producer's sends after its client detached it are refused.
DETACHED_TEXT: Final = ("The client stopped listening to this producer after a max-delay "
                        "rejection; re-create the producer")


def rejection_code(client_version: str) -> ServerError:
    """The SEND_ERROR code a max-delay rejection is answered with for this client."""
    if client_version.startswith(CHECKSUM_ERROR_CLIENTS):
        return ServerError.ChecksumError
    return ServerError.NotAllowedError


class DelayRejection:
    """One producer's answer to a max-delay rejection (module docstring)."""

    __slots__ = ("code", "detaches")

    def __init__(self, client_version: str) -> None:
        self.code = rejection_code(client_version)
        self.detaches = client_version.startswith(DETACHING_CLIENTS)

    def refuse_after(self, answered: RequestError) -> RequestError | None:
        """What every later send of the producer must be refused with once *answered* went
        out (None: nothing; the producer goes on)."""
        if self.detaches and type(answered) is DelayTooLongError:
            return NotAllowedError(DETACHED_TEXT)
        return None

    def answer(self, error: RequestError) -> RequestError:
        """*error* as this producer's client must see it."""
        if type(error) is not DelayTooLongError or error.code is self.code:
            return error
        answered = DelayTooLongError(error.message, error.messages)
        answered.code = self.code
        return answered
