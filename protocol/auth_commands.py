"""AUTH_CHALLENGE (broker -> client) and AUTH_RESPONSE (client -> broker): credential refresh.

Theory of operation
-------------------
Pulsar refreshes a connection's credentials without reconnecting: when the role's credential
expires (a token's ``exp``) and the client announced ``feature_flags.supports_auth_refresh`` in
CONNECT, the broker sends AUTH_CHALLENGE carrying ``AuthData(auth_method_name=<method>,
auth_data=b"PulsarAuthRefresh")``; the client answers AUTH_RESPONSE with fresh credentials of
the same method. These encoders build both frames (the client one for tests and raw clients);
:func:`auth_response_fields` reads an AUTH_RESPONSE into plain values. Sans-IO like the rest of
:mod:`protocol`; no hot path, so protobuf builds the bytes.
"""

from __future__ import annotations

from typing import Final

from protocol import pulsar_pb as pb
from protocol.framing import encode_command
from protocol.limits import PROTOCOL_VERSION

__all__ = [
    "REFRESH_AUTH_DATA",
    "auth_response_fields",
    "encode_auth_challenge",
    "encode_auth_response",
]

#: Pulsar's ``AuthData.REFRESH_AUTH_DATA``: the challenge payload that asks for a refresh.
REFRESH_AUTH_DATA: Final = b"PulsarAuthRefresh"

_T = pb.BaseCommand


def encode_auth_challenge(server_version: str, auth_method_name: str,
                          challenge: bytes = REFRESH_AUTH_DATA,
                          protocol_version: int = PROTOCOL_VERSION) -> bytes:
    cmd = pb.BaseCommand(type=_T.AUTH_CHALLENGE)
    c = cmd.authChallenge
    c.server_version = server_version
    c.challenge.auth_method_name = auth_method_name
    c.challenge.auth_data = challenge
    c.protocol_version = protocol_version
    return encode_command(cmd)


def encode_auth_response(client_version: str, auth_method_name: str, auth_data: bytes,
                         protocol_version: int = PROTOCOL_VERSION) -> bytes:
    cmd = pb.BaseCommand(type=_T.AUTH_RESPONSE)
    r = cmd.authResponse
    r.client_version = client_version
    r.response.auth_method_name = auth_method_name
    r.response.auth_data = auth_data
    r.protocol_version = protocol_version
    return encode_command(cmd)


def auth_response_fields(msg: pb.CommandAuthResponse) -> tuple[str | None, bytes]:
    """``(auth_method_name or None, auth_data)`` of an AUTH_RESPONSE."""
    if not msg.HasField("response"):
        return None, b""
    data = msg.response
    method = data.auth_method_name if data.HasField("auth_method_name") else None
    return method, bytes(data.auth_data)
