"""Authorization: may this role do this to that topic, namespace or tenant? (Pulsar semantics)

Theory of operation
-------------------
:class:`AuthorizationService` answers questions; it stores nothing. The grants live where the
service layer keeps namespace policies, reached through the narrow :class:`AuthPolicyStore`
protocol (two reads: a tenant's ``adminRoles`` and a namespace's :class:`NamespaceAuth`). The
namespace record uses Pulsar's ``auth_policies`` JSON shape, parsed and produced by
:class:`AuthPolicies`::

    {"namespace_auth": {"role": ["produce", "consume"]},
     "destination_auth": {"persistent://t/ns/topic": {"role": ["consume"]}},
     "subscription_auth_roles": {"sub-name": ["role"]}}

Rules, as Pulsar's ``AuthorizationService`` + ``PulsarAuthorizationProvider``:

1. With ``authorizationEnabled`` false every check passes.
2. A role in ``superUserRoles`` may do everything.
3. A tenant admin (a role in the tenant's ``adminRoles``) may do everything on that tenant's
   namespaces and topics (and administer them).
4. ``produce`` / ``consume`` / ``functions`` are granted on a namespace (``namespace_auth``)
   or on a topic (``destination_auth``, keyed by the topic name; a partition inherits the
   grant of its partitioned topic). With ``authorizationAllowWildcardsMatching`` a grant to
   ``prefix*`` or ``*suffix`` also matches.
5. Consuming also needs the subscription: when ``subscription_auth_roles`` lists roles for a
   subscription, only those roles may use it; with ``subscription_auth_mode`` ``Prefix`` the
   subscription name must start with the role.
6. Lookup is allowed to whoever may produce or consume; so is reading a topic's schema
   (GET_SCHEMA), while registering one (GET_OR_CREATE_SCHEMA) needs produce, as a PRODUCER
   carrying that schema would. A refused PARTITIONED_METADATA on a
   tenant that does not exist answers TopicNotFound "Tenant or namespace or topic does not
   exist: <tenant/ns>" (Pulsar's tenant-admin check fails with 404 there, and its
   ServerCnx maps that to TopicNotFound), so a client learns the topic cannot exist.

All checks are synchronous reads of already-loaded policies; callers (connection handlers,
REST middleware) may call them on the event loop. ``require_*`` methods raise
:class:`AuthorizationError` with Pulsar's wire texts.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from broker.config import BrokerConfig
from broker.security.authentication import split_list
from broker.security.errors import AuthorizationError
from protocol.errors import TopicNotFoundError

__all__ = [
    "AuthAction",
    "AuthPolicies",
    "AuthPolicyStore",
    "AuthorizationService",
    "NamespaceAuth",
    "SubscriptionAuthMode",
    "namespace_of",
]

#: Pulsar's wire texts (ServerCnx / TopicLookupBase) for refused requests.
NOT_AUTHORIZED_PRODUCE = "Client is not authorized to Publish"
NOT_AUTHORIZED_SUBSCRIBE = "Client is not authorized to subscribe"
NOT_AUTHORIZED_LOOKUP = "Client is not authorized to Perform Lookup"
NOT_AUTHORIZED_PARTITIONED_METADATA = "Client is not authorized to Get Partition Metadata"
NOT_AUTHORIZED_GET_SCHEMA = "Client is not authorized to GetSchema"
NOT_AUTHORIZED_GET_OR_CREATE_SCHEMA = "Client is not authorized to GetOrCreateSchema"
#: Pulsar's REST 403 text for tenant/namespace administration.
NOT_TENANT_ADMIN = "Don't have permission to administrate resources on this tenant"
NOT_SUPER_USER = "This operation requires super-user access"


class AuthAction(enum.StrEnum):
    """Pulsar's ``AuthAction`` values, as spelled in JSON and REST bodies."""

    PRODUCE = "produce"
    CONSUME = "consume"
    FUNCTIONS = "functions"
    SOURCES = "sources"
    SINKS = "sinks"
    PACKAGES = "packages"


class SubscriptionAuthMode(enum.StrEnum):
    """Pulsar's namespace ``subscription_auth_mode``."""

    NONE = "None"
    PREFIX = "Prefix"


