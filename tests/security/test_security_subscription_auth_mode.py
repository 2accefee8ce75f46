"""The namespace ``subscriptionAuthMode`` over REST and ``horae-admin``, enforced at SUBSCRIBE
as Pulsar's authorization does: with ``Prefix`` a role may use only subscriptions whose name
starts with the role; super-users are not held to it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulsar
import pytest
from conftest import make_client

from cli.admin.main import main

from .test_security_consume_admin import SECURED, _call, _token

NS = "/admin/v2/namespaces/public/default"
TOPIC = "persistent://public/default/prefixed"


@pytest.fixture
def secured(broker_factory: Callable[..., Any]) -> Any:
    return broker_factory(config_overrides=dict(SECURED))


def test_prefix_mode_limits_a_roles_subscriptions(
        secured: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert _call(secured, "admin", "GET", NS + "/subscriptionAuthMode") == (200, "None")
    assert _call(secured, "admin", "POST", NS + "/permissions/reader", ["consume"])[0] == 204
    assert _call(secured, "admin", "POST", NS + "/subscriptionAuthMode", "Sideways")[0] == 400
    assert _call(secured, "reader", "POST", NS + "/subscriptionAuthMode", "Prefix")[0] == 403
    code = main(["--admin-url", secured.web_url, "--token", _token("admin"),
                 "namespaces", "set-subscription-auth-mode", "public/default", "-m", "Prefix"])
    assert code == 0, capsys.readouterr().err
    assert _call(secured, "admin", "GET", NS + "/subscriptionAuthMode") == (200, "Prefix")
    assert _call(secured, "admin", "GET", NS)[1]["subscription_auth_mode"] == "Prefix"
    reader = make_client(secured.service_url,
                         authentication=pulsar.AuthenticationToken(_token("reader")))
    admin = make_client(secured.service_url,
                        authentication=pulsar.AuthenticationToken(_token("admin")))
    try:
        with pytest.raises(pulsar.AuthorizationError):
            reader.subscribe(TOPIC, "other")
        reader.subscribe(TOPIC, "reader-sub").close()
        admin.subscribe(TOPIC, "anything").close()           # a super-user is not held to it
        assert _call(secured, "admin", "POST", NS + "/subscriptionAuthMode", None)[0] == 204
        reader.subscribe(TOPIC, "other").close()
    finally:
        reader.close()
        admin.close()
    assert _call(secured, "admin", "GET", NS + "/subscriptionAuthMode") == (200, "None")
