"""The authentication service: providers by Pulsar class name, anonymous role, REST headers."""

from __future__ import annotations

import base64
import time
from typing import TYPE_CHECKING

import bcrypt
import jwt
import pytest

from broker.config_loading import load_config
from broker.security.authentication import (
    PROVIDER_BASIC,
    PROVIDER_TLS,
    PROVIDER_TOKEN,
    AuthenticatedRole,
    AuthenticationService,
)
from broker.security.errors import AuthenticationError, SecurityConfigError

if TYPE_CHECKING:
    from tests.security.conftest import Pki

SECRET = b"k" * 32
HTPASSWD = "carol:" + bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode() + "\n"


def _service(**overrides: object) -> AuthenticationService:
    base: dict[str, object] = {
        "authenticationEnabled": True,
        "authenticationProviders": ",".join([PROVIDER_TOKEN, PROVIDER_BASIC, PROVIDER_TLS]),
        "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
        "basicAuthConf": "data:;base64," + base64.b64encode(HTPASSWD.encode()).decode(),
    }
    base.update(overrides)
    return AuthenticationService.from_config(load_config(None, base))


def _token(sub: str = "alice", **claims: object) -> str:
    return jwt.encode({"sub": sub, **claims}, SECRET, algorithm="HS256")


def _fails(call: object, *args: object) -> AuthenticationError:
    with pytest.raises(AuthenticationError) as info:
        call(*args)  # type: ignore[operator]
    return info.value


def test_providers_selected_by_pulsar_class_names() -> None:
    assert _service().methods == ("token", "basic", "tls")
    assert _service(authenticationProviders=PROVIDER_TOKEN).methods == ("token",)


def test_unknown_provider_class_fails_startup() -> None:
    with pytest.raises(SecurityConfigError) as info:
        _service(authenticationProviders="com.example.Nope")
    assert "com.example.Nope" in str(info.value)


def test_binary_token_basic_and_tls(pki: Pki) -> None:
    service = _service()
    exp = int(time.time()) + 300
    assert service.authenticate("token", _token(exp=exp).encode()) == AuthenticatedRole(
        "alice", "token", exp * 1000)
    assert service.authenticate("basic", b"carol:pw") == AuthenticatedRole("carol", "basic")
    assert service.authenticate("tls", b"", pki.client.der) == AuthenticatedRole("alice", "tls")


def test_binary_refusals_use_pulsars_wire_text(pki: Pki) -> None:
    service = _service()
    for method, data, cert in (("token", b"garbage", None), ("basic", b"carol:nope", None),
                               ("tls", b"", None), ("token", b"\xff\xfe", None)):
        error = _fails(service.authenticate, method, data, cert)
        assert error.wire_message == "Failed to authenticate"
        assert error.detail


def test_no_credentials_anonymous_or_refused() -> None:
    for method in (None, "none"):
        refused = _fails(_service().authenticate, method, b"")
        assert refused.reason == "AUTH_REQUIRED"
        assert refused.detail == (
            "No anonymous role, and the client sent no credentials (authentication method "
            "'none'); configured providers: token, basic, tls")
    anon = _service(anonymousUserRole="anonymous").authenticate(None, b"")
    assert anon == AuthenticatedRole("anonymous", "anonymous")


def test_a_method_no_provider_serves_is_named_with_the_configured_ones() -> None:
    service = _service(authenticationProviders=PROVIDER_BASIC)
    refused = _fails(service.authenticate, "token", _token().encode())
    assert refused.reason == "AUTH_REQUIRED" and refused.method is None
    assert refused.detail == ("No anonymous role, and no configured provider serves the client's "
                              "authentication method 'token'; configured providers: basic")
    assert service.explain(refused, "token") == (
        "refused by AuthenticationService (method token, AUTH_REQUIRED): " + refused.detail)


@pytest.mark.parametrize(("method", "data", "provider", "reason"), [
    ("token", b"garbage", "AuthenticationProviderToken", "INVALID_TOKEN"),
    ("token", b"  ", "AuthenticationProviderToken", "INVALID_AUTH_DATA"),
    ("token", b"\xff", "AuthenticationProviderToken", "INVALID_AUTH_DATA"),
    ("basic", b"carol:nope", "AuthenticationProviderBasic", "INVALID_TOKEN"),
    ("basic", b"carol", "AuthenticationProviderBasic", "INVALID_AUTH_DATA"),
    ("tls", b"", "AuthenticationProviderTls", "INVALID_CERTS"),
    ("none", b"", "AuthenticationService", "AUTH_REQUIRED"),
])
def test_refusals_carry_pulsars_provider_and_reason_and_are_counted(
        method: str, data: bytes, provider: str, reason: str) -> None:
    service = _service()
    error = _fails(service.authenticate, method, data)
    assert error.reason == reason
    assert service.explain(error, method).startswith(
        f"refused by {provider} (method {method}, {reason}): ")
    assert service.counters.failures() == {(provider, method, reason): 1}
    assert service.counters.successes() == {}


