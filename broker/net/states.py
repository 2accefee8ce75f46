"""The connection state machine, as data: (state, command type) -> (handler, next state).

Theory of operation
-------------------
A connection starts in CONNECTING, where the only acceptable command is CONNECT (the client
itself refuses anything before CONNECTED, so the broker must not answer anything else
either). CONNECT moves the connection to AUTHENTICATING *before* its handler runs; the handler
(:class:`broker.net.handshake.Handshake`) checks the credentials, at once or in a worker
thread, and on success writes CONNECTED and moves the connection on to CONNECTED, where the
client commands listed in :data:`TRANSITIONS` are served (AUTH_RESPONSE refreshes the
credentials). A refused CONNECT gets ERROR(AuthenticationError) and CLOSED. CLOSED accepts
nothing; frames that were already decoded when the connection closed are dropped.
The moves that are no command -- the handshake completing (AUTHENTICATING -> CONNECTED) and
the connection closing (any state -> CLOSED) -- are :data:`LIFECYCLE`; the connection makes
every move of its state through one of the two tables.

SEND is served outside the table, on the publish path alone: the connection hands the
consecutive SENDs of one producer to it together (:func:`send_verdict`).

A pair missing from the table is a protocol violation (:func:`unexpected`):

1. in CONNECTING and AUTHENTICATING the connection is closed, because no reply is possible
   before CONNECTED;
2. in CONNECTED a command carrying a ``request_id`` gets ERROR NotAllowedError and the
   connection stays open (the peer asked something we do not serve); one without a request
   id (e.g. a broker-to-client command such as SEND_RECEIPT or MESSAGE, or a second CONNECT)
   closes the connection, since nothing could be answered;
3. in CLOSED the frame is dropped;
4. a command type the proto does not declare (a newer protocol's command, decoded as
   :class:`protocol.frames.UnknownCommand`) is never in the table: :func:`unknown_command`
   answers it in CONNECTED with ERROR NotAllowedError and request id -1 (no field of an
   undeclared command can be read) and keeps the connection; before CONNECTED it closes it,
   in CLOSED it is dropped.

Handlers are the functions of :mod:`broker.net.handlers` (among them the answers to the
transaction commands, as Pulsar's with that feature off), called
with the connection and the decoded frame; a test walks every (state, command type) pair.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import Final

from broker.net import handlers as H
from broker.net.handlers import CommandHost
from protocol import pulsar_pb as pb
from protocol.command_check import SUBFIELD_BY_TYPE
from protocol.frames import Frame

__all__ = [
    "ALL_COMMAND_TYPES",
    "LIFECYCLE",
    "TRANSITIONS",
    "ConnState",
    "Handler",
    "Lifecycle",
    "Transition",
    "Unexpected",
    "request_id_of",
    "send_verdict",
    "subcommand_field",
    "unexpected",
    "unknown_command",
]

T = pb.BaseCommand


class ConnState(IntEnum):
    CONNECTING = 0
    AUTHENTICATING = 1
    CONNECTED = 2
    CLOSED = 3


class Lifecycle(IntEnum):
    """The events that move a connection but are no command (:data:`LIFECYCLE`)."""

    HANDSHAKE_DONE = 0  # the credentials were accepted and CONNECTED written (Handshake)
    CLOSED = 1          # either side closed the connection


class Unexpected(IntEnum):
    """What to do with a command the table does not list for the current state."""

    CLOSE = 0   # close the connection
    ERROR = 1   # answer ERROR(request_id, NotAllowedError), keep the connection
    DROP = 2    # ignore (connection already closed)


Handler = Callable[[CommandHost, Frame], None]
"""A command handler: called with the connection and the decoded frame."""


@dataclass(frozen=True, slots=True)
class Transition:
    handler: Handler
    next_state: ConnState


def _t(handler: Handler, next_state: ConnState = ConnState.CONNECTED) -> Transition:
    return Transition(handler, next_state)


_C = ConnState.CONNECTED

TRANSITIONS: Final = MappingProxyType({
    (ConnState.CONNECTING, T.CONNECT): _t(H.on_connect, ConnState.AUTHENTICATING),
    (_C, T.AUTH_RESPONSE): _t(H.on_auth_response),
    (_C, T.PING): _t(H.on_ping),
    (_C, T.PONG): _t(H.on_pong),
    (_C, T.PARTITIONED_METADATA): _t(H.on_partitioned_metadata),
    (_C, T.LOOKUP): _t(H.on_lookup),
    (_C, T.GET_TOPICS_OF_NAMESPACE): _t(H.on_get_topics_of_namespace),
    (_C, T.GET_SCHEMA): _t(H.on_get_schema),
    (_C, T.GET_OR_CREATE_SCHEMA): _t(H.on_get_or_create_schema),
    (_C, T.PRODUCER): _t(H.on_producer),
    (_C, T.CLOSE_PRODUCER): _t(H.on_close_producer),
    (_C, T.SUBSCRIBE): _t(H.on_subscribe),
    (_C, T.FLOW): _t(H.on_flow),
    (_C, T.ACK): _t(H.on_ack),
    (_C, T.REDELIVER_UNACKNOWLEDGED_MESSAGES): _t(H.on_redeliver),
    (_C, T.SEEK): _t(H.on_seek),
    (_C, T.UNSUBSCRIBE): _t(H.on_unsubscribe),
    (_C, T.CLOSE_CONSUMER): _t(H.on_close_consumer),
    (_C, T.GET_LAST_MESSAGE_ID): _t(H.on_get_last_message_id),
    (_C, T.CONSUMER_STATS): _t(H.on_consumer_stats),
    **{(_C, t): _t(H.on_transaction_request) for t in H.TRANSACTION_REQUESTS},
    (_C, T.END_TXN_ON_PARTITION): _t(H.on_end_txn_on_partition),
    (_C, T.END_TXN_ON_SUBSCRIPTION): _t(H.on_end_txn_on_subscription),
    (_C, T.WATCH_TOPIC_LIST): _t(H.on_watch_topic_list),
    (_C, T.WATCH_TOPIC_LIST_CLOSE): _t(H.on_watch_topic_list_close),
})
"""Every accepted (state, BaseCommand.Type) pair."""

LIFECYCLE: Final[MappingProxyType[tuple[ConnState, Lifecycle], ConnState]] = MappingProxyType({
    (ConnState.AUTHENTICATING, Lifecycle.HANDSHAKE_DONE): ConnState.CONNECTED,
    **{(state, Lifecycle.CLOSED): ConnState.CLOSED
       for state in ConnState if state is not ConnState.CLOSED},
})
"""The transitions that are no command: (state, event) -> next state. An event a state does
not list leaves it where it is (a handshake that completes after the connection closed)."""

ALL_COMMAND_TYPES: Final = tuple(v.number for v in T.Type.DESCRIPTOR.values)

# BaseCommand.Type -> name of its sub-message field (Pulsar numbers the field after the type).
_SUBFIELD: Final = SUBFIELD_BY_TYPE
# Sub-message types that have a request_id field at all.
_HAS_REQUEST_ID: Final = frozenset(
    t for t in ALL_COMMAND_TYPES
    if "request_id" in T.DESCRIPTOR.fields_by_number[t].message_type.fields_by_name
)


def subcommand_field(cmd_type: int) -> str:
    """``pb.BaseCommand.PRODUCER`` -> ``"producer"``."""
    return str(_SUBFIELD[cmd_type])


def request_id_of(cmd: pb.BaseCommand) -> int | None:
    """The command's request_id, or None if its type has none or it is unset."""
    t = cmd.type
    if t not in _HAS_REQUEST_ID:
        return None
    sub = getattr(cmd, _SUBFIELD[t])
    return int(sub.request_id) if sub.HasField("request_id") else None


