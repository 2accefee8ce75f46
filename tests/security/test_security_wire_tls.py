"""The official client against a secured Horae: pulsar+ssl (trusted and untrusted CA, client
certificates as roles), tokens on the binary protocol and on REST (401, 403, grants)."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jwt
import pulsar
import pytest

from tests.conftest import make_client

if TYPE_CHECKING:
    from tests.security.conftest import Pki

SECRET = b"t" * 32
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
TLS_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"


def _token(sub: str) -> str:
    return jwt.encode({"sub": sub}, SECRET, algorithm="HS256")


def _tls_overrides(pki: Pki, **extra: object) -> dict[str, object]:
    return {"brokerServicePortTls": 0, "webServicePortTls": 0,
            "tlsCertificateFilePath": str(pki.server.cert), "tlsKeyFilePath": str(pki.server.key),
            "tlsTrustCertsFilePath": str(pki.ca.path), **extra}


def _tls_url(broker: Any) -> str:
    return f"pulsar+ssl://127.0.0.1:{broker.server.broker_port_tls}"


def _round_trip(client: Any, topic: str) -> bytes:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    producer.send(b"over tls")
    data: bytes = consumer.receive(10_000).data()
    return data


def test_pulsar_ssl_with_a_trusted_ca_produces_and_consumes(
        broker_factory: Callable[..., Any], pki: Pki) -> None:
    broker = broker_factory(config_overrides=_tls_overrides(pki))
    client = make_client(_tls_url(broker), tls_trust_certs_file_path=str(pki.ca.path))
    try:
        assert _round_trip(client, "persistent://public/default/tls-plain") == b"over tls"
    finally:
        client.close()


def test_pulsar_ssl_with_an_untrusted_ca_fails(broker_factory: Callable[..., Any], pki: Pki) -> None:
    broker = broker_factory(config_overrides=_tls_overrides(pki))
    client = make_client(_tls_url(broker), tls_trust_certs_file_path=str(pki.other_ca.path),
                         operation_timeout_seconds=3)
    try:
        with pytest.raises((pulsar.ConnectError, pulsar.Timeout)) as refused:
            client.create_producer("persistent://public/default/tls-untrusted")
        assert refused.value is not None
    finally:
        client.close()


def test_client_certificate_common_name_is_the_role(broker_factory: Callable[..., Any],
                                                     pki: Pki) -> None:
    broker = broker_factory(config_overrides=_tls_overrides(
        pki, authenticationEnabled=True, authenticationProviders=TLS_PROVIDER,
        authorizationEnabled=True, superUserRoles="alice"))
    alice = make_client(_tls_url(broker), tls_trust_certs_file_path=str(pki.ca.path),
                        authentication=pulsar.AuthenticationTLS(str(pki.client.cert),
                                                                str(pki.client.key)))
    bob_cert = pki.issue("bob")
    bob = make_client(_tls_url(broker), tls_trust_certs_file_path=str(pki.ca.path),
                      authentication=pulsar.AuthenticationTLS(str(bob_cert.cert),
                                                              str(bob_cert.key)))
    try:
        assert _round_trip(alice, "persistent://public/default/tls-cn") == b"over tls"
        with pytest.raises(pulsar.AuthorizationError) as refused:
            bob.create_producer("persistent://public/default/tls-cn")
        assert refused.value is not None
    finally:
        alice.close()
        bob.close()


@pytest.fixture
def token_broker(broker_factory: Callable[..., Any]) -> Any:
    return broker_factory(config_overrides={
        "authenticationEnabled": True, "authenticationProviders": TOKEN_PROVIDER,
        "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
        "authorizationEnabled": True, "superUserRoles": "admin"})


def _rest(broker: Any, method: str, path: str, token: str | None = None,
          body: object = None) -> tuple[int, dict[str, str], Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(broker.web_url + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, dict(response.headers), json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, dict(exc.headers), json.loads(raw) if raw else None


def test_rest_without_or_with_a_bad_token_is_401_with_www_authenticate(token_broker: Any) -> None:
    for token in (None, "garbage", jwt.encode({"sub": "admin"}, b"x" * 32, algorithm="HS256")):
        status, headers, body = _rest(token_broker, "GET", "/admin/v2/tenants", token)
        assert status == 401
        assert headers["WWW-Authenticate"] == 'Bearer realm="pulsar"'
        assert isinstance(body["reason"], str) and body["reason"]
    status, _, body = _rest(token_broker, "GET", "/admin/v2/tenants", _token("admin"))
    assert status == 200 and "public" in body


def test_rest_refuses_non_admins_with_403_and_grants_open_the_binary_protocol(
        token_broker: Any) -> None:
    status, _, body = _rest(token_broker, "GET", "/admin/v2/namespaces/public", _token("bob"))
    assert status == 403
    assert body == {"reason": "Don't have permission to administrate resources on this tenant"}
    status, _, _ = _rest(token_broker, "PUT", "/admin/v2/tenants/acme", _token("bob"),
                         {"adminRoles": ["bob"], "allowedClusters": ["standalone"]})
    assert status == 403
    # The super-user creates a tenant administered by bob; bob grants carol on a namespace.
    assert _rest(token_broker, "PUT", "/admin/v2/tenants/acme", _token("admin"),
                 {"adminRoles": ["bob"], "allowedClusters": ["standalone"]})[0] == 204
    assert _rest(token_broker, "PUT", "/admin/v2/namespaces/acme/ns", _token("bob"),
                 {"auth_policies": {"namespace_auth": {"dave": ["consume"]}}})[0] == 204
    assert _rest(token_broker, "POST", "/admin/v2/namespaces/acme/ns/permissions/carol",
                 _token("bob"), ["produce", "consume"])[0] == 204
    status, _, grants = _rest(token_broker, "GET", "/admin/v2/namespaces/acme/ns/permissions",
                              _token("bob"))
    assert status == 200 and grants == {"carol": ["consume", "produce"], "dave": ["consume"]}
    status, _, body = _rest(token_broker, "POST", "/admin/v2/namespaces/acme/ns/permissions/carol",
                            _token("bob"), ["fly"])
    assert status == 412 and "fly" in body["reason"]

    carol = make_client(token_broker.service_url,
                        authentication=pulsar.AuthenticationToken(_token("carol")))
    try:
        assert _round_trip(carol, "persistent://acme/ns/granted") == b"over tls"
    finally:
        carol.close()
    assert _rest(token_broker, "DELETE", "/admin/v2/namespaces/acme/ns/permissions/carol",
                 _token("bob"))[0] == 204
    carol = make_client(token_broker.service_url,
                        authentication=pulsar.AuthenticationToken(_token("carol")))
    try:
        with pytest.raises(pulsar.AuthorizationError) as refused:
            carol.create_producer("persistent://acme/ns/granted")
        assert refused.value is not None
    finally:
        carol.close()


def test_a_refused_topic_lookup_over_rest_is_401_as_pulsars(token_broker: Any) -> None:
    # Pulsar answers its topic operations (lookup, partitioned metadata) 401 when the role may
    # not use the topic; the C++ client's HTTP lookup reports that status.
    for path in ("/admin/v2/persistent/public/default/closed/partitions",
                 "/lookup/v2/topic/persistent/public/default/closed"):
        status, _, body = _rest(token_broker, "GET", path, _token("bob"))
        assert status == 401, path
        assert isinstance(body["reason"], str) and body["reason"]
    status, _, _ = _rest(token_broker, "GET", "/admin/v2/persistent/public/default/closed/partitions",
                         _token("admin"))
    assert status == 200


def test_https_listener_serves_the_admin_api(broker_factory: Callable[..., Any], pki: Pki) -> None:
    broker = broker_factory(config_overrides=_tls_overrides(pki))
    context = ssl.create_default_context(cafile=str(pki.ca.path))
    url = f"https://127.0.0.1:{broker.server.web_port_tls}/admin/v2/clusters/standalone"
    with urllib.request.urlopen(url, context=context, timeout=10) as response:
        cluster = json.loads(response.read())
    assert cluster["brokerServiceUrlTls"] == _tls_url(broker)
    assert cluster["serviceUrlTls"] == f"https://127.0.0.1:{broker.server.web_port_tls}"


def test_horae_admin_grants_with_a_token_and_refuses_without(
        token_broker: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from cli.admin.main import main

    url = ["--admin-url", token_broker.web_url]
    assert main([*url, "namespaces", "permissions", "public/default"]) == 1
    assert "HTTP 401" in capsys.readouterr().err
    admin = [*url, "--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationToken",
             "--auth-params", f"token:{_token('admin')}"]
    assert main([*admin, "namespaces", "grant-permission", "public/default", "--role", "erin",
                 "--actions", "produce,consume"]) == 0
    assert main(["--token", _token("admin"), *url, "namespaces", "permissions",
                 "public/default"]) == 0
    assert json.loads(capsys.readouterr().out) == {"erin": ["consume", "produce"]}
    assert main([*admin, "namespaces", "revoke-permission", "public/default", "--role",
                 "erin"]) == 0
    assert main([*admin, "namespaces", "permissions", "public/default"]) == 0
    assert json.loads(capsys.readouterr().out) == {}
    assert main([*url, "--auth-plugin", "nope", "namespaces", "permissions", "x/y"]) == 2
