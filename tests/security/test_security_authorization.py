"""The authorization matrix: each role x each operation, with Pulsar's rules."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from broker.config_loading import load_config
from broker.security.authorization import (
    AuthAction,
    AuthorizationService,
    AuthPolicies,
    NamespaceAuth,
    SubscriptionAuthMode,
)
from broker.security.errors import AuthorizationError
from protocol.errors import ServerError, TopicNotFoundError

TOPIC = "persistent://acme/orders/created"
PARTITION = "persistent://acme/orders/sharded-partition-3"
OTHER_NS_TOPIC = "persistent://acme/billing/invoices"
OTHER_TENANT_TOPIC = "persistent://rival/orders/created"

POLICIES_JSON = {
    "namespace_auth": {"ns-producer": ["produce"], "ns-both": ["produce", "consume"],
                       "fn-dev": ["functions"], "svc-*": ["consume"]},
    "destination_auth": {TOPIC: {"topic-consumer": ["consume"]},
                         "persistent://acme/orders/sharded": {"part-producer": ["produce"]}},
    "subscription_auth_roles": {"audited": ["ns-both"]},
}


@dataclass
class MemoryStore:
    """A tiny AuthPolicyStore for the tests."""

    admins: dict[str, frozenset[str]] = field(default_factory=dict)
    namespaces: dict[str, NamespaceAuth] = field(default_factory=dict)

    def tenant_admin_roles(self, tenant: str) -> frozenset[str] | None:
        return self.admins.get(tenant)

    def namespace_auth(self, namespace: str) -> NamespaceAuth | None:
        return self.namespaces.get(namespace)


def _service(*, wildcards: bool = False, mode: SubscriptionAuthMode = SubscriptionAuthMode.NONE,
             enabled: bool = True) -> AuthorizationService:
    store = MemoryStore(
        admins={"acme": frozenset({"acme-admin"}), "rival": frozenset({"rival-admin"})},
        namespaces={"acme/orders": NamespaceAuth(AuthPolicies.from_json(POLICIES_JSON), mode),
                    "acme/billing": NamespaceAuth(),
                    "rival/orders": NamespaceAuth()})
    config = load_config(None, {
        "authorizationEnabled": enabled, "superUserRoles": "root, ops",
        "authorizationAllowWildcardsMatching": wildcards})
    return AuthorizationService.from_config(config, store)


# role -> (produce TOPIC, consume TOPIC sub "s", lookup TOPIC, produce OTHER_NS, admin acme,
#          admin rival, functions acme/orders)
MATRIX = {
    "root":           (True, True, True, True, True, True, True),
    "acme-admin":     (True, True, True, True, True, False, True),
    "rival-admin":    (False, False, False, False, False, True, False),
    "ns-producer":    (True, False, True, False, False, False, False),
    "ns-both":        (True, True, True, False, False, False, False),
    "topic-consumer": (False, True, True, False, False, False, False),
    "fn-dev":         (False, False, False, False, False, False, True),
    "svc-reader":     (False, False, False, False, False, False, False),
    "stranger":       (False, False, False, False, False, False, False),
}


@pytest.mark.parametrize("role", sorted(MATRIX))
def test_role_by_operation_matrix(role: str) -> None:
    authz = _service()
    got = (authz.can_produce(TOPIC, role), authz.can_consume(TOPIC, role, "s"),
           authz.can_lookup(TOPIC, role), authz.can_produce(OTHER_NS_TOPIC, role),
           authz.is_tenant_admin("acme", role), authz.is_tenant_admin("rival", role),
           authz.can_use_functions("acme/orders", role))
    assert got == MATRIX[role]


def test_disabled_authorization_allows_everything() -> None:
    authz = _service(enabled=False)
    assert authz.can_produce(OTHER_TENANT_TOPIC, "stranger")
    assert authz.is_super_user("stranger")


def test_partition_inherits_partitioned_topic_grant() -> None:
    authz = _service()
    assert authz.can_produce(PARTITION, "part-producer")
    assert not authz.can_consume(PARTITION, "part-producer", "s")


def test_wildcard_grants_only_when_enabled() -> None:
    assert not _service().can_consume(TOPIC, "svc-reader", "s")
    assert _service(wildcards=True).can_consume(TOPIC, "svc-reader", "s")
    assert not _service(wildcards=True).can_consume(TOPIC, "other-reader", "s")


def test_subscription_roles_restrict_a_subscription() -> None:
    authz = _service()
    assert authz.can_consume(TOPIC, "ns-both", "audited")
    assert not authz.can_consume(TOPIC, "topic-consumer", "audited")
    assert authz.can_consume(TOPIC, "acme-admin", "audited")  # admins pass every check
    with pytest.raises(AuthorizationError) as info:
        authz.require_consume(TOPIC, "topic-consumer", "audited")
    assert str(info.value) == "Client is not authorized to subscribe"


def test_prefix_subscription_mode() -> None:
    authz = _service(mode=SubscriptionAuthMode.PREFIX)
    assert authz.can_consume(TOPIC, "topic-consumer", "topic-consumer-sub")
    with pytest.raises(AuthorizationError) as info:
        authz.require_consume(TOPIC, "topic-consumer", "someone-else")
    assert "needs to be prefixed by the authentication role" in str(info.value)


def test_require_texts_match_pulsar() -> None:
    authz = _service()
    cases = [
        (lambda: authz.require_produce(TOPIC, "stranger"), "Client is not authorized to Publish"),
        (lambda: authz.require_consume(TOPIC, "stranger", "s"), "Client is not authorized to subscribe"),
        (lambda: authz.require_lookup(TOPIC, "stranger"), "Client is not authorized to Perform Lookup"),
        (lambda: authz.require_lookup(TOPIC, "stranger", partitioned_metadata=True),
         "Client is not authorized to Get Partition Metadata"),
        (lambda: authz.require_tenant_admin("acme", "stranger"),
         "Don't have permission to administrate resources on this tenant"),
        (lambda: authz.require_super_user("acme-admin"), "This operation requires super-user access"),
    ]
    for call, text in cases:
        with pytest.raises(AuthorizationError) as info:
            call()
        assert str(info.value) == text
    authz.require_produce(TOPIC, "ns-producer")  # allowed: no exception


def test_schema_reads_need_lookup_and_registration_needs_produce() -> None:
    authz = _service()
    for role in ("root", "acme-admin", "ns-producer", "ns-both"):
        authz.require_get_schema(TOPIC, role)
        authz.require_get_or_create_schema(TOPIC, role)
    authz.require_get_schema(TOPIC, "topic-consumer")
    with pytest.raises(AuthorizationError) as info:
        authz.require_get_or_create_schema(TOPIC, "topic-consumer")
    assert str(info.value) == "Client is not authorized to GetOrCreateSchema"
    for role in ("stranger", "rival-admin", "fn-dev"):
        with pytest.raises(AuthorizationError) as info:
            authz.require_get_schema(TOPIC, role)
        assert str(info.value) == "Client is not authorized to GetSchema"
        with pytest.raises(AuthorizationError):
            authz.require_get_or_create_schema(TOPIC, role)
    authz.require_get_or_create_schema(PARTITION, "part-producer")  # the partitioned topic's grant


def test_unknown_namespace_or_tenant_grants_nothing() -> None:
    authz = _service()
    assert not authz.can_produce("persistent://acme/missing/t", "ns-producer")
    assert not authz.is_tenant_admin("ghost", "acme-admin")


def test_partitioned_metadata_in_a_missing_tenant_is_topic_not_found() -> None:
    authz = _service()
    with pytest.raises(TopicNotFoundError) as info:
        authz.require_lookup("persistent://ghost/ns/t", "stranger", partitioned_metadata=True)
    assert info.value.code is ServerError.TopicNotFound
    assert info.value.message == "Tenant or namespace or topic does not exist: ghost/ns"
    with pytest.raises(AuthorizationError) as lookup:  # LOOKUP keeps Pulsar's refusal
        authz.require_lookup("persistent://ghost/ns/t", "stranger")
    assert str(lookup.value) == "Client is not authorized to Perform Lookup"
    with pytest.raises(AuthorizationError) as existing:  # an existing tenant: not authorized
        authz.require_lookup("persistent://acme/missing/t", "stranger", partitioned_metadata=True)
    assert str(existing.value) == "Client is not authorized to Get Partition Metadata"
    authz.require_lookup("persistent://ghost/ns/t", "root", partitioned_metadata=True)


def test_auth_policies_json_round_trip_and_edits() -> None:
    policies = AuthPolicies.from_json(POLICIES_JSON)
    assert AuthPolicies.from_json(policies.to_json()) == policies
    edited = (policies.grant_namespace("new", [AuthAction.CONSUME])
              .grant_topic(TOPIC, "new", [AuthAction.PRODUCE])
              .revoke_namespace("ns-producer")
              .revoke_topic(TOPIC, "topic-consumer")
              .with_subscription_roles("audited", []))
    body = edited.to_json()
    assert body["namespace_auth"]["new"] == ["consume"]  # type: ignore[index]
    assert "ns-producer" not in body["namespace_auth"]  # type: ignore[operator]
    assert body["destination_auth"] == {  # type: ignore[comparison-overlap]
        TOPIC: {"new": ["produce"]},
        "persistent://acme/orders/sharded": {"part-producer": ["produce"]}}
    assert body["subscription_auth_roles"] == {}
    assert policies.to_json()["namespace_auth"]["ns-producer"] == ["produce"]  # type: ignore[index]


@pytest.mark.parametrize("body, fragment", [
    ({"namespace_auth": {"r": ["fly"]}}, "unknown action 'fly'"),
    ({"namespace_auth": {"r": "produce"}}, "must be a list"),
    ({"destination_auth": {"t": ["produce"]}}, "must be an object"),
    ([], "must be an object"),
])
def test_bad_auth_policies_bodies(body: object, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        AuthPolicies.from_json(body)
    assert fragment in str(info.value)


def test_namespace_auth_from_pulsar_policies_body() -> None:
    ns = NamespaceAuth.from_policies({"auth_policies": POLICIES_JSON,
                                      "subscription_auth_mode": "Prefix", "deduplicationEnabled": True})
    assert ns.subscription_auth_mode is SubscriptionAuthMode.PREFIX
    assert ns.auth_policies.namespace_auth["ns-producer"] == frozenset({AuthAction.PRODUCE})
    assert NamespaceAuth.from_policies({}) == NamespaceAuth()
    with pytest.raises(ValueError) as info:
        NamespaceAuth.from_policies({"subscription_auth_mode": "Suffix"})
    assert "subscription_auth_mode" in str(info.value)


@pytest.mark.parametrize(("role", "read", "register", "delete"), [
    ("root", True, True, True),
    ("acme-admin", True, True, True),          # a tenant admin may use its topics' schemas
    ("ns-producer", True, True, False),
    ("topic-consumer", True, False, False),    # lookup reads, only produce registers
    ("rival-admin", False, False, False),
    ("stranger", False, False, False),
])
def test_rest_schema_routes_follow_pulsars_schema_resource_rules(
        role: str, read: bool, register: bool, delete: bool) -> None:
    from broker.admin.auth import check_access

    service = _service()
    base = "/admin/v2/schemas/acme/orders/created"

    def allowed(method: str, path: str) -> bool:
        try:
            check_access(service, role, method, path)
        except AuthorizationError:
            return False
        return True

    assert allowed("GET", f"{base}/schema") is read
    assert allowed("GET", f"{base}/schema/3") is read
    assert allowed("GET", f"{base}/schemas") is read
    assert allowed("POST", f"{base}/compatibility") is read
    assert allowed("POST", f"{base}/version") is read
    assert allowed("POST", f"{base}/schema") is register
    assert allowed("DELETE", f"{base}/schema") is delete


def test_rest_tenant_admin_check_on_a_missing_tenant_is_tenant_missing() -> None:
    from broker.admin.auth import TenantMissing, check_access

    service = _service()
    for path in ("/admin/v2/namespaces/nowhere/ns/retention", "/admin/v2/namespaces/nowhere",
                 "/admin/v2/persistent/nowhere/ns/t/stats"):
        with pytest.raises(TenantMissing, match="Tenant does not exist"):
            check_access(service, "stranger", "POST", path)
        check_access(service, "root", "POST", path)  # a super-user reaches the handler
    with pytest.raises(AuthorizationError) as refused:
        check_access(service, "stranger", "POST", "/admin/v2/namespaces/acme/orders/retention")
    assert not isinstance(refused.value, TenantMissing)


def _rest_allowed(service: AuthorizationService, role: str, method: str,
                  path: str) -> bool | str:
    """True, or the refusal's text prefixed with 401/403 as the middleware answers it."""
    from broker.admin.auth import TenantMissing, TopicLookupRefused, check_access

    try:
        check_access(service, role, method, path)
    except TopicLookupRefused as exc:
        return f"401 {exc}"
    except TenantMissing as exc:
        return f"404 {exc}"
    except AuthorizationError as exc:
        return f"403 {exc}"
    return True


