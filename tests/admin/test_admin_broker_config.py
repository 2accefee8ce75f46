"""Pulsar's broker configuration routes: dynamic settings (applied at once, kept across a
restart), runtime and internal configuration, version."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from broker import __version__

from .conftest import Api, http

B = "/admin/v2/brokers"
T = "/admin/v2/persistent/public/default"


def test_dynamic_names_are_pulsars_dynamic_keys(api: Api) -> None:
    names = api("GET", B + "/configuration").body
    assert "allowAutoTopicCreation" in names and "defaultNumPartitions" in names
    assert "brokerServicePort" not in names
    assert api("GET", B + "/configuration/").body == names
    assert api("GET", B + "/configuration/values").body == {}


def test_update_applies_at_once_and_delete_restores(client: Any, api: Api) -> None:
    reply = api("POST", B + "/configuration/allowAutoTopicCreation/false")
    assert (reply.status, reply.body) == (200, None)
    assert api("GET", B + "/configuration/values").body == {"allowAutoTopicCreation": "false"}
    assert api("GET", B + "/configuration/runtime").body["allowAutoTopicCreation"] == "false"
    # a lookup of a topic that does not exist no longer creates it
    assert api("GET", T + "/dyn-new/partitions?checkAllowAutoCreation=true").status == 200
    assert api("GET", T + "/dyn-new/stats").status == 404
    assert api("DELETE", B + "/configuration/allowAutoTopicCreation").status == 200
    assert api("GET", B + "/configuration/values").body == {}
    assert api("GET", B + "/configuration/runtime").body["allowAutoTopicCreation"] == "true"
    client.create_producer("persistent://public/default/dyn-new").close()
    assert api("GET", T + "/dyn-new/stats").status == 200


def test_non_dynamic_and_unknown_keys_are_refused(api: Api) -> None:
    # the limits and the broker's max delivery delay are not dynamic in Pulsar 4.0 either
    names = api("GET", B + "/configuration").body
    static = ("maxProducersPerTopic", "maxConsumersPerTopic", "maxConsumersPerSubscription",
              "delayedDeliveryMaxDelayInMillis")
    assert not set(static) & set(names)
    for key in ("brokerServicePort", "noSuchKey", *static):
        reply = api("POST", B + f"/configuration/{key}/1")
        assert (reply.status, reply.reason) == (412, "Can't update non-dynamic configuration")
        reply = api("DELETE", B + f"/configuration/{key}")
        assert (reply.status, reply.reason) == (412, "Can't delete non-dynamic configuration")


def test_a_value_that_does_not_read_is_stored_but_not_applied(api: Api) -> None:
    """As Pulsar: the text is stored; the setting keeps its value in force."""
    value = '{"key/123":"https://example.com/%41"}'
    key = "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds"
    before = api("GET", B + "/configuration/runtime").body[key]
    reply = api("POST", B + f"/configuration/{key}/" + quote(value, safe=""))
    assert reply.status == 200
    assert api("GET", B + "/configuration/values").body == {key: value}
    assert api("GET", B + "/configuration/runtime").body[key] == before
    assert api("POST", B + "/configuration/allowAutoTopicCreationType/sometimes").status == 200
    runtime = api("GET", B + "/configuration/runtime").body
    assert runtime["allowAutoTopicCreationType"] == "non-partitioned"


def test_overrides_survive_a_restart(broker_factory: Any, tmp_path: Any) -> None:
    data = tmp_path / "restart"
    first = broker_factory(data_dir=data)
    assert http(first.web_url, "POST", B + "/configuration/defaultNumPartitions/3").status == 200
    first.stop()
    second = broker_factory(data_dir=data)
    assert http(second.web_url, "GET", B + "/configuration/values").body == {
        "defaultNumPartitions": "3"}
    assert http(second.web_url, "GET",
                B + "/configuration/runtime").body["defaultNumPartitions"] == "3"


def test_runtime_internal_and_version(api: Api) -> None:
    runtime = api("GET", B + "/configuration/runtime").body
    assert runtime["clusterName"] == "standalone" and runtime["webServicePort"] != ""
    assert all(isinstance(v, str) for v in runtime.values())
    internal = api("GET", B + "/internal-configuration").body
    assert internal["metadataStoreUrl"].startswith("sqlite:")
    # as Pulsar 4.0: the deprecated names repeat the metadata store's URL, no null keys
    assert internal["zookeeperServers"] == internal["metadataStoreUrl"]
    assert internal["configurationStoreServers"] == internal["metadataStoreUrl"]
    assert None not in internal.values()
    reply = api("GET", B + "/version")
    assert (reply.status, reply.body) == (200, __version__)


def test_who_may_call_the_new_routes() -> None:
    """Pulsar's rules: broker configuration is for super-users, version for any authenticated
    role; a topic's and a namespace's maintenance for the tenant's admins."""
    import pytest

    from broker.admin.auth import check_access
    from broker.config_loading import load_config
    from broker.security.authorization import AuthorizationService, NamespaceAuth
    from broker.security.errors import AuthorizationError

    class Store:
        def tenant_admin_roles(self, tenant: str) -> frozenset[str] | None:
            return frozenset({"acme-admin"}) if tenant == "acme" else None

        def namespace_auth(self, namespace: str) -> NamespaceAuth | None:
            return NamespaceAuth() if namespace == "acme/orders" else None

    service = AuthorizationService.from_config(load_config(None, {
        "authorizationEnabled": True, "superUserRoles": "root"}), Store())

    def allowed(role: str, method: str, path: str) -> bool:
        try:
            check_access(service, role, method, path)
        except AuthorizationError:
            return False
        return True

    topic = "/admin/v2/persistent/acme/orders/t"
    for method, path in (("POST", B + "/configuration/maxProducersPerTopic/1"),
                         ("DELETE", B + "/configuration/maxProducersPerTopic"),
                         ("GET", B + "/configuration"), ("GET", B + "/configuration/values"),
                         ("GET", B + "/configuration/runtime"),
                         ("GET", B + "/internal-configuration")):
        assert allowed("root", method, path)
        assert not allowed("acme-admin", method, path), path
    assert allowed("stranger", "GET", B + "/version")
    for method, path in (("DELETE", topic + "/truncate"), ("POST", topic + "/trim"),
                         ("GET", topic + "/messageid/0"), ("GET", topic + "/internal-info"),
                         ("POST", "/admin/v2/namespaces/acme/orders/clearBacklog")):
        assert allowed("acme-admin", method, path)
        assert not allowed("stranger", method, path), path
    with pytest.raises(AuthorizationError):
        check_access(service, "acme-admin", "GET", B + "/configuration/runtime")
    # Pulsar unloads a namespace (or a bundle of it) for super-users only
    for path in ("/admin/v2/namespaces/acme/orders/unload",
                 "/admin/v2/namespaces/acme/orders/0x00000000_0xffffffff/unload"):
        assert allowed("root", "PUT", path)
        assert not allowed("acme-admin", "PUT", path)

