"""Lookups on one connection (PARTITIONED_METADATA, LOOKUP, GET_TOPICS_OF_NAMESPACE) and the ``pulsar://`` / ``pulsar+ssl://`` URLs a LOOKUP answer carries.

Theory of operation
-------------------
Horae is a single node, so every lookup answers Connect to itself. What matters is the
string: the C++ client keys its connection pool on the URL, so answering with exactly the
string the client already used lets it reuse the same TCP connection, and answering with a
name the client cannot resolve breaks it. A LOOKUP answer carries both
``brokerServiceUrl`` and, when a TLS listener runs, ``brokerServiceUrlTls``: a client that
reached us over TLS picks the TLS one.

Host rule: the configured ``advertisedAddress`` is used unless it names a loopback host while
the client reached us on a non-loopback address (the default "localhost" would send a remote
client to itself); then the local address of the client's connection is advertised, which
the client demonstrably can reach. An explicitly configured non-loopback name always wins.

Every lookup is authorized first (:class:`broker.net.handshake.Handshake`): a refusal is the
lookup's own failure answer with ``AuthorizationError``; the connection stays open. The
handlers are called by :class:`broker.net.connection.ServerConnection` through the narrow
:class:`LookupConnection`.
"""

from __future__ import annotations

import ipaddress
from typing import Protocol

from broker.listeners import lookup_url
from broker.net.handshake import Handshake
from broker.net.view import ConnectionView
from broker.topics.names import TopicName
from broker.topics.service import BrokerService
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import RequestError

__all__ = [
    "LookupConnection",
    "advertised_host",
    "answer_lookup",
    "answer_partitioned_metadata",
    "answer_topics_of_namespace",
    "is_loopback",
    "service_url",
]

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def advertised_host(advertised_address: str, local_host: str | None) -> str:
    """The host to advertise to a client whose connection arrived on *local_host*."""
    if local_host and is_loopback(advertised_address) and not is_loopback(local_host):
        try:
            ip = ipaddress.ip_address(local_host.split("%", 1)[0])
        except ValueError:
            return local_host
        if ip.version == 4:
            return local_host
        mapped = ip.ipv4_mapped  # a dual-stack socket reports ::ffff:a.b.c.d
        return str(mapped) if mapped is not None else f"[{local_host}]"
    return advertised_address


def service_url(advertised_address: str, port: int, local_host: str | None = None, *,
                tls: bool = False) -> str:
    scheme = "pulsar+ssl" if tls else "pulsar"
    return f"{scheme}://{advertised_host(advertised_address, local_host)}:{port}"


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
        n = await conn.service.get_partition_count(name.full)
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
    advertised = service.config.advertised_address
    default = service_url(advertised, service.broker_port, conn.local_host)
    requested = m.advertised_listener_name if m.HasField("advertised_listener_name") else None
    try:
        url = lookup_url(service.config.advertised_listeners,
                         service.config.internal_listener_name, requested, default)
    except RequestError as exc:
        conn.write(C.encode_lookup_response(rid, response="failed", error=exc.code,
                                            message=exc.message))
        return
    tls_port = service.broker_port_tls
    url_tls = (service_url(advertised, tls_port, conn.local_host, tls=True)
               if tls_port is not None else None)
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