def unexpected(state: ConnState, cmd: pb.BaseCommand) -> Unexpected:
    """The action for a (state, command) pair that is not in :data:`TRANSITIONS`."""
    if state is ConnState.CLOSED:
        return Unexpected.DROP
    if state is ConnState.CONNECTING or state is ConnState.AUTHENTICATING:
        return Unexpected.CLOSE
    return Unexpected.ERROR if request_id_of(cmd) is not None else Unexpected.CLOSE


def send_verdict(state: ConnState) -> Unexpected | None:
    """SEND, the one command not in :data:`TRANSITIONS` that is served: in CONNECTED the
    connection hands it to its producer (None; a SEND for a producer the connection does not
    have closes it, as Pulsar does: the client's view of its producers is wrong); elsewhere
    the verdict of a command without a request id (rule 1: CLOSE; rule 3: DROP)."""
    if state is ConnState.CONNECTED:
        return None
    return Unexpected.DROP if state is ConnState.CLOSED else Unexpected.CLOSE


def unknown_command(state: ConnState) -> Unexpected:
    """The action for a command type the proto does not declare (rule 4)."""
    if state is ConnState.CLOSED:
        return Unexpected.DROP
    if state is ConnState.CONNECTED:
        return Unexpected.ERROR
    return Unexpected.CLOSE