T = "/admin/v2/persistent/acme/orders/created"
SUBSCRIPTION_OPERATIONS = [
    ("GET", f"{T}/subscription/s/position/1", "PEEK_MESSAGES"),
    ("POST", f"{T}/subscription/s/skip/3", "SKIP"),
    ("POST", f"{T}/subscription/s/skip_all", "SKIP"),
    ("POST", f"{T}/subscription/s/expireMessages/60", "EXPIRE_MESSAGES"),
    ("POST", f"{T}/subscription/s/expireMessages", "EXPIRE_MESSAGES"),
    ("POST", f"{T}/subscription/s/resetcursor/0", "RESET_CURSOR"),
    ("POST", f"{T}/subscription/s/resetcursor", "RESET_CURSOR"),
    ("PUT", f"{T}/subscription/s", "SUBSCRIBE"),
    ("DELETE", f"{T}/subscription/s", "UNSUBSCRIBE"),
    ("POST", f"{T}/subscription/s/analyzeBacklog", "CONSUME"),
    ("GET", f"{T}/subscription/s/properties", "CONSUME"),
    ("PUT", f"{T}/subscription/s/properties", "CONSUME"),
    ("GET", f"{T}/subscriptions", "GET_SUBSCRIPTIONS"),
    ("POST", f"{T}/all_subscription/expireMessages/60", "EXPIRE_MESSAGES"),
    ("GET", f"{T}/examinemessage", "PEEK_MESSAGES"),
    ("GET", f"{T}/ledger/1/entry/2", "PEEK_MESSAGES"),
    ("GET", f"{T}/messageid/0", "PEEK_MESSAGES"),
    ("GET", f"{T}/lastMessageId", "PEEK_MESSAGES"),
    ("PUT", f"{T}/backlogSize", "GET_BACKLOG_SIZE"),
]


