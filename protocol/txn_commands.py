"""Encoders of the transaction commands' answers (types 51-63 of BaseCommand).

Every answer carries the request id, the transaction id it concerns (most and least
significant bits) and, when it failed, a ServerError code and message, as Pulsar's
``Commands.new*Response`` build them.
"""

from __future__ import annotations

from typing import Final

from protocol import pulsar_pb as pb
from protocol.errors import ServerError
from protocol.framing import encode_command

__all__ = ["TXN_RESPONSES", "encode_tc_client_connect_response", "encode_txn_response"]

_T = pb.BaseCommand

#: request type -> (response type, response field of BaseCommand)
TXN_RESPONSES: Final[dict[int, tuple[int, str]]] = {
    _T.NEW_TXN: (_T.NEW_TXN_RESPONSE, "newTxnResponse"),
    _T.ADD_PARTITION_TO_TXN: (_T.ADD_PARTITION_TO_TXN_RESPONSE, "addPartitionToTxnResponse"),
    _T.ADD_SUBSCRIPTION_TO_TXN: (_T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
                                 "addSubscriptionToTxnResponse"),
    _T.END_TXN: (_T.END_TXN_RESPONSE, "endTxnResponse"),
    _T.END_TXN_ON_PARTITION: (_T.END_TXN_ON_PARTITION_RESPONSE, "endTxnOnPartitionResponse"),
    _T.END_TXN_ON_SUBSCRIPTION: (_T.END_TXN_ON_SUBSCRIPTION_RESPONSE,
                                 "endTxnOnSubscriptionResponse"),
}


def encode_txn_response(request_type: int, request_id: int, most: int, least: int, *,
                        error: ServerError | int | None = None,
                        message: str | None = None) -> bytes:
    """The answer to a transaction request of *request_type* (a key of TXN_RESPONSES)."""
    response_type, field = TXN_RESPONSES[request_type]
    cmd = pb.BaseCommand(type=response_type)  # type: ignore[arg-type]  # an int of Type
    r = getattr(cmd, field)
    r.request_id = request_id
    r.txnid_most_bits = most
    r.txnid_least_bits = least
    if error is not None:
        r.error = int(error)
        r.message = message or ""
    return encode_command(cmd)


def encode_tc_client_connect_response(request_id: int, *, error: ServerError | int | None = None,
                                      message: str | None = None) -> bytes:
    cmd = pb.BaseCommand(type=_T.TC_CLIENT_CONNECT_RESPONSE)
    r = cmd.tcClientConnectResponse
    r.request_id = request_id
    if error is not None:
        r.error = int(error)  # type: ignore[assignment]
        r.message = message or ""
    return encode_command(cmd)