def test_successes_counted_by_provider_and_method_and_anonymous_not() -> None:
    service = _service(anonymousUserRole="anon")
    service.authenticate("token", _token().encode())
    service.authenticate("token", _token().encode())
    service.authenticate_http({"Authorization": f"Bearer {_token()}"})
    service.authenticate("basic", b"carol:pw")
    service.authenticate("none", b"")
    assert service.counters.successes() == {("AuthenticationProviderToken", "token"): 3,
                                            ("AuthenticationProviderBasic", "basic"): 1}


def test_unknown_client_methods_are_one_label() -> None:
    service = _service()
    for method in ("x1", "x2", "sasl"):
        _fails(service.authenticate, method, b"")
    _fails(service.authenticate_http, {"X-Pulsar-Auth-Method-Name": "zzz"})
    assert service.counters.failures() == {
        ("AuthenticationService", "other", "AUTH_REQUIRED"): 2,
        ("AuthenticationService", "sasl", "AUTH_REQUIRED"): 1,
        ("AuthenticationService", "other", "UNSUPPORTED_METHOD"): 1}


def test_disabled_authentication_accepts_everyone() -> None:
    service = AuthenticationService.from_config(load_config(None, {"anonymousUserRole": "anon"}))
    assert not service.enabled
    assert service.authenticate("token", b"garbage") == AuthenticatedRole("anon", "none")


def test_expiry_and_refresh_keeps_role() -> None:
    service = _service()
    first = service.authenticate("token", _token(exp=int(time.time()) + 1).encode())
    assert first.is_expired(first.expires_at_ms or 0)
    assert not first.is_expired((first.expires_at_ms or 0) - 1)
    renewed = service.reauthenticate(first, "token", _token(exp=int(time.time()) + 600).encode())
    assert renewed.role == "alice"
    error = _fails(service.reauthenticate, first, "token", _token("mallory").encode())
    assert error.detail == "Principal cannot change during an authentication refresh"
    assert error.reason == "PRINCIPAL_CHANGED"


async def test_basic_authentication_runs_off_the_loop() -> None:
    service = _service()
    assert service.cpu_bound("basic") and not service.cpu_bound("token")
    role = await service.authenticate_async("basic", b"carol:pw")
    assert role.role == "carol"
    renewed = await service.reauthenticate_async(role, "basic", b"carol:pw")
    assert renewed.role == "carol"


def test_http_bearer_basic_and_client_cert(pki: Pki) -> None:
    service = _service()
    basic = "Basic " + base64.b64encode(b"carol:pw").decode()
    assert service.authenticate_http({"Authorization": f"Bearer {_token()}"}).role == "alice"
    assert service.authenticate_http({"authorization": basic}).role == "carol"
    assert service.authenticate_http({}, pki.client.der).role == "alice"
    assert service.authenticate_http(
        {"X-Pulsar-Auth-Method-Name": "token", "Authorization": f"Bearer {_token('bob')}"}).role == "bob"


def test_http_refusals() -> None:
    service = _service(anonymousUserRole="anonymous")
    assert _fails(service.authenticate_http, {"Authorization": "Bearer junk"}).detail.startswith(
        "Failed to authentication token")
    assert _fails(service.authenticate_http, {"Authorization": "Digest x"}).detail == (
        "Authentication required")
    assert _fails(service.authenticate_http, {"X-Pulsar-Auth-Method-Name": "sasl"}).detail == (
        "Unsupported authentication method: [sasl].")
    assert service.authenticate_http({}).role == "anonymous"
    strict = _service()
    assert _fails(strict.authenticate_http, {}).detail == "Authentication required"
    assert strict.www_authenticate() == ('Bearer realm="pulsar"', 'Basic realm="pulsar"')


def test_tls_role_needs_a_common_name(pki: Pki) -> None:
    service = _service()
    nameless = pki.issue(None, stem="nameless")
    assert _fails(service.authenticate, "tls", b"", nameless.der).detail == (
        "Client unable to authenticate with TLS certificate")


def test_refusal_lines_at_most_once_per_interval_per_provider_method_and_reason() -> None:
    from broker.security.auth_metrics import REFUSAL_WARN_INTERVAL_S, RefusalLog

    service = _service()
    now = [0.0]
    service.refusals = RefusalLog(clock=lambda: now[0])
    bad = _fails(service.authenticate, "token", b"garbage")
    none = _fails(service.authenticate, "none", b"")
    assert service.refusal_line(bad, "token") == service.explain(bad, "token")
    assert service.refusal_line(bad, "token") is None
    assert service.refusal_line(bad, "token") is None
    assert service.refusal_line(none, "none") == service.explain(none, "none")
    now[0] = REFUSAL_WARN_INTERVAL_S
    assert service.refusal_line(bad, "token") == (
        service.explain(bad, "token") + " (2 more since the last report)")
    assert service.counters.failures()[
        ("AuthenticationProviderToken", "token", "INVALID_TOKEN")] == 1  # counted once per check