def _actions(values: Iterable[object], where: str) -> frozenset[AuthAction]:
    out = set()
    for value in values:
        try:
            out.add(AuthAction(str(value)))
        except ValueError:
            raise ValueError(
                f"{where}: unknown action {value!r}; use one of {[a.value for a in AuthAction]}"
            ) from None
    return frozenset(out)


_PARTITION = re.compile(r"-partition-\d+$")


def namespace_of(topic: str) -> str:
    """``tenant/namespace`` of a fully qualified topic name (``persistent://t/ns/x``)."""
    _, sep, rest = topic.partition("://")
    parts = (rest if sep else topic).split("/")
    if len(parts) < 3 or not parts[0] or not parts[1]:
        raise ValueError(f"not a fully qualified topic name: {topic!r}")
    return f"{parts[0]}/{parts[1]}"


def _frozen(mapping: Mapping[str, frozenset[AuthAction]]) -> Mapping[str, frozenset[AuthAction]]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True)
class AuthPolicies:
    """A namespace's grants, in Pulsar's ``auth_policies`` shape (immutable; edits return copies)."""

    namespace_auth: Mapping[str, frozenset[AuthAction]] = field(default_factory=dict)
    destination_auth: Mapping[str, Mapping[str, frozenset[AuthAction]]] = field(default_factory=dict)
    subscription_auth_roles: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: object) -> AuthPolicies:
        """Parse Pulsar's JSON object (missing keys = empty). ValueError names the bad part."""
        if body is None:
            return cls()
        if not isinstance(body, Mapping):
            raise ValueError("auth_policies must be an object")
        ns_raw = body.get("namespace_auth") or {}
        dest_raw = body.get("destination_auth") or {}
        subs_raw = body.get("subscription_auth_roles") or {}
        if not all(isinstance(x, Mapping) for x in (ns_raw, dest_raw, subs_raw)):
            raise ValueError("auth_policies fields must be objects")
        ns = {str(r): _actions(_list(a, f"namespace_auth.{r}"), f"namespace_auth.{r}")
              for r, a in ns_raw.items()}
        dest: dict[str, Mapping[str, frozenset[AuthAction]]] = {}
        for topic, roles in dest_raw.items():
            if not isinstance(roles, Mapping):
                raise ValueError(f"destination_auth.{topic} must be an object")
            dest[str(topic)] = _frozen({
                str(r): _actions(_list(a, f"destination_auth.{topic}.{r}"), f"destination_auth.{topic}")
                for r, a in roles.items()})
        subs = {str(s): frozenset(str(r) for r in _list(roles, f"subscription_auth_roles.{s}"))
                for s, roles in subs_raw.items()}
        return cls(_frozen(ns), MappingProxyType(dest), MappingProxyType(subs))

    def to_json(self) -> dict[str, object]:
        """Pulsar's JSON shape, lists sorted (stable output for the admin API and storage)."""
        return {
            "namespace_auth": {r: sorted(a) for r, a in sorted(self.namespace_auth.items())},
            "destination_auth": {
                t: {r: sorted(a) for r, a in sorted(roles.items())}
                for t, roles in sorted(self.destination_auth.items())},
            "subscription_auth_roles": {
                s: sorted(r) for s, r in sorted(self.subscription_auth_roles.items())},
        }

    def grant_namespace(self, role: str, actions: Iterable[AuthAction]) -> AuthPolicies:
        """Pulsar's grant-permission on a namespace: *replaces* the role's actions."""
        ns = dict(self.namespace_auth)
        ns[role] = frozenset(actions)
        return AuthPolicies(_frozen(ns), self.destination_auth, self.subscription_auth_roles)

    def revoke_namespace(self, role: str) -> AuthPolicies:
        ns = {r: a for r, a in self.namespace_auth.items() if r != role}
        return AuthPolicies(_frozen(ns), self.destination_auth, self.subscription_auth_roles)

    def grant_topic(self, topic: str, role: str, actions: Iterable[AuthAction]) -> AuthPolicies:
        dest = dict(self.destination_auth)
        roles = dict(dest.get(topic, {}))
        roles[role] = frozenset(actions)
        dest[topic] = _frozen(roles)
        return AuthPolicies(self.namespace_auth, MappingProxyType(dest), self.subscription_auth_roles)

    def revoke_topic(self, topic: str, role: str) -> AuthPolicies:
        dest = dict(self.destination_auth)
        roles = {r: a for r, a in dest.get(topic, {}).items() if r != role}
        if roles:
            dest[topic] = _frozen(roles)
        else:
            dest.pop(topic, None)
        return AuthPolicies(self.namespace_auth, MappingProxyType(dest), self.subscription_auth_roles)

    def with_subscription_roles(self, subscription: str, roles: Iterable[str]) -> AuthPolicies:
        """Pulsar's grant-subscription-permission (empty *roles* removes the restriction)."""
        subs = dict(self.subscription_auth_roles)
        wanted = frozenset(roles)
        if wanted:
            subs[subscription] = wanted
        else:
            subs.pop(subscription, None)
        return AuthPolicies(self.namespace_auth, self.destination_auth, MappingProxyType(subs))