@pytest.mark.parametrize(("method", "path", "operation"), SUBSCRIPTION_OPERATIONS)
def test_consume_permission_allows_the_subscription_operations_as_pulsar(
        method: str, path: str, operation: str) -> None:
    """Pulsar's allowTopicOperation: consume grants these; produce alone does not; a tenant
    admin may; the refusal is 401 with validateTopicOperation's text."""
    authz = _service()
    for role in ("topic-consumer", "ns-both", "acme-admin", "root"):
        assert _rest_allowed(authz, role, method, path) is True, role
    refused = (f"401 Unauthorized to validateTopicOperation for operation [{operation}] on "
               "topic [persistent://acme/orders/created]")
    for role in ("ns-producer", "stranger", "rival-admin"):
        assert _rest_allowed(authz, role, method, path) == refused, role


def test_subscription_roles_and_tenant_admin_only_operations_stay_as_pulsar() -> None:
    authz = _service()
    peek_audited = f"{T}/subscription/audited/position/1"
    assert _rest_allowed(authz, "ns-both", "GET", peek_audited) is True   # one of its roles
    assert str(_rest_allowed(authz, "topic-consumer", "GET", peek_audited)).startswith(
        "401 Unauthorized to validateTopicOperation for operation [PEEK_MESSAGES]")
    # stats: produce or consume (lookup)
    assert _rest_allowed(authz, "ns-producer", "GET", f"{T}/stats") is True
    assert _rest_allowed(authz, "stranger", "GET", f"{T}/internalStats") == (
        "401 Unauthorized to validateTopicOperation for operation [GET_STATS] on topic "
        "[persistent://acme/orders/created]")
    # terminate, unload, compaction, policies: tenant admins only
    for method, path in (("POST", f"{T}/terminate"), ("PUT", f"{T}/unload"),
                         ("PUT", f"{T}/compaction"), ("POST", f"{T}/maxConsumers"),
                         ("DELETE", f"{T}/truncate")):
        assert _rest_allowed(authz, "topic-consumer", method, path) == \
            "403 Don't have permission to administrate resources on this tenant"
        assert _rest_allowed(authz, "acme-admin", method, path) is True


