"""Pulsar's WebSocket endpoints on the web port: paths, upgrade, authentication, errors.

Theory of operation
-------------------
:func:`add_routes` registers, on the admin app (:func:`broker.admin.app.create_app`)::

    GET /ws/v2/producer/{persistent|non-persistent}/{tenant}/{namespace}/{topic}
    GET /ws/v2/consumer/{persistent|non-persistent}/{tenant}/{namespace}/{topic}/{subscription}
    GET /ws/v2/reader/{persistent|non-persistent}/{tenant}/{namespace}/{topic}

Each request is handled as Pulsar's ``AbstractWebSocketHandler`` does, everything before the
upgrade so that a refusal is an HTTP status the client sees:

1. not a WebSocket upgrade: 400;
2. the query parameters (:mod:`broker.websocket.params`): 400 ``Invalid query params: ...``;
3. authentication (``authenticationEnabled``): the ``Authorization`` header, or the ``token``
   query parameter as ``Bearer <token>`` when there is no header (what a browser can send):
   401 ``Failed to authenticate``;
4. authorization (``authorizationEnabled``): produce on the topic, or consume on the topic and
   subscription: 403 ``Not authorized``;
5. the producer, consumer or reader is created on a :class:`broker.websocket.link.BrokerLink`
   acting as that role; the broker's refusal is answered with Pulsar's status for it
   (:func:`http_status`: 404 topic not found, 409 busy/fenced/incompatible schema, 429, 503
   terminated topic or quota, 500 else) and ``Failed to create producer/consumer: <reason>``;
6. the upgrade, then the session runs until either side closes.

Error bodies are ``{"reason": ...}`` as everywhere on the web port. The admin app's
authentication middleware leaves ``/ws/`` to this module (:data:`WS_PATH_PREFIX`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from aiohttp import WSCloseCode, web

from broker.security.authentication import AuthenticationService
from broker.security.authorization import AuthorizationService
from broker.security.errors import AuthenticationError, AuthorizationError
from broker.topics.names import TopicName
from broker.topics.service import BrokerService
from broker.websocket.consumer import ConsumerSession, open_consumer, open_reader
from broker.websocket.frames import FrameError
from broker.websocket.link import BrokerLink
from broker.websocket.params import (
    InvalidParams,
    consumer_options,
    producer_options,
    reader_options,
)
from broker.websocket.producer import ProducerSession, open_producer
from broker.websocket.session import SHUTDOWN_REASON, Session
from protocol.errors import RequestError, ServerError

__all__ = ["WS_PATH_PREFIX", "WebSocketService", "add_routes", "http_status"]

log = logging.getLogger("horae.websocket")

#: Requests under this path authenticate here, not in the admin middleware.
WS_PATH_PREFIX = "/ws/"
_DOMAINS = ("persistent", "non-persistent")


@dataclass(frozen=True, slots=True)
class WebSocketService:
    """What the endpoints use: the broker and its security services; the open sessions (closed
    with 1001 when the web app shuts down)."""

    broker: BrokerService
    authentication: AuthenticationService
    authorization: AuthorizationService
    sessions: set[Session] = field(default_factory=set)


SERVICE_KEY = web.AppKey("horae_websocket", WebSocketService)


def add_routes(app: web.Application, service: WebSocketService) -> None:
    app[SERVICE_KEY] = service
    base = "/ws/v2/{kind}/{domain}/{tenant}/{namespace}/{rest:.+}"
    app.router.add_get(base.replace("{kind}", "producer"), _producer)
    app.router.add_get(base.replace("{kind}", "consumer"), _consumer)
    app.router.add_get(base.replace("{kind}", "reader"), _reader)

    async def close_sessions(app: web.Application) -> None:
        for session in list(service.sessions):
            session.close(int(WSCloseCode.GOING_AWAY), SHUTDOWN_REASON)

    app.on_shutdown.append(close_sessions)


# ---------------------------------------------------------------------------- errors

_STATUS: dict[ServerError, int] = {
    ServerError.AuthenticationError: 401,
    ServerError.AuthorizationError: 403,
    ServerError.TopicNotFound: 404,
    ServerError.SubscriptionNotFound: 404,
    ServerError.ProducerBusy: 409,
    ServerError.ConsumerBusy: 409,
    ServerError.ProducerFenced: 409,
    ServerError.IncompatibleSchema: 409,
    ServerError.TooManyRequests: 429,
    ServerError.ProducerBlockedQuotaExceededError: 503,
    ServerError.ProducerBlockedQuotaExceededException: 503,
    ServerError.TopicTerminatedError: 503,
    ServerError.InvalidTopicName: 400,
}


def http_status(error: RequestError) -> int:
    """Pulsar's ``AbstractWebSocketHandler.getErrorCode`` for the client exception the broker's
    error code becomes."""
    return _STATUS.get(error.code, 500)


def _error(status: int, reason: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=json.dumps({"reason": reason}),
                        content_type="application/json", headers=headers)


# ---------------------------------------------------------------------------- endpoints


@dataclass(frozen=True, slots=True)
class _Target:
    topic: str
    subscription: str | None


def _target(request: web.Request, *, with_subscription: bool) -> _Target:
    m = request.match_info
    if m["domain"] not in _DOMAINS:
        raise InvalidParams(f"Invalid topic domain {m['domain']}")
    rest = m["rest"]
    subscription = None
    if with_subscription:
        rest, _, subscription = rest.rpartition("/")
        if not subscription:
            raise InvalidParams("Empty subscription name")
        if not rest:
            raise InvalidParams("Invalid topic name format")
    local = "/".join(part for part in rest.split("/") if part)
    try:
        name = TopicName.parse(f"{m['domain']}://{m['tenant']}/{m['namespace']}/{local}")
    except (ValueError, RequestError) as exc:
        raise InvalidParams(getattr(exc, "message", None) or str(exc)) from None
    return _Target(name.full, subscription)


def _query(request: web.Request) -> dict[str, str]:
    """The first value of each query parameter (Pulsar's ``queryParams``)."""
    out: dict[str, str] = {}
    for key, value in request.query.items():
        out.setdefault(key, value)
    return out


def _peer(request: web.Request) -> tuple[str, int]:
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return (str(peer[0]), int(peer[1]))
    return ("websocket", 0)


async def _authenticate(request: web.Request, service: WebSocketService) -> str:
    """The role of the request (header, or the ``token`` query parameter), or raise."""
    headers: dict[str, str] = dict(request.headers)
    if "Authorization" not in request.headers:
        token = request.query.get("token")
        if token is not None:
            headers["Authorization"] = token if token.startswith("Bearer ") else f"Bearer {token}"
    cert = None
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is not None:
        der = ssl_object.getpeercert(binary_form=True)
        cert = bytes(der) if der else None
    role = await service.authentication.authenticate_http_async(headers, cert)
    return role.role


async def _serve(request: web.Request, kind: str) -> web.StreamResponse:
    service = request.app[SERVICE_KEY]
    config = service.broker.config
    ws = web.WebSocketResponse(max_msg_size=config.web_socket_max_text_frame_size,
                               autoping=False)
    if not ws.can_prepare(request).ok:
        return _error(400, "Expected a WebSocket upgrade request")
    query = _query(request)
    try:
        target = _target(request, with_subscription=kind == "consumer")
        if kind == "producer":
            producer_opts = producer_options(query)
        elif kind == "consumer":
            consumer_opts = consumer_options(query)
        else:
            reader_opts = reader_options(query)
    except InvalidParams as exc:
        return _error(400, f"Invalid query params: {exc}")
    if kind == "producer" and "encryptionKeys" in query:
        # Pulsar without cryptoKeyReaderFactoryClassName: an IllegalStateException, 500
        return _error(500, "Failed to create producer/consumer: Can't add encryption key "
                           "without configuring cryptoKeyReaderFactoryClassName")
    peer = _peer(request)
    try:
        role = await _authenticate(request, service)
    except AuthenticationError as exc:
        log.warning("[%s:%d] Failed to authenticate WebSocket client on topic %s: %s",
                    peer[0], peer[1], target.topic, exc.detail)
        return _error(401, "Failed to authenticate",
                      {"WWW-Authenticate": service.authentication.www_authenticate()[0]})
    authz = service.authorization
    if authz.enabled:
        try:
            if kind == "producer":
                authz.require_produce(target.topic, role)
            else:
                authz.require_consume(target.topic, role, target.subscription or "")
        except (AuthorizationError, ValueError) as exc:
            log.warning("[%s:%d] WebSocket client %r is not authorized on topic %s: %s",
                        peer[0], peer[1], role, target.topic, exc)
            return _error(403, "Not authorized")
    link = BrokerLink(service.broker, role, authz, peer)
    session: Session
    idle_s = config.web_socket_session_idle_timeout_millis / 1000
    try:
        await link.open()
        if kind == "producer":
            opened = await open_producer(link, target.topic, producer_opts)
            limit = config.max_pending_publish_requests_per_connection
            max_pending = producer_opts.max_pending_messages
            if limit > 0:
                max_pending = min(max_pending, limit)
            session = ProducerSession(ws, link, target.topic, idle_s, opened, producer_opts,
                                      max_pending=max_pending,
                                      max_message_size=config.max_message_size)
        elif kind == "consumer":
            assert target.subscription is not None
            consumer = await open_consumer(link, target.topic, target.subscription,
                                           consumer_opts)
            session = ConsumerSession(ws, link, target.topic, idle_s, consumer,
                                      receiver_queue_size=consumer_opts.receiver_queue_size,
                                      reader=False, options=consumer_opts)
        else:
            reader = await open_reader(link, target.topic, reader_opts)
            session = ConsumerSession(ws, link, target.topic, idle_s, reader,
                                      receiver_queue_size=reader_opts.receiver_queue_size,
                                      reader=True)
    except FrameError as exc:
        link.close()
        return _error(400, f"Invalid query params: {exc}")
    except RequestError as exc:
        link.close()
        log.warning("[%s:%d] Failed in creating %s on topic %s: %s", peer[0], peer[1], kind,
                    target.topic, exc.message)
        what = "reader" if kind == "reader" else "producer/consumer"
        return _error(http_status(exc), f"Failed to create {what}: {exc.message}")
    except BaseException:
        link.close()
        raise
    try:
        await ws.prepare(request)
    except BaseException:
        session.on_close()
        link.close()
        raise
    log.info("[%s:%d] New WebSocket %s session on topic %s (role %r)", peer[0], peer[1], kind,
             target.topic, role)
    service.sessions.add(session)
    try:
        await session.run()
    finally:
        service.sessions.discard(session)
    log.info("[%s:%d] Closed WebSocket %s session on topic %s", peer[0], peer[1], kind,
             target.topic)
    return ws


async def _producer(request: web.Request) -> web.StreamResponse:
    return await _serve(request, "producer")


async def _consumer(request: web.Request) -> web.StreamResponse:
    return await _serve(request, "consumer")


async def _reader(request: web.Request) -> web.StreamResponse:
    return await _serve(request, "reader")