def _list(value: object, where: str) -> list[object]:
    if not isinstance(value, list | tuple | set | frozenset):
        raise ValueError(f"{where} must be a list")
    return list(value)


@dataclass(frozen=True, slots=True)
class NamespaceAuth:
    """What authorization needs of one namespace's policies."""

    auth_policies: AuthPolicies = field(default_factory=AuthPolicies)
    subscription_auth_mode: SubscriptionAuthMode = SubscriptionAuthMode.NONE

    @classmethod
    def from_policies(cls, policies: Mapping[str, object]) -> NamespaceAuth:
        """From a Pulsar namespace ``Policies`` body (its ``auth_policies`` and
        ``subscription_auth_mode`` keys; others ignored). ValueError names a bad part."""
        mode = policies.get("subscription_auth_mode") or SubscriptionAuthMode.NONE.value
        try:
            parsed_mode = SubscriptionAuthMode(str(mode))
        except ValueError:
            raise ValueError(
                f"subscription_auth_mode must be None or Prefix, not {mode!r}") from None
        return cls(AuthPolicies.from_json(policies.get("auth_policies")), parsed_mode)


class AuthPolicyStore(Protocol):
    """The reads authorization needs; the service layer implements it over its metadata."""

    def tenant_admin_roles(self, tenant: str) -> frozenset[str] | None:
        """The tenant's ``adminRoles``; None when the tenant does not exist."""
        ...

    def namespace_auth(self, namespace: str) -> NamespaceAuth | None:
        """The namespace's grants (``tenant/ns``); None when it does not exist."""
        ...