def test_namespace_grants_allow_listing_unsubscribing_and_clearing_as_pulsar() -> None:
    authz = _service()
    ns = "/admin/v2/namespaces/acme/orders"
    for path in ("/admin/v2/persistent/acme/orders", "/admin/v2/persistent/acme/orders/partitioned",
                 f"{ns}/topics"):
        assert _rest_allowed(authz, "ns-producer", "GET", path) is True
        assert _rest_allowed(authz, "topic-consumer", "GET", path) == (
            "403 Unauthorized to validateNamespaceOperation for operation [GET_TOPICS] on "
            "namespace [acme/orders]")
    for path in (f"{ns}/unsubscribe/s", f"{ns}/clearBacklog", f"{ns}/clearBacklog/s",
                 f"{ns}/0x00000000_0xffffffff/unsubscribe/s"):
        assert _rest_allowed(authz, "ns-both", "POST", path) is True
        assert _rest_allowed(authz, "ns-producer", "POST", path) == (
            "403 Unauthorized to validateNamespaceOperation for operation "
            f"[{'UNSUBSCRIBE' if 'unsubscribe' in path else 'CLEAR_BACKLOG'}] on namespace "
            "[acme/orders]")
    assert _rest_allowed(authz, "acme-admin", "PUT", f"{ns}/unload") == \
        "403 This operation requires super-user access"


