"""Lookups on one connection (PARTITIONED_METADATA, LOOKUP, GET_TOPICS_OF_NAMESPACE).

Theory of operation
-------------------
Horae is a single node, so every lookup answers Connect to itself. What matters is the
string: the C++ client keys its connection pool on the URL, so answering with exactly the
string the client already used lets it reuse the same TCP connection, and answering with a
name the client cannot resolve breaks it. A LOOKUP answer carries both
``brokerServiceUrl`` and, when a TLS listener runs, ``brokerServiceUrlTls``: a client that
reached us over TLS picks the TLS one. The URLs, the advertised-listener choice and the host
rule are the service's (:meth:`broker.topics.service.BrokerService.urls`, :mod:`broker.listeners`),
shared with the HTTP lookup and the cluster record.

Every lookup is authorized first (:class:`broker.net.handshake.Handshake`): a refusal is the
lookup's own failure answer with ``AuthorizationError``; the connection stays open. The
handlers are called by :class:`broker.net.connection.ServerConnection` through the narrow
:class:`LookupConnection`.
"""

from __future__ import annotations

from typing import Protocol

from broker.listeners import is_loopback
from broker.net.handshake import Handshake
from broker.net.view import ConnectionView
from broker.topics.names import TopicName
from broker.topics.service import BrokerService
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import RequestError

__all__ = [
    "LookupConnection",
    "answer_lookup",
    "answer_partitioned_metadata",
    "answer_topics_of_namespace",
    "is_loopback",  # (broker.server imports it from here)
]


class LookupConnection(ConnectionView, Protocol):
    """What the lookup handlers need of their connection."""

    @property
    def service(self) -> BrokerService: ...

    @property
    def handshake(self) -> Handshake: ...

    @property
    def local_host(self) -> str | None: ...


def answer_partitioned_metadata(conn: LookupConnection, m: pb.CommandPartitionedTopicMetadata) -> None:
    rid = m.request_id

    def failed(e: RequestError) -> bytes:
        return C.encode_partitioned_metadata_response(rid, error=e.code, message=e.message)

    try:
        name = TopicName.parse(m.topic)
        conn.handshake.require_lookup(name.full, partitioned_metadata=True)
    except RequestError as exc:
        conn.write(failed(exc))
        return

    async def run() -> None:
        n = await conn.service.lookup_partition_count(name.full)
        conn.write(C.encode_partitioned_metadata_response(rid, n))

    conn.spawn(run(), rid, failed)


def answer_lookup(conn: LookupConnection, m: pb.CommandLookupTopic) -> None:
    rid = m.request_id
    try:
        name = TopicName.parse(m.topic)
        conn.handshake.require_lookup(name.full)
    except RequestError as exc:
        conn.write(C.encode_lookup_response(rid, response="failed", error=exc.code,
                                            message=exc.message))
        return
    service = conn.service
    requested = m.advertised_listener_name if m.HasField("advertised_listener_name") else None
    try:
        url = service.lookup_url(requested, conn.local_host)
    except RequestError as exc:
        conn.write(C.encode_lookup_response(rid, response="failed", error=exc.code,
                                            message=exc.message))
        return
    url_tls = service.urls(conn.local_host).broker_url_tls
    conn.write(C.encode_lookup_response(rid, url, response="connect", authoritative=True,
                                        broker_service_url_tls=url_tls))


def answer_topics_of_namespace(conn: LookupConnection, m: pb.CommandGetTopicsOfNamespace) -> None:
    rid = m.request_id
    mode = int(m.mode)
    conn.handshake.require_namespace_lookup(m.namespace)  # RequestError -> ERROR

    async def run() -> None:
        topics = await conn.service.topics_of_namespace(m.namespace)
        if mode == pb.CommandGetTopicsOfNamespace.PERSISTENT:
            topics = [t for t in topics if t.startswith("persistent://")]
        elif mode == pb.CommandGetTopicsOfNamespace.NON_PERSISTENT:
            topics = [t for t in topics if t.startswith("non-persistent://")]
        conn.write(C.encode_get_topics_of_namespace_response(rid, topics))

    conn.spawn(run(), rid)