class AuthorizationService:
    """Pulsar's authorization rules over an :class:`AuthPolicyStore` (see the module doc)."""

    def __init__(self, store: AuthPolicyStore, *, enabled: bool,
                 super_user_roles: Iterable[str] = (), allow_wildcards: bool = False) -> None:
        self._store = store
        self.enabled = enabled
        self._super_users = frozenset(super_user_roles)
        self._wildcards = allow_wildcards

    @classmethod
    def from_config(cls, config: BrokerConfig, store: AuthPolicyStore) -> AuthorizationService:
        return cls(store, enabled=config.authorization_enabled,
                   super_user_roles=split_list(config.super_user_roles),
                   allow_wildcards=config.authorization_allow_wildcards_matching)

    # --- roles ---------------------------------------------------------------------------

    def is_super_user(self, role: str) -> bool:
        return not self.enabled or role in self._super_users

    def tenant_exists(self, tenant: str) -> bool:
        return self._store.tenant_admin_roles(tenant) is not None

    def is_tenant_admin(self, tenant: str, role: str) -> bool:
        """Super-user, or listed in the tenant's ``adminRoles``."""
        if self.is_super_user(role):
            return True
        admins = self._store.tenant_admin_roles(tenant)
        return admins is not None and role in admins

    # --- grants --------------------------------------------------------------------------

    def _granted(self, actions_by_role: Mapping[str, frozenset[AuthAction]], role: str,
                 action: AuthAction) -> bool:
        if action in actions_by_role.get(role, frozenset()):
            return True
        if not self._wildcards:
            return False
        for pattern, actions in actions_by_role.items():
            if action not in actions or "*" not in pattern:
                continue
            if pattern.startswith("*") and role.endswith(pattern[1:]):
                return True
            if pattern.endswith("*") and role.startswith(pattern[:-1]):
                return True
        return False

    def has_permission(self, topic: str, role: str, action: AuthAction) -> bool:
        """*action* granted to *role* on *topic* or its namespace (ignores admins)."""
        ns = self._store.namespace_auth(namespace_of(topic))
        if ns is None:
            return False
        policies = ns.auth_policies
        if self._granted(policies.namespace_auth, role, action):
            return True
        for name in dict.fromkeys((topic, _PARTITION.sub("", topic))):
            roles = policies.destination_auth.get(name)
            if roles is not None and self._granted(roles, role, action):
                return True
        return False

    def has_namespace_permission(self, namespace: str, role: str, action: AuthAction) -> bool:
        ns = self._store.namespace_auth(namespace)
        return ns is not None and self._granted(ns.auth_policies.namespace_auth, role, action)

    # --- operations ----------------------------------------------------------------------

    def _admin_of_topic(self, topic: str, role: str) -> bool:
        return self.is_tenant_admin(namespace_of(topic).split("/")[0], role)

    def can_produce(self, topic: str, role: str) -> bool:
        if self._admin_of_topic(topic, role):
            return True
        return self.has_permission(topic, role, AuthAction.PRODUCE)

    def subscription_refusal(self, topic: str, role: str, subscription: str) -> str | None:
        """Why *role* may not use *subscription* on *topic* (None: the subscription is fine)."""
        ns = self._store.namespace_auth(namespace_of(topic))
        if ns is None or not subscription:
            return None
        allowed = ns.auth_policies.subscription_auth_roles.get(subscription)
        if allowed and role not in allowed:
            return NOT_AUTHORIZED_SUBSCRIBE
        if (ns.subscription_auth_mode is SubscriptionAuthMode.PREFIX
                and not subscription.startswith(role)):
            return ("Failed to create consumer - The subscription name needs to be prefixed by "
                    f"the authentication role, like {role}-xxxx for topic: {topic}")
        return None

    def can_consume(self, topic: str, role: str, subscription: str | None = None) -> bool:
        if self._admin_of_topic(topic, role):
            return True
        if subscription and self.subscription_refusal(topic, role, subscription) is not None:
            return False
        return self.has_permission(topic, role, AuthAction.CONSUME)

    def can_lookup(self, topic: str, role: str) -> bool:
        return self.can_produce(topic, role) or self.can_consume(topic, role)

    def can_use_functions(self, namespace: str, role: str) -> bool:
        if self.is_tenant_admin(namespace.split("/")[0], role):
            return True
        return self.has_namespace_permission(namespace, role, AuthAction.FUNCTIONS)

    # --- raising forms for the binary protocol ---------------------------------------------

    def require_produce(self, topic: str, role: str) -> None:
        if not self.can_produce(topic, role):
            raise AuthorizationError(NOT_AUTHORIZED_PRODUCE)

    def require_consume(self, topic: str, role: str, subscription: str) -> None:
        if self._admin_of_topic(topic, role):
            return
        refusal = self.subscription_refusal(topic, role, subscription)
        if refusal is not None:
            raise AuthorizationError(refusal)
        if not self.has_permission(topic, role, AuthAction.CONSUME):
            raise AuthorizationError(NOT_AUTHORIZED_SUBSCRIBE)

    def require_lookup(self, topic: str, role: str, *, partitioned_metadata: bool = False) -> None:
        if not self.can_lookup(topic, role):
            namespace = namespace_of(topic)
            if partitioned_metadata and self._store.tenant_admin_roles(
                    namespace.split("/")[0]) is None:
                raise TopicNotFoundError(f"Tenant or namespace or topic does not exist: {namespace}")
            raise AuthorizationError(
                NOT_AUTHORIZED_PARTITIONED_METADATA if partitioned_metadata else NOT_AUTHORIZED_LOOKUP)

    def require_get_schema(self, topic: str, role: str) -> None:
        if not self.can_lookup(topic, role):
            raise AuthorizationError(NOT_AUTHORIZED_GET_SCHEMA)

    def require_get_or_create_schema(self, topic: str, role: str) -> None:
        if not self.can_produce(topic, role):
            raise AuthorizationError(NOT_AUTHORIZED_GET_OR_CREATE_SCHEMA)

    def require_tenant_admin(self, tenant: str, role: str) -> None:
        if not self.is_tenant_admin(tenant, role):
            raise AuthorizationError(NOT_TENANT_ADMIN)

    def require_super_user(self, role: str) -> None:
        if not self.is_super_user(role):
            raise AuthorizationError(NOT_SUPER_USER)
