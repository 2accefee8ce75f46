"""Pulsar's broker health check: produce and consume one message on the heartbeat topic.

Theory of operation
-------------------
``GET /admin/v2/brokers/health?topicVersion=V1|V2`` (super-user) answers ``ok`` only when

1. the store reports no problem (``SegmentStore.health_problems()``: read-only disk, failing
   cursor saves, suspended trimming, fenced ledgers) -- 500 "Storage is unhealthy: ..."; and
2. a message makes the whole round trip through this broker within ``healthCheckTimeoutMs``,
   as Pulsar's ``HealthChecker`` does with its internal client: the topic
   ``persistent://<heartbeat namespace>/healthcheck`` (:mod:`broker.topics.heartbeat`) is
   created through the service, then a loopback connection to the broker's own binary port
   CONNECTs, opens a producer and a non-durable Exclusive reader subscription
   ``healthCheck-<uuid>`` at the latest position, SENDs the uuid, waits for its SEND_RECEIPT
   (so the entry was fsynced) and for the MESSAGE carrying it (so dispatch works), then closes
   the producer and the consumer. A subscription left behind is deleted forcefully, as
   Pulsar's ``closeAndReCheck`` does. Any failure or the timeout answers 500 with the reason.

The loopback connection goes through the real listener, connection handler, publish path,
storage writer and dispatcher: a wedged piece of any of them fails the check. It presents the
REST caller's credentials (``Authorization: Bearer`` as ``token``, ``Basic`` as ``basic``), so
with authentication on it acts as the super-user who asked; a caller authenticated by a TLS
client certificate has nothing to forward and is connected as the anonymous role.

The check is the only caller of :class:`LoopbackProbe`; it runs on the broker's event loop and
never blocks it (asyncio streams, bounded by one timeout for the whole round trip).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from broker.security.basic_auth import decode_basic_header
from broker.security.errors import AuthenticationError
from broker.topics.heartbeat import TopicVersion
from broker.topics.service import BrokerService
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.frames import NEED_DATA, Frame, FrameDecoder
from protocol.metadata import encode_entry, split_entry

__all__ = ["HealthCheckError", "LoopbackCredentials", "credentials_of", "run_health_check"]

log = logging.getLogger("horae.admin.health")

T = pb.BaseCommand
CLIENT_VERSION = "Horae-healthcheck"
SUBSCRIPTION_PREFIX = "healthCheck-"
_READ_CHUNK = 65536
_FLOW_PERMITS = 1000


class HealthCheckError(Exception):
    """The check failed; ``str(exc)`` is the reason the REST answer carries."""


@dataclass(frozen=True, slots=True)
class LoopbackCredentials:
    """What the loopback CONNECT presents (``method`` None: none, the anonymous role)."""

    method: str | None = None
    data: bytes = b""


def credentials_of(headers: Mapping[str, str]) -> LoopbackCredentials:
    """The REST caller's credentials, in the form CONNECT carries them."""
    value = next((v for k, v in headers.items() if k.lower() == "authorization"), None)
    if value is None:
        return LoopbackCredentials()
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() == "bearer":
        return LoopbackCredentials("token", rest.strip().encode())
    if scheme.lower() == "basic":
        with contextlib.suppress(AuthenticationError, ValueError):
            return LoopbackCredentials("basic", decode_basic_header(value).encode())
    return LoopbackCredentials()


def loopback_host(bind_address: str) -> str:
    """Where to reach a listener bound to *bind_address* from this host."""
    if bind_address in ("", "0.0.0.0"):
        return "127.0.0.1"
    if bind_address == "::":
        return "::1"
    return bind_address


async def run_health_check(service: BrokerService, version: TopicVersion,
                           credentials: LoopbackCredentials, timeout_s: float) -> None:
    """Raise :class:`HealthCheckError` unless storage is healthy and the heartbeat round trip
    completes within *timeout_s* (see the module docstring)."""
    problems = service.store.health_problems()
    if problems:
        raise HealthCheckError("Storage is unhealthy: " + "; ".join(problems))
    topic_name = service.addresses.heartbeat.topic(version)
    subscription = SUBSCRIPTION_PREFIX + uuid.uuid4().hex
    started = time.monotonic()
    log.debug("Running health check with topic=%s", topic_name)
    try:
        async with asyncio.timeout(timeout_s):
            await service.get_topic(topic_name, create=True)
            probe = await LoopbackProbe.open(loopback_host(service.config.bind_address),
                                             service.addresses.broker_port, credentials)
            try:
                await probe.round_trip(topic_name, subscription)
            finally:
                probe.close()
    except TimeoutError:
        raise HealthCheckError(
            f"Health check timed out after {int(timeout_s * 1000)} ms: the heartbeat message "
            f"on {topic_name} did not make the round trip") from None
    except HealthCheckError:
        raise
    except Exception as exc:  # anything else the round trip hit is the reason it failed
        raise HealthCheckError(f"Health check on {topic_name} failed: {exc}") from exc
    finally:
        await _drop_leftover_subscription(service, topic_name, subscription)
    log.info("Successfully ran health check in %.1f ms", (time.monotonic() - started) * 1000)


