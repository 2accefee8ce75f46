"""Authentication: which role a binary connection or a REST request acts as.

Theory of operation
-------------------
:class:`AuthenticationService` is built once at start-up from the config
(:meth:`AuthenticationService.from_config`, which reads key and password files: blocking, so
before the loop serves anything). ``authenticationProviders`` lists Pulsar's class names; each
maps to one provider here, keyed by its wire method name:

==========================================================================  ======  =========================
class name                                                                  method  role
==========================================================================  ======  =========================
``org.apache.pulsar.broker.authentication.AuthenticationProviderToken``     token   ``sub`` / tokenAuthClaim
``org.apache.pulsar.broker.authentication.AuthenticationProviderBasic``     basic   the htpasswd user
``org.apache.pulsar.broker.authentication.AuthenticationProviderTls``       tls     client certificate CN
==========================================================================  ======  =========================

Binary protocol (:meth:`~AuthenticationService.authenticate`): CONNECT's ``auth_method_name``
picks the provider; ``auth_data`` is the credential; the TLS provider reads the verified peer
certificate (DER, ``ssl_object.getpeercert(binary_form=True)``). As Pulsar, a method with no
provider (including none at all) falls back to ``anonymousUserRole`` when one is set, and is
refused otherwise (``AUTH_REQUIRED``; the log says which method the client offered and which
providers are configured). Any refusal is an :class:`AuthenticationError` carrying the provider's
error code; the connection answers ERROR(AuthenticationError, "Failed to authenticate") and
closes. A token's expiry is carried in the result so the
connection can send AUTH_CHALLENGE; :meth:`~AuthenticationService.reauthenticate` checks the
AUTH_RESPONSE and refuses a change of role.

REST (:meth:`~AuthenticationService.authenticate_http`): ``X-Pulsar-Auth-Method-Name`` picks
a provider when present; otherwise ``Authorization: Bearer`` goes to the token provider,
``Authorization: Basic`` to basic, and a verified client certificate to TLS. Credentials that
are presented and wrong are refused even when an anonymous role exists (Pulsar 2.x let them
fall through to anonymous); absent credentials get the anonymous role or "Authentication
required". The caller answers 401 with :meth:`~AuthenticationService.www_authenticate`.

Basic authentication costs a bcrypt check: for a method :meth:`~AuthenticationService.cpu_bound`
names, the caller uses :meth:`~AuthenticationService.authenticate_async` /
:meth:`~AuthenticationService.reauthenticate_async`, which run it in a worker thread so the
event loop never stalls on it.

Every check, binary or REST, is counted in :attr:`AuthenticationService.counters`
(:mod:`broker.security.auth_metrics`): successes by provider and method, refusals by provider,
method and reason, as Pulsar's ``AuthenticationMetrics``. :meth:`AuthenticationService.explain`
turns a refusal into the log line: who refused, for which method, why;
:meth:`AuthenticationService.refusal_line` gives it at most once per 10 s per provider, method
and reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.config import BrokerConfig
from broker.security.auth_metrics import (
    NO_PROVIDER,
    PROVIDER_OF_METHOD,
    AuthenticationCounters,
    RefusalLog,
    method_label,
)
from broker.security.basic_auth import BasicAuthenticator, decode_basic_header, parse_htpasswd
from broker.security.errors import AuthenticationError, SecurityConfigError
from broker.security.sources import read_secret

if TYPE_CHECKING:
    from broker.security.token_auth import TokenAuthenticator

__all__ = [
    "AUTH_METHOD_HEADER",
    "PROVIDER_BASIC",
    "PROVIDER_TLS",
    "PROVIDER_TOKEN",
    "AuthenticatedRole",
    "AuthenticationService",
    "TlsCertAuthenticator",
    "split_list",
]

_PKG = "org.apache.pulsar.broker.authentication."
PROVIDER_TOKEN = _PKG + "AuthenticationProviderToken"
PROVIDER_BASIC = _PKG + "AuthenticationProviderBasic"
PROVIDER_TLS = _PKG + "AuthenticationProviderTls"
_METHOD_OF_CLASS = {PROVIDER_TOKEN: "token", PROVIDER_BASIC: "basic", PROVIDER_TLS: "tls"}

#: Pulsar's header naming the provider of a REST request.
AUTH_METHOD_HEADER = "X-Pulsar-Auth-Method-Name"
_REALM = 'realm="pulsar"'


def split_list(value: str) -> tuple[str, ...]:
    """Items of a comma-separated broker.conf list, stripped, empties dropped."""
    return tuple(item.strip() for item in value.split(",") if item.strip())


@dataclass(frozen=True, slots=True)
class AuthenticatedRole:
    """Who a connection or request acts as.

    ``method`` is the provider's wire name, ``"anonymous"`` for anonymousUserRole, or
    ``"none"`` when authentication is disabled (then ``role`` is anonymousUserRole, maybe "").
    ``expires_at_ms`` is the credential's expiry (epoch ms), None when it never expires.
    """

    role: str
    method: str
    expires_at_ms: int | None = None

    def is_expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and self.expires_at_ms <= now_ms


class TlsCertAuthenticator:
    """Role = common name of the verified client certificate (AuthenticationProviderTls)."""

    method_name = "tls"

    def __init__(self) -> None:
        # cryptography (~8 MiB mapped) is imported when this provider is configured, so a
        # broker with neither it nor the token provider never loads it, and the first
        # certificate checked does not wait for the import.
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        self._load_der = x509.load_der_x509_certificate
        self._common_name = NameOID.COMMON_NAME

    def authenticate(self, peer_cert_der: bytes | None) -> str:
        if not peer_cert_der:
            raise AuthenticationError(
                "Failed to get TLS certificates from client", method=self.method_name,
                reason="INVALID_CERTS")
        try:
            cert = self._load_der(peer_cert_der)
        except ValueError:
            raise AuthenticationError(
                "Failed to get TLS certificates from client", method=self.method_name,
                reason="INVALID_CERTS") from None
        # Pulsar reads the first CN of the RFC 2253 name, which lists RDNs last-first.
        names = [a.value for a in cert.subject.get_attributes_for_oid(self._common_name)]
        role = next((n for n in reversed(names) if isinstance(n, str) and n), None)
        if role is None:
            raise AuthenticationError(
                "Client unable to authenticate with TLS certificate", method=self.method_name,
                reason="INVALID_CN")
        return role


class AuthenticationService:
    """The configured providers and the anonymous role (see the module doc)."""

    def __init__(self, *, enabled: bool, anonymous_user_role: str = "",
                 token: TokenAuthenticator | None = None,
                 basic: BasicAuthenticator | None = None,
                 tls: TlsCertAuthenticator | None = None) -> None:
        self.enabled = enabled
        self.anonymous_user_role = anonymous_user_role.strip()
        self._token = token if enabled else None
        self._basic = basic if enabled else None
        self._tls = tls if enabled else None
        self.counters = AuthenticationCounters()
        self.refusals = RefusalLog()

    @classmethod
    def from_config(cls, config: BrokerConfig) -> AuthenticationService:
        """Build the providers *config* names. Blocking (reads key files); raises
        :class:`SecurityConfigError` for an unknown class or an unusable key/file."""
        classes = split_list(config.authentication_providers)
        unknown = [c for c in classes if c not in _METHOD_OF_CLASS]
        if unknown:
            raise SecurityConfigError(
                f"authenticationProviders: unknown provider {unknown[0]!r}; Horae implements "
                f"{sorted(_METHOD_OF_CLASS)}")
        if not config.authentication_enabled:
            return cls(enabled=False, anonymous_user_role=config.anonymous_user_role)
        token = basic = tls = None
        if PROVIDER_TOKEN in classes:
            from broker.security.token_auth import TokenAuthenticator

            token = TokenAuthenticator(
                secret_key=(read_secret(config.token_secret_key, setting="tokenSecretKey")
                            if config.token_secret_key.strip() else None),
                public_key=(read_secret(config.token_public_key, setting="tokenPublicKey")
                            if config.token_public_key.strip() and not config.token_secret_key.strip()
                            else None),
                public_alg=config.token_public_alg or "RS256",
                role_claim=config.token_auth_claim.strip() or "sub",
                audience_claim=config.token_audience_claim.strip() or None,
                audience=config.token_audience.strip() or None)
        if PROVIDER_BASIC in classes:
            if not config.basic_auth_conf.strip():
                raise SecurityConfigError("No basic authentication config provided (basicAuthConf)")
            raw = read_secret(config.basic_auth_conf, setting="basicAuthConf")
            try:
                text = raw.decode()
            except UnicodeDecodeError:
                raise SecurityConfigError("basicAuthConf is not UTF-8 text") from None
            basic = BasicAuthenticator(parse_htpasswd(text))
        if PROVIDER_TLS in classes:
            tls = TlsCertAuthenticator()
        return cls(enabled=True, anonymous_user_role=config.anonymous_user_role,
                   token=token, basic=basic, tls=tls)

    # --- introspection -------------------------------------------------------------------

    @property
    def methods(self) -> tuple[str, ...]:
        """Wire names of the configured providers."""
        found = (("token", self._token), ("basic", self._basic), ("tls", self._tls))
        return tuple(name for name, provider in found if provider is not None)

    def cpu_bound(self, method_name: str | None) -> bool:
        """True when checking this method is slow enough to belong off the event loop."""
        return method_name == "basic" and self._basic is not None

    def www_authenticate(self) -> tuple[str, ...]:
        """``WWW-Authenticate`` header values for a 401 (one per HTTP scheme offered)."""
        values = []
        if self._token is not None:
            values.append(f"Bearer {_REALM}")
        if self._basic is not None:
            values.append(f"Basic {_REALM}")
        return tuple(values) or (f"Bearer {_REALM}",)

    # --- binary protocol -----------------------------------------------------------------

    def _anonymous(self, offered: str | None = None) -> AuthenticatedRole:
        if not self.enabled:
            return AuthenticatedRole(role=self.anonymous_user_role, method="none")
        if self.anonymous_user_role:
            return AuthenticatedRole(role=self.anonymous_user_role, method="anonymous")
        configured = ", ".join(self.methods) or "none"
        if offered in (None, "", "none"):
            detail = (f"No anonymous role, and the client sent no credentials (authentication "
                      f"method 'none'); configured providers: {configured}")
        else:
            detail = (f"No anonymous role, and no configured provider serves the client's "
                      f"authentication method {offered[:64]!r}; configured providers: "
                      f"{configured}")
        raise AuthenticationError(detail, reason="AUTH_REQUIRED")

    # --- counting ------------------------------------------------------------------------

    def _provider_of(self, exc: AuthenticationError) -> str:
        if exc.method is not None and exc.method in self.methods:
            return PROVIDER_OF_METHOD[exc.method]
        return NO_PROVIDER

    def _count(self, role: AuthenticatedRole) -> None:
        provider = PROVIDER_OF_METHOD.get(role.method)
        if provider is not None:  # anonymous and disabled authentication are not counted
            self.counters.success(provider, role.method)

    def _count_failure(self, exc: AuthenticationError, offered: str | None) -> None:
        self.counters.failure(self._provider_of(exc), method_label(exc.method or offered),
                              exc.reason)

    def explain(self, exc: AuthenticationError, offered: str | None) -> str:
        """One log line for a refusal: the provider, the method, the reason code and the
        provider's text (never the credential)."""
        method = method_label(exc.method or offered)
        return f"refused by {self._provider_of(exc)} (method {method}, {exc.reason}): {exc.detail}"

    def refusal_line(self, exc: AuthenticationError, offered: str | None) -> str | None:
        """:meth:`explain`, or None when the same provider, method and reason were logged in
        the last 10 s (:class:`broker.security.auth_metrics.RefusalLog`)."""
        key = (self._provider_of(exc), method_label(exc.method or offered), exc.reason)
        unlogged = self.refusals.admit(key)
        if unlogged is None:
            return None
        tail = f" ({unlogged} more since the last report)" if unlogged else ""
        return self.explain(exc, offered) + tail

    def authenticate(self, method_name: str | None, auth_data: bytes,
                     peer_cert_der: bytes | None = None) -> AuthenticatedRole:
        """CONNECT's credentials -> role, or :class:`AuthenticationError` (both counted)."""
        try:
            role = self._authenticate(method_name, auth_data, peer_cert_der)
        except AuthenticationError as exc:
            self._count_failure(exc, method_name)
            raise
        self._count(role)
        return role

    def _authenticate(self, method_name: str | None, auth_data: bytes,
                      peer_cert_der: bytes | None) -> AuthenticatedRole:
        if not self.enabled:
            return self._anonymous()
        if method_name == "token" and self._token is not None:
            identity = self._token.authenticate(_text(auth_data, "token"))
            return AuthenticatedRole(identity.role, "token", identity.expires_at_ms)
        if method_name == "basic" and self._basic is not None:
            return AuthenticatedRole(self._basic.authenticate(_text(auth_data, "basic")), "basic")
        if method_name == "tls" and self._tls is not None:
            return AuthenticatedRole(self._tls.authenticate(peer_cert_der), "tls")
        return self._anonymous(method_name)

    async def authenticate_async(self, method_name: str | None, auth_data: bytes,
                                 peer_cert_der: bytes | None = None) -> AuthenticatedRole:
        """:meth:`authenticate` in a worker thread, for a method :meth:`cpu_bound` says is
        too slow for the event loop (the caller decides, once)."""
        return await asyncio.to_thread(self.authenticate, method_name, auth_data, peer_cert_der)

    def reauthenticate(self, previous: AuthenticatedRole, method_name: str | None,
                       auth_data: bytes, peer_cert_der: bytes | None = None) -> AuthenticatedRole:
        """An AUTH_RESPONSE's credentials; the role may not change (Pulsar closes then)."""
        fresh = self.authenticate(method_name, auth_data, peer_cert_der)
        if fresh.role != previous.role:
            exc = AuthenticationError("Principal cannot change during an authentication refresh",
                                      method=method_name, reason="PRINCIPAL_CHANGED")
            self._count_failure(exc, method_name)
            raise exc
        return fresh

    async def reauthenticate_async(self, previous: AuthenticatedRole, method_name: str | None,
                                   auth_data: bytes,
                                   peer_cert_der: bytes | None = None) -> AuthenticatedRole:
        """:meth:`reauthenticate` in a worker thread (as :meth:`authenticate_async`)."""
        return await asyncio.to_thread(self.reauthenticate, previous, method_name, auth_data,
                                       peer_cert_der)

    # --- REST ----------------------------------------------------------------------------

    def authenticate_http(self, headers: Mapping[str, str],
                          peer_cert_der: bytes | None = None) -> AuthenticatedRole:
        """A request's role, or :class:`AuthenticationError` (answer 401 + WWW-Authenticate);
        both counted."""
        try:
            role = self._authenticate_http(headers, peer_cert_der)
        except AuthenticationError as exc:
            self._count_failure(exc, _header(headers, AUTH_METHOD_HEADER))
            raise
        self._count(role)
        return role

    def _authenticate_http(self, headers: Mapping[str, str],
                           peer_cert_der: bytes | None) -> AuthenticatedRole:
        if not self.enabled:
            return self._anonymous()
        method = _header(headers, AUTH_METHOD_HEADER)
        authorization = _header(headers, "Authorization")
        if method is not None:
            method = method.strip()
            if method not in self.methods:
                raise AuthenticationError(f"Unsupported authentication method: [{method}].",
                                          reason="UNSUPPORTED_METHOD")
        elif authorization is not None:
            scheme = authorization.strip().partition(" ")[0].lower()
            method = {"bearer": "token", "basic": "basic"}.get(scheme)
            if method is None or method not in self.methods:
                raise AuthenticationError("Authentication required", reason="AUTH_REQUIRED")
        elif peer_cert_der and self._tls is not None:
            method = "tls"
        else:
            if self.anonymous_user_role:
                return AuthenticatedRole(role=self.anonymous_user_role, method="anonymous")
            raise AuthenticationError("Authentication required", reason="AUTH_REQUIRED")
        return self._http_credentials(method, authorization, peer_cert_der)

    def _http_credentials(self, method: str, authorization: str | None,
                          peer_cert_der: bytes | None) -> AuthenticatedRole:
        if method == "tls":
            assert self._tls is not None
            return AuthenticatedRole(self._tls.authenticate(peer_cert_der), "tls")
        if authorization is None:
            raise AuthenticationError("Invalid HTTP Authorization header", method=method,
                                      reason="INVALID_AUTH_DATA")
        if method == "token":
            assert self._token is not None
            scheme, _, token = authorization.strip().partition(" ")
            if scheme.lower() != "bearer":
                raise AuthenticationError("Invalid HTTP Authorization header", method=method,
                                          reason="INVALID_AUTH_DATA")
            identity = self._token.authenticate(token)
            return AuthenticatedRole(identity.role, "token", identity.expires_at_ms)
        assert self._basic is not None
        return AuthenticatedRole(self._basic.authenticate(decode_basic_header(authorization)),
                                 "basic")

    async def authenticate_http_async(self, headers: Mapping[str, str],
                                      peer_cert_der: bytes | None = None) -> AuthenticatedRole:
        """:meth:`authenticate_http` off the loop when it may run bcrypt."""
        if self._basic is not None:
            return await asyncio.to_thread(self.authenticate_http, headers, peer_cert_der)
        return self.authenticate_http(headers, peer_cert_der)


def _text(auth_data: bytes, method: str) -> str:
    try:
        return auth_data.decode()
    except UnicodeDecodeError:
        raise AuthenticationError("credentials are not UTF-8 text", method=method,
                                  reason="INVALID_AUTH_DATA") from None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    lowered = name.lower()
    return next((v for k, v in headers.items() if k.lower() == lowered), None)
