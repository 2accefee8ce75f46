"""Authentication and authorization on the binary protocol, over real sockets.

A broker with token authentication and authorization: CONNECT credentials decide the role
(refused: ERROR AuthenticationError "Failed to authenticate", then close), per-command
authorization answers the request with AuthorizationError and keeps the connection, expired
tokens are challenged (AUTH_CHALLENGE) and refreshed by AUTH_RESPONSE, an unfinished handshake
and surplus connections are closed.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

import jwt
import pytest
from broker_rawclient import RawClient

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.auth_commands import REFRESH_AUTH_DATA, encode_auth_response
from protocol.errors import ServerError

T = pb.BaseCommand
SECRET = b"s" * 32
SECURED = {
    "authenticationEnabled": True,
    "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
    "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
    "authorizationEnabled": True,
    "superUserRoles": "admin",
}


def token(sub: str, *, exp_in: float | None = None, key: bytes = SECRET) -> str:
    claims: dict[str, Any] = {"sub": sub}
    if exp_in is not None:
        claims["exp"] = int(time.time() + exp_in)
    return jwt.encode(claims, key, algorithm="HS256")


def connect_frame(credential: str | None, *, refresh: bool = False) -> bytes:
    cmd = T(type=T.CONNECT)
    cmd.connect.client_version = "raw"
    cmd.connect.protocol_version = 20
    if credential is not None:
        cmd.connect.auth_method_name = "token"
        cmd.connect.auth_data = credential.encode()
    if refresh:
        cmd.connect.feature_flags.supports_auth_refresh = True
    return C.encode_command(cmd)


@pytest.fixture
def secured(broker_factory: Callable[..., Any]) -> Any:
    return broker_factory(config_overrides=dict(SECURED))


def test_garbage_and_wrong_key_tokens_get_authentication_error_then_close(secured: Any) -> None:
    for credential in ("garbage", token("admin", key=b"k" * 32), token("admin", exp_in=-60)):
        with RawClient(secured.service_url) as raw:
            raw.send(connect_frame(credential))
            answer = raw.recv_command()
            assert answer.type == T.ERROR
            assert answer.error.error == ServerError.AuthenticationError
            assert answer.error.message == "Failed to authenticate"
            assert raw.is_closed_by_peer()


def test_no_credentials_and_no_anonymous_role_is_refused(secured: Any) -> None:
    with RawClient(secured.service_url) as raw:
        raw.send(connect_frame(None))
        answer = raw.recv_command()
        assert answer.type == T.ERROR and answer.error.error == ServerError.AuthenticationError
        assert raw.is_closed_by_peer()


def test_unauthorized_requests_get_authorization_error_and_the_connection_stays(secured: Any) -> None:
    topic = "persistent://public/default/guarded"
    with RawClient(secured.service_url) as raw:
        raw.send(connect_frame(token("bob")))
        assert raw.recv_command().type == T.CONNECTED
        producer = raw.request(C.encode_producer(topic, 1, 10))
        assert producer.type == T.ERROR and producer.error.request_id == 10
        assert producer.error.error == ServerError.AuthorizationError
        assert producer.error.message == "Client is not authorized to Publish"
        sub = raw.request(C.encode_subscribe(topic, "s", pb.Shared, 1, 11))
        assert sub.type == T.ERROR and sub.error.error == ServerError.AuthorizationError
        lookup = raw.request(C.encode_lookup(topic, 12))
        assert lookup.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Failed
        assert lookup.lookupTopicResponse.error == ServerError.AuthorizationError
        meta = raw.request(C.encode_partitioned_metadata(topic, 13))
        assert meta.partitionMetadataResponse.error == ServerError.AuthorizationError
        topics = raw.request(C.encode_get_topics_of_namespace(14, "public/default"))
        assert topics.type == T.ERROR and topics.error.error == ServerError.AuthorizationError
        assert raw.request(C.encode_ping()).type == T.PONG  # still open


def test_granted_role_produces_and_super_user_looks_up(broker_factory: Callable[..., Any]) -> None:
    broker = broker_factory(config_overrides=dict(SECURED))
    broker.call(broker.service.tenancy.set_auth_policies, "public/default",
                _grants({"bob": ["produce"]}))
    topic = "persistent://public/default/granted"
    with RawClient(broker.service_url) as raw:
        raw.send(connect_frame(token("bob")))
        assert raw.recv_command().type == T.CONNECTED
        assert raw.create_producer(topic).type == T.PRODUCER_SUCCESS
        sub = raw.request(C.encode_subscribe(topic, "s", pb.Shared, 1, 20))
        assert sub.type == T.ERROR and sub.error.error == ServerError.AuthorizationError
    with RawClient(broker.service_url) as raw:
        raw.send(connect_frame(token("admin")))
        assert raw.recv_command().type == T.CONNECTED
        answer = raw.request(C.encode_lookup(topic, 5)).lookupTopicResponse
        assert answer.brokerServiceUrl == broker.service_url
        assert not answer.HasField("brokerServiceUrlTls")  # no TLS listener


def test_producer_initial_subscription_needs_the_right_to_subscribe(
        broker_factory: Callable[..., Any]) -> None:
    broker = broker_factory(config_overrides=dict(SECURED))
    broker.call(broker.service.tenancy.set_auth_policies, "public/default",
                _grants({"bob": ["produce"]}))
    cmd = T(type=T.PRODUCER)
    cmd.producer.topic = "persistent://public/default/initial-sub-guarded"
    cmd.producer.producer_id = 1
    cmd.producer.request_id = 21
    cmd.producer.initial_subscription_name = "init-sub"
    with RawClient(broker.service_url) as raw:
        raw.send(connect_frame(token("bob")))
        assert raw.recv_command().type == T.CONNECTED
        answer = raw.request(C.encode_command(cmd))
        assert answer.type == T.ERROR and answer.error.request_id == 21
        assert answer.error.error == ServerError.AuthorizationError
        cmd.producer.ClearField("initial_subscription_name")
        cmd.producer.request_id = 22
        assert raw.request(C.encode_command(cmd)).type == T.PRODUCER_SUCCESS


def _grants(namespace_auth: dict[str, list[str]]) -> Any:
    from broker.security.authorization import AuthPolicies
    return AuthPolicies.from_json({"namespace_auth": namespace_auth})


def test_expired_token_is_challenged_and_refreshed(broker_factory: Callable[..., Any]) -> None:
    broker = broker_factory(config_overrides={**SECURED, "authenticationRefreshCheckSeconds": 1})
    with RawClient(broker.service_url, timeout=10) as raw:
        raw.send(connect_frame(token("admin", exp_in=1), refresh=True))
        assert raw.recv_command().type == T.CONNECTED
        challenge = raw.recv_command(timeout=8)
        assert challenge.type == T.AUTH_CHALLENGE
        assert challenge.authChallenge.challenge.auth_method_name == "token"
        assert challenge.authChallenge.challenge.auth_data == REFRESH_AUTH_DATA
        raw.send(encode_auth_response("raw", "token", token("admin", exp_in=600).encode()))
        assert not raw.is_closed_by_peer(timeout=2.5)  # two more checks passed
        assert raw.request(C.encode_ping()).type == T.PONG


def test_expired_token_without_refresh_support_closes(broker_factory: Callable[..., Any]) -> None:
    broker = broker_factory(config_overrides={**SECURED, "authenticationRefreshCheckSeconds": 1})
    with RawClient(broker.service_url, timeout=10) as raw:
        raw.send(connect_frame(token("admin", exp_in=1)))
        assert raw.recv_command().type == T.CONNECTED
        assert raw.is_closed_by_peer(timeout=8)


def test_refresh_with_another_role_closes(broker_factory: Callable[..., Any]) -> None:
    broker = broker_factory(config_overrides={**SECURED, "authenticationRefreshCheckSeconds": 1})
    with RawClient(broker.service_url, timeout=10) as raw:
        raw.send(connect_frame(token("admin", exp_in=1), refresh=True))
        assert raw.recv_command().type == T.CONNECTED
        assert raw.recv_command(timeout=8).type == T.AUTH_CHALLENGE
        raw.send(encode_auth_response("raw", "token", token("mallory", exp_in=600).encode()))
        answer = raw.recv_command()
        assert answer.type == T.ERROR and answer.error.error == ServerError.AuthenticationError
        assert raw.is_closed_by_peer()


def test_connection_that_never_sends_connect_is_closed(broker_factory: Callable[..., Any]) -> None:
    broker = broker_factory(config_overrides={"handshakeTimeoutSeconds": 0.3})
    with RawClient(broker.service_url) as raw:
        started = time.monotonic()
        assert raw.is_closed_by_peer(timeout=5)
        assert time.monotonic() - started < 4


def test_connections_beyond_the_per_ip_limit_are_closed(broker_factory: Callable[..., Any]) -> None:
    broker = broker_factory(config_overrides={"brokerMaxConnectionsPerIp": 1})
    with RawClient(broker.service_url) as first:
        first.handshake()
        with RawClient(broker.service_url) as second:
            assert second.is_closed_by_peer()
        assert first.request(C.encode_ping()).type == T.PONG
    with RawClient(broker.service_url) as again:  # the slot was released
        again.handshake()


def test_producer_and_consumer_limits_refuse_the_request_and_keep_the_connection(
        broker_factory: Callable[..., Any]) -> None:
    broker = broker_factory(config_overrides={
        "maxProducersPerTopic": 1, "maxConsumersPerTopic": 2, "maxConsumersPerSubscription": 1})
    topic = "persistent://public/default/limited"
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        assert raw.create_producer(topic, 1).type == T.PRODUCER_SUCCESS
        refused = raw.create_producer(topic, 2)
        assert refused.type == T.ERROR and refused.error.error == ServerError.ProducerBusy
        assert refused.error.message == "Topic reached max producers limit"
        assert raw.request(C.encode_subscribe(topic, "a", pb.Shared, 1, 30)).type == T.SUCCESS
        same_sub = raw.request(C.encode_subscribe(topic, "a", pb.Shared, 2, 31))
        assert same_sub.type == T.ERROR and same_sub.error.error == ServerError.ConsumerBusy
        assert same_sub.error.message == "Subscription reached max consumers limit"
        assert raw.request(C.encode_subscribe(topic, "b", pb.Shared, 3, 32)).type == T.SUCCESS
        third = raw.request(C.encode_subscribe(topic, "c", pb.Shared, 4, 33))
        assert third.type == T.ERROR and third.error.message == "Topic reached max consumers limit"
        assert raw.request(C.encode_ping()).type == T.PONG


def test_non_loopback_listener_without_authentication_warns_at_start() -> None:
    from broker.config_loading import load_config
    from broker.server import insecure_listener_warning

    warning = insecure_listener_warning(load_config(None, {"bindAddress": "0.0.0.0"}))
    assert warning is not None and "0.0.0.0" in warning
    assert insecure_listener_warning(load_config(None, {"bindAddress": "127.0.0.1"})) is None
    assert insecure_listener_warning(load_config(None, {"bindAddress": "::1"})) is None
    assert insecure_listener_warning(load_config(None, {**SECURED, "bindAddress": "0.0.0.0"})) is None


def _get_or_create_schema(request_id: int, topic: str, schema_type: int, data: bytes) -> bytes:
    cmd = T(type=T.GET_OR_CREATE_SCHEMA)
    cmd.getOrCreateSchema.request_id = request_id
    cmd.getOrCreateSchema.topic = topic
    cmd.getOrCreateSchema.schema.name = "s"
    cmd.getOrCreateSchema.schema.schema_data = data
    cmd.getOrCreateSchema.schema.type = schema_type  # type: ignore[assignment]
    return C.encode_command(cmd)


def _rest_status(broker: Any, path: str, credential: str) -> int:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(broker.web_url + path,
                                 headers={"Authorization": "Bearer " + credential})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_schema_commands_need_lookup_or_produce_permission(broker_factory: Callable[..., Any]) -> None:
    broker = broker_factory(config_overrides=dict(SECURED))
    broker.call(broker.service.tenancy.set_auth_policies, "public/default",
                _grants({"owner": ["produce"], "reader": ["consume"]}))
    topic = "persistent://public/default/schema-guarded"
    record = b'{"type":"record","name":"R","fields":[{"name":"x","type":"int"}]}'
    with RawClient(broker.service_url) as raw:
        raw.send(connect_frame(token("owner")))
        assert raw.recv_command().type == T.CONNECTED
        assert raw.create_producer(topic).type == T.PRODUCER_SUCCESS  # the topic, no schema yet
    with RawClient(broker.service_url) as stranger:
        stranger.send(connect_frame(token("bob")))
        assert stranger.recv_command().type == T.CONNECTED
        created = stranger.request(_get_or_create_schema(40, topic, pb.Schema.Avro, record))
        assert created.type == T.GET_OR_CREATE_SCHEMA_RESPONSE
        assert created.getOrCreateSchemaResponse.request_id == 40
        assert created.getOrCreateSchemaResponse.error_code == ServerError.AuthorizationError
        assert created.getOrCreateSchemaResponse.error_message == \
            "Client is not authorized to GetOrCreateSchema"
        read = stranger.request(C.encode_get_schema(41, topic)).getSchemaResponse
        assert (read.request_id, read.error_code) == (41, ServerError.AuthorizationError)
        assert read.error_message == "Client is not authorized to GetSchema"
        assert stranger.request(C.encode_ping()).type == T.PONG  # the connection stays
    with RawClient(broker.service_url) as owner:
        owner.send(connect_frame(token("owner")))
        assert owner.recv_command().type == T.CONNECTED
        nothing = owner.request(C.encode_get_schema(50, topic)).getSchemaResponse
        assert nothing.error_code == ServerError.TopicNotFound  # the stranger registered nothing
        mine = owner.request(_get_or_create_schema(51, topic, pb.Schema.String, b""))
        assert not mine.getOrCreateSchemaResponse.HasField("error_code")
    with RawClient(broker.service_url) as reader:
        reader.send(connect_frame(token("reader")))
        assert reader.recv_command().type == T.CONNECTED
        latest = reader.request(C.encode_get_schema(60, topic)).getSchemaResponse
        assert not latest.HasField("error_code") and latest.schema.type == pb.Schema.String
        other = reader.request(_get_or_create_schema(61, topic, pb.Schema.Avro, record))
        assert other.getOrCreateSchemaResponse.error_code == ServerError.AuthorizationError
    with RawClient(broker.service_url) as stranger:
        stranger.send(connect_frame(token("bob")))
        assert stranger.recv_command().type == T.CONNECTED
        refused = stranger.request(C.encode_get_schema(70, topic)).getSchemaResponse
        assert refused.error_code == ServerError.AuthorizationError
        assert not refused.HasField("schema")
    # The REST schema routes: reading needs lookup, as on the wire (Pulsar's SchemasResource).
    path = "/admin/v2/schemas/public/default/schema-guarded/schema"
    assert _rest_status(broker, path, token("admin")) == 200
    assert _rest_status(broker, path, token("owner")) == 200
    assert _rest_status(broker, path, token("reader")) == 200
    assert _rest_status(broker, path, token("bob")) == 403


def test_refused_connects_are_logged_at_warn_with_the_reason_and_counted(
        secured: Any, caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import urllib.request

    caplog.set_level(logging.WARNING, logger="horae.handshake")
    for credential in ("garbage", None):
        with RawClient(secured.service_url) as raw:
            raw.send(connect_frame(credential))
            assert raw.recv_command().type == T.ERROR
            assert raw.is_closed_by_peer()
    with RawClient(secured.service_url) as raw:
        raw.send(connect_frame(token("admin")))
        assert raw.recv_command().type == T.CONNECTED
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("refused by AuthenticationProviderToken (method token, INVALID_TOKEN): "
               "Failed to authentication token" in line for line in lines), lines
    assert any("refused by AuthenticationService (method none, AUTH_REQUIRED): No anonymous "
               "role, and the client sent no credentials" in line
               and "configured providers: token" in line for line in lines), lines
    assert not any("garbage" in line for line in lines)  # the credential never reaches the log
    with urllib.request.urlopen(secured.web_url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    assert ('pulsar_authentication_failures_total{auth_method="token",cluster="standalone",'
            'provider_name="AuthenticationProviderToken",reason="INVALID_TOKEN"} 1.0') in text
    assert ('pulsar_authentication_failures_total{auth_method="none",cluster="standalone",'
            'provider_name="AuthenticationService",reason="AUTH_REQUIRED"} 1.0') in text
    assert ('pulsar_authentication_success_total{auth_method="token",cluster="standalone",'
            'provider_name="AuthenticationProviderToken"} 1.0') in text


def test_refused_rest_requests_are_logged_at_warn_and_counted(
        secured: Any, caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import urllib.error
    import urllib.request

    caplog.set_level(logging.WARNING, logger="horae.admin.auth")
    request = urllib.request.Request(secured.web_url + "/admin/v2/tenants",
                                     headers={"Authorization": "Bearer garbage"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("(GET /admin/v2/tenants) refused by AuthenticationProviderToken (method token, "
               "INVALID_TOKEN): Failed to authentication token" in line for line in lines), lines
    with urllib.request.urlopen(secured.web_url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    assert ('pulsar_authentication_failures_total{auth_method="token",cluster="standalone",'
            'provider_name="AuthenticationProviderToken",reason="INVALID_TOKEN"} 1.0') in text


def test_tenant_admin_routes_of_a_missing_tenant_are_404_before_403(
        broker_factory: Callable[..., Any]) -> None:
    """Pulsar looks the tenant up before it checks its admin roles (isSuperUserOrAdmin), so a
    role that administers nothing learns that a tenant is missing (404), not that it may not
    touch it (403); an existing tenant stays 403 (401 for a topic operation)."""
    broker = broker_factory(config_overrides=dict(SECURED))
    for path in ("/admin/v2/namespaces/no-such-tenant/ns/autoTopicCreation",
                 "/admin/v2/namespaces/no-such-tenant",
                 "/admin/v2/persistent/no-such-tenant/ns/t/stats"):
        assert _rest_status(broker, path, token("bob")) == 404, path
        assert _rest_status(broker, path, token("admin")) == 404, path
    assert _rest_status(broker, "/admin/v2/namespaces/public/default/autoTopicCreation",
                        token("bob")) == 403
    # a topic operation refused on an existing tenant: 401, as Pulsar's validateTopicOperation
    assert _rest_status(broker, "/admin/v2/persistent/public/default/t/stats",
                        token("bob")) == 401
    # Pulsar's getTenantAdmin (validateBothSuperUserAndTenantOperation) looks the tenant up too
    assert _rest_status(broker, "/admin/v2/tenants/no-such-tenant", token("bob")) == 404


def test_subscription_permissions_granted_over_rest_restrict_the_subscription(
        broker_factory: Callable[..., Any]) -> None:
    import urllib.request

    broker = broker_factory(config_overrides=dict(SECURED))
    broker.call(broker.service.tenancy.set_auth_policies, "public/default",
                _grants({"reader": ["consume"], "other": ["consume"]}))
    req = urllib.request.Request(
        broker.web_url + "/admin/v2/namespaces/public/default/permissions/subscription/audited",
        data=b'["reader"]', method="POST",
        headers={"Authorization": "Bearer " + token("admin"), "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 204
    topic = "persistent://public/default/audited-topic"
    for role, allowed in (("other", False), ("reader", True)):
        with RawClient(broker.service_url) as raw:
            raw.send(connect_frame(token(role)))
            assert raw.recv_command().type == T.CONNECTED
            answer = raw.request(C.encode_subscribe(topic, "audited", pb.Shared, 1, 20))
            if allowed:
                assert answer.type == T.SUCCESS, answer
            else:
                assert answer.type == T.ERROR, answer
                assert answer.error.error == ServerError.AuthorizationError