async def _drop_leftover_subscription(service: BrokerService, topic_name: str,
                                      subscription: str) -> None:
    topic = service.topics.get(topic_name)
    if topic is None or subscription not in topic.subscriptions:
        return
    log.warning("Force deleting subscription %s left on %s by the health check",
                subscription, topic_name)
    try:
        await topic.subscriptions.delete_subscription(subscription, force=True)
    except Exception:
        log.exception("Could not delete the health-check subscription %s", subscription)


class LoopbackProbe:
    """A minimal Pulsar client over one loopback connection (asyncio streams)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._decoder = FrameDecoder()
        self._request_ids = itertools.count(1)

    @classmethod
    async def open(cls, host: str, port: int, credentials: LoopbackCredentials) -> LoopbackProbe:
        reader, writer = await asyncio.open_connection(host, port)
        probe = cls(reader, writer)
        try:
            connect = C.encode_connect(CLIENT_VERSION, auth_method_name=credentials.method,
                                       auth_data=credentials.data if credentials.method else None)
            await probe._send(connect)
            await probe._expect(T.CONNECTED, "CONNECT")
        except BaseException:
            probe.close()
            raise
        return probe

    def close(self) -> None:
        self._writer.close()

    async def round_trip(self, topic: str, subscription: str) -> None:
        producer_id, consumer_id = 1, 1
        await self._send(C.encode_producer(topic, producer_id, next(self._request_ids)))
        producer = (await self._expect(T.PRODUCER_SUCCESS, "PRODUCER")).producer_success
        await self._send(C.encode_subscribe(topic, subscription, 0, consumer_id,
                                            next(self._request_ids), durable=False))
        await self._expect(T.SUCCESS, "SUBSCRIBE")
        await self._send(C.encode_flow(consumer_id, _FLOW_PERMITS))
        content = subscription.removeprefix(SUBSCRIPTION_PREFIX).encode()
        md = pb.MessageMetadata(producer_name=producer.producer_name, sequence_id=0,
                                publish_time=int(time.time() * 1000))
        await self._send(C.encode_send(producer_id, 0, encode_entry(md, content)))
        receipt_seen = message_seen = False
        while not (receipt_seen and message_seen):
            frame = await self._next()
            kind = frame.command.type
            if kind == T.SEND_RECEIPT:
                receipt_seen = True
            elif kind == T.MESSAGE and frame.entry is not None:
                _, payload = split_entry(frame.entry)
                message_seen = message_seen or bytes(payload) == content
            else:
                _fail_on(frame.command, "SEND")
        await self._send(C.encode_close_producer(producer_id, next(self._request_ids)))
        await self._expect(T.SUCCESS, "CLOSE_PRODUCER")
        await self._send(C.encode_close_consumer(consumer_id, next(self._request_ids)))
        await self._expect(T.SUCCESS, "CLOSE_CONSUMER")

    async def _send(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def _expect(self, kind: int, request: str) -> pb.BaseCommand:
        """The next reply that is not a message already in flight; an ERROR fails the check."""
        while True:
            cmd = (await self._next()).command
            if cmd.type == kind:
                return cmd
            if cmd.type not in (T.MESSAGE, T.SEND_RECEIPT):
                _fail_on(cmd, request)

    async def _next(self) -> Frame:
        while True:
            frame = self._decoder.next_frame()
            if frame is not NEED_DATA:
                assert isinstance(frame, Frame)
                if frame.command.type == T.PING:
                    await self._send(C.encode_pong())
                    continue
                return frame
            data = await self._reader.read(_READ_CHUNK)
            if not data:
                raise HealthCheckError("the broker closed the health-check connection")
            self._decoder.receive_data(data)


def _fail_on(cmd: pb.BaseCommand, request: str) -> None:
    """Raise for an ERROR/SEND_ERROR (with the broker's text); ignore anything harmless."""
    if cmd.type == T.ERROR:
        raise HealthCheckError(f"{request} refused: {pb.ServerError.Name(cmd.error.error)} "
                               f"{cmd.error.message}")
    if cmd.type == T.SEND_ERROR:
        raise HealthCheckError(f"SEND refused: {pb.ServerError.Name(cmd.send_error.error)} "
                               f"{cmd.send_error.message}")
    if cmd.type == T.CLOSE_PRODUCER or cmd.type == T.CLOSE_CONSUMER:
        raise HealthCheckError(f"the broker closed the health-check {request} side")