def test_a_tenant_admin_check_on_a_missing_tenant_is_404_as_pulsar() -> None:
    """validateAdminAccessForTenant looks the tenant up before the role."""
    authz = _service()
    for method, path in (("POST", "/admin/v2/namespaces/ghost/ns/autoTopicCreation"),
                         ("GET", "/admin/v2/tenants/ghost"),
                         ("POST", "/admin/v2/persistent/ghost/ns/t/terminate")):
        assert _rest_allowed(authz, "acme-admin", method, path) == "404 Tenant does not exist"
        assert _rest_allowed(authz, "root", method, path) is True   # the handler answers 404
    assert _rest_allowed(authz, "rival-admin", "POST",
                         "/admin/v2/namespaces/acme/orders/autoTopicCreation") == \
        "403 Don't have permission to administrate resources on this tenant"


def test_resource_groups_are_super_user_only_and_a_namespaces_group_tenant_admin() -> None:
    service = _service()
    for method, path in (("GET", "/admin/v2/resourcegroups"),
                         ("GET", "/admin/v2/resourcegroups/g"),
                         ("PUT", "/admin/v2/resourcegroups/g"),
                         ("DELETE", "/admin/v2/resourcegroups/g")):
        assert _rest_allowed(service, "root", method, path) is True
        assert str(_rest_allowed(service, "acme-admin", method, path)).startswith("403 ")
    ns = "/admin/v2/namespaces/acme/orders/resourcegroup"
    for method, path in (("GET", ns), ("DELETE", ns), ("POST", ns + "/g")):
        assert _rest_allowed(service, "acme-admin", method, path) is True
        assert str(_rest_allowed(service, "ns-producer", method, path)).startswith("403 ")
        assert str(_rest_allowed(service, "rival-admin", method, path)).startswith("403 ")


def test_shadow_topic_routes_need_a_tenant_admin() -> None:
    # Pulsar's validateTopicPolicyOperation(SHADOW_TOPIC) on the source; creating the shadow is
    # a topic create (tenant admin); a consumer of a shadow needs consume on the shadow itself
    service = _service()
    route = "/admin/v2/persistent/acme/orders/created/shadowTopics"
    for method in ("GET", "PUT", "DELETE"):
        assert _rest_allowed(service, "acme-admin", method, route) is True
        assert _rest_allowed(service, "root", method, route) is True
        for role in ("ns-both", "topic-consumer", "rival-admin"):
            assert str(_rest_allowed(service, role, method, route)).startswith("403 ")
    create = "/admin/v2/persistent/acme/orders/created-shadow"
    assert _rest_allowed(service, "acme-admin", "PUT", create) is True
    assert str(_rest_allowed(service, "ns-both", "PUT", create)).startswith("403 ")
    assert service.can_consume("persistent://acme/orders/created-shadow", "ns-both", "s")
    assert not service.can_consume("persistent://acme/orders/created-shadow",
                                   "topic-consumer", "s")
