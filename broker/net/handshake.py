"""CONNECT, who the connection acts as, and what that role may ask for.

Theory of operation
-------------------
Each :class:`broker.net.connection.ServerConnection` owns one :class:`Handshake`, handed a
narrow :class:`HandshakeHost` (write, close, finish the handshake, spawn a task). The state
table moves a connection from CONNECTING to AUTHENTICATING when CONNECT arrives; then:

1. CONNECT's ``auth_method_name`` + ``auth_data`` (and, on a TLS listener, the verified client
   certificate) go to :class:`broker.security.authentication.AuthenticationService`. A cheap
   method (token, TLS, none) is checked at once; basic authentication (bcrypt) runs in a
   worker thread, the connection staying in AUTHENTICATING meanwhile.
2. Accepted: the role is kept (:attr:`Handshake.role`), CONNECTED is written and the host moves
   to CONNECTED. Refused: ``ERROR(request_id=2^64-1, AuthenticationError, "Failed to
   authenticate")`` as Pulsar 4.0's ServerCnx writes it, then the connection closes. The reason
   goes to the log only, at WARN: which provider refused, for which method, its error code and
   text (:meth:`AuthenticationService.refusal_line`: at most once per 10 s for one provider,
   method and reason, with the count in between); each refusal is counted in
   ``pulsar_authentication_failures_total``. Pulsar's C++ client (and so the Python client)
   treats any answer to CONNECT but CONNECTED as a dropped connection and retries until its
   operation timeout, against Pulsar too (the Java client fails with AuthenticationException).
3. A connection that has not finished the handshake ``handshakeTimeoutSeconds`` after it was
   accepted is closed (:meth:`Handshake.start_timer`), so idle or hostile sockets never pile up.
4. Refresh (:meth:`Handshake.refresh_tick`, called by the server every
   ``authenticationRefreshCheckSeconds``): an expired credential gets AUTH_CHALLENGE when the
   client announced ``supports_auth_refresh``, and the connection is closed when it did not,
   or when a challenge is still unanswered at the next check. AUTH_RESPONSE is checked by
   :meth:`AuthenticationService.reauthenticate` (same role required); refused: ERROR + close.

Authorization (``require_*``) is request-scoped: a refusal is a
:class:`protocol.errors.RequestError` with ``ServerError.AuthorizationError`` and Pulsar's
text, which the connection answers on that request only; the connection stays open.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from broker import SERVER_VERSION
from broker.config import BrokerConfig
from broker.net.view import ConnectionView
from broker.security.authentication import AuthenticatedRole, AuthenticationService
from broker.security.authorization import (
    AuthAction,
    AuthorizationService,
    NamespaceAuth,
)
from broker.security.errors import AuthenticationError, AuthorizationError
from protocol import commands as C
from protocol.auth_commands import REFRESH_AUTH_DATA, auth_response_fields, encode_auth_challenge
from protocol.errors import RequestError, ServerError
from protocol.frames import Frame
from protocol.limits import PROTOCOL_VERSION

__all__ = ["ConnectionSecurity", "Handshake", "HandshakeHost"]

log = logging.getLogger("horae.handshake")

#: Pulsar's ``Commands.newError(-1, ...)``: -1 as the uint64 request id.
NO_REQUEST_ID: Final = (1 << 64) - 1
NOT_AUTHORIZED_TOPICS_OF_NAMESPACE = "Client is not authorized to GetTopicsOfNamespace"


class _NoPolicies:
    """The policy store of a broker without authorization: nothing is ever read from it."""

    def tenant_admin_roles(self, tenant: str) -> frozenset[str] | None:
        return None

    def namespace_auth(self, namespace: str) -> NamespaceAuth | None:
        return None


@dataclass(frozen=True, slots=True)
class ConnectionSecurity:
    """What every connection of one broker shares: its authentication and authorization."""

    authentication: AuthenticationService
    authorization: AuthorizationService
    handshake_timeout_s: float = 10.0

    @classmethod
    def disabled(cls, config: BrokerConfig) -> ConnectionSecurity:
        """No authentication, no authorization (role = anonymousUserRole, maybe empty)."""
        return cls(AuthenticationService(enabled=False,
                                         anonymous_user_role=config.anonymous_user_role),
                   AuthorizationService(_NoPolicies(), enabled=False),
                   float(config.handshake_timeout_seconds))


class HandshakeHost(ConnectionView, Protocol):
    """What the handshake needs of its connection."""

    @property
    def is_closed(self) -> bool: ...

    @property
    def peer_certificate(self) -> bytes | None: ...

    @property
    def max_message_size(self) -> int: ...

    @property
    def serves_topic_watchers(self) -> bool:
        """CONNECTED advertises ``supports_topic_watchers``."""
        ...

    def close(self, reason: str = "") -> None: ...

    def handshake_done(self) -> None:
        """Move to CONNECTED (the CONNECTED frame has been written)."""
        ...


class Handshake:
    """CONNECT, credential refresh and authorization for one connection (see the module doc)."""

    def __init__(self, host: HandshakeHost, security: ConnectionSecurity) -> None:
        self._host = host
        self._authn = security.authentication
        self._authz = security.authorization
        self._timeout_s = security.handshake_timeout_s
        self.role: AuthenticatedRole | None = None
        self.client_version = ""
        self.protocol_version = 0
        self.supports_auth_refresh = False
        self.supports_broker_entry_metadata = False
        self._challenged = False
        self._timer: asyncio.TimerHandle | None = None

    @property
    def role_name(self) -> str:
        return self.role.role if self.role is not None else ""

    @property
    def completed(self) -> bool:
        return self.role is not None

    def may_use_transaction_of(self, owner: str) -> bool:
        """Pulsar's transaction ownership: with authentication on, only the role that opened a
        transaction, or a super-user, may add to it, acknowledge in it or end it."""
        if not self._authn.enabled:
            return True
        role = self.role_name
        return role == owner or self._authz.is_super_user(role)

    # ------------------------------------------------------------------ handshake timeout

    def start_timer(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(self._timeout_s, self._on_timeout)

    def stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timeout(self) -> None:
        self._timer = None
        if not self.completed and not self._host.is_closed:
            log.info("closing %s: no completed CONNECT within %.1f s",
                     self._host.remote_address, self._timeout_s)
            self._host.close("handshake timeout")

    # ------------------------------------------------------------------ CONNECT

    def on_connect(self, frame: Frame) -> None:
        c = frame.command.connect
        self.client_version = c.client_version
        self.protocol_version = min(int(c.protocol_version), PROTOCOL_VERSION)
        self.supports_auth_refresh = (c.HasField("feature_flags")
                                      and c.feature_flags.supports_auth_refresh)
        self.supports_broker_entry_metadata = (
            c.HasField("feature_flags") and c.feature_flags.supports_broker_entry_metadata)
        method = c.auth_method_name if c.HasField("auth_method_name") else None
        data = bytes(c.auth_data)
        cert = self._host.peer_certificate
        if self._authn.cpu_bound(method):
            self._host.spawn(self._authenticate_off_loop(method, data, cert))
            return
        try:
            role = self._authn.authenticate(method, data, cert)
        except AuthenticationError as exc:
            self._refuse(exc, method)
            return
        self._accept(role)

    async def _authenticate_off_loop(self, method: str | None, data: bytes,
                                     cert: bytes | None) -> None:
        try:
            role = await self._authn.authenticate_async(method, data, cert)
        except AuthenticationError as exc:
            self._refuse(exc, method)
            return
        if not self._host.is_closed:
            self._accept(role)

    def _accept(self, role: AuthenticatedRole) -> None:
        self.role = role
        self.stop_timer()
        self._host.write(C.encode_connected(
            SERVER_VERSION, self.protocol_version, max_message_size=self._host.max_message_size,
            supports_topic_watchers=self._host.serves_topic_watchers))
        self._host.handshake_done()

    def _refuse(self, exc: AuthenticationError, offered_method: str | None) -> None:
        line = self._authn.refusal_line(exc, offered_method)
        if line is not None:
            log.warning("authentication of %s (client %r) %s", self._host.remote_address,
                        self.client_version[:64], line)
        self._host.write(C.encode_error(NO_REQUEST_ID, ServerError.AuthenticationError,
                                        exc.wire_message))
        self._host.close("authentication failed")

    # ------------------------------------------------------------------ refresh

    def refresh_tick(self, now_ms: int | None = None) -> None:
        """Challenge or close a connection whose credential expired (see the module doc)."""
        role = self.role
        if role is None or self._host.is_closed:
            return
        if self._challenged:
            log.info("closing %s: AUTH_CHALLENGE unanswered", self._host.remote_address)
            self._host.close("Closing connection after timeout on refreshing auth credentials")
            return
        if not role.is_expired(now_ms if now_ms is not None else int(time.time() * 1000)):
            return
        if not self.supports_auth_refresh:
            log.info("closing %s: credentials of role %r expired and the client cannot refresh",
                     self._host.remote_address, role.role)
            self._host.close("expired credentials")
            return
        self._challenged = True
        self._host.write(encode_auth_challenge(SERVER_VERSION, role.method, REFRESH_AUTH_DATA,
                                               self.protocol_version))

    def on_auth_response(self, frame: Frame) -> None:
        previous = self.role
        if previous is None:
            return
        method, data = auth_response_fields(frame.command.authResponse)
        cert = self._host.peer_certificate

        off_loop = self._authn.cpu_bound(method)

        async def run() -> None:
            try:
                if off_loop:
                    fresh = await self._authn.reauthenticate_async(previous, method, data, cert)
                else:
                    fresh = self._authn.reauthenticate(previous, method, data, cert)
            except AuthenticationError as exc:
                self._refuse(exc, method)
                return
            self.role = fresh
            self._challenged = False

        self._host.spawn(run())

    # ------------------------------------------------------------------ authorization

    def require_produce(self, topic: str) -> None:
        self._check(lambda role: self._authz.require_produce(topic, role))

    def require_consume(self, topic: str, subscription: str) -> None:
        self._check(lambda role: self._authz.require_consume(topic, role, subscription))

    def require_lookup(self, topic: str, *, partitioned_metadata: bool = False) -> None:
        self._check(lambda role: self._authz.require_lookup(
            topic, role, partitioned_metadata=partitioned_metadata))

    def require_get_schema(self, topic: str) -> None:
        self._check(lambda role: self._authz.require_get_schema(topic, role))

    def require_get_or_create_schema(self, topic: str) -> None:
        self._check(lambda role: self._authz.require_get_or_create_schema(topic, role))

    def require_namespace_lookup(self, namespace: str) -> None:
        role = self.role_name
        authz = self._authz
        if not authz.enabled or authz.is_tenant_admin(namespace.split("/", 1)[0], role):
            return
        if any(authz.has_namespace_permission(namespace, role, action)
               for action in (AuthAction.PRODUCE, AuthAction.CONSUME)):
            return
        raise RequestError(NOT_AUTHORIZED_TOPICS_OF_NAMESPACE, ServerError.AuthorizationError)

    def _check(self, check: Callable[[str], None]) -> None:
        if not self._authz.enabled:
            return
        try:
            check(self.role_name)
        except AuthorizationError as exc:
            raise RequestError(str(exc), ServerError.AuthorizationError) from None
        except ValueError as exc:  # not a fully qualified topic name
            raise RequestError(str(exc), ServerError.InvalidTopicName) from None

