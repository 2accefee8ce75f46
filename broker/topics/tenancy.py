"""Tenants, namespaces and cluster records of the node (Pulsar's tenant/namespace metadata).

Theory of operation
-------------------
:class:`Tenancy` is owned by :class:`broker.topics.service.BrokerService`. Tenants (kind
``"tenant"``) and namespaces (kind ``"namespace"``, key ``"tenant/ns"``) live in the metadata
store and in an in-memory mirror for the hot checks (``namespace_exists`` on every topic load);
``public`` and ``public/default`` always exist (:meth:`Tenancy.load`). Every write goes to the
store first and to the mirror once it is stored.

Deleting a namespace or tenant that still has topics is the service's business (it owns the
topics): it deletes them, then calls :meth:`Tenancy.forget_namespace` /
:meth:`Tenancy.forget_tenant`, which only drop the records.

It is also the :class:`broker.security.authorization.AuthPolicyStore` the authorization rules
read (a tenant's ``adminRoles``, a namespace's parsed ``auth_policies``, cached per namespace
until the namespace record changes), and it keeps the cluster records (kind ``"cluster"``).
"""

from __future__ import annotations

import logging
from typing import Any

from broker.security.authorization import AuthPolicies, NamespaceAuth
from broker.topics.names import NAME_RULE, is_valid_name, split_namespace
from protocol.errors import InvalidTopicNameError, MetadataError, NotAllowedError
from storage.metadata import MetadataStore

__all__ = ["DEFAULT_NAMESPACE", "DEFAULT_TENANT", "Tenancy"]

log = logging.getLogger("horae.service")

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "public/default"


class Tenancy:
    """The tenant, namespace and cluster records (see the module docstring)."""

    def __init__(self, metadata: MetadataStore, cluster_name: str) -> None:
        self._md = metadata
        self._cluster_name = cluster_name
        self._tenants: dict[str, dict[str, Any]] = {}
        self._namespaces: dict[str, dict[str, Any]] = {}
        self._ns_auth: dict[str, NamespaceAuth] = {}  # parsed auth_policies, by namespace

    async def load(self) -> None:
        """Create the default tenant and namespace if missing, then mirror the records."""
        md = self._md
        if await md.get("tenant", DEFAULT_TENANT) is None:
            await md.put("tenant", DEFAULT_TENANT, _tenant_info(self._cluster_name))
        if await md.get("namespace", DEFAULT_NAMESPACE) is None:
            await md.put("namespace", DEFAULT_NAMESPACE, {})
        self._tenants = dict(await md.list("tenant"))
        self._namespaces = dict(await md.list("namespace"))

    # ------------------------------------------------------------------ tenants

    async def list_tenants(self) -> list[str]:
        return sorted(self._tenants)

    async def get_tenant(self, tenant: str) -> dict[str, Any] | None:
        return self._tenants.get(tenant)

    async def create_tenant(self, tenant: str, info: dict[str, Any] | None = None) -> None:
        if not is_valid_name(tenant):
            raise InvalidTopicNameError(f"Tenant name is not valid: {tenant!a} ({NAME_RULE})")
        if tenant in self._tenants:
            raise NotAllowedError("Tenant already exists")
        value = info if info is not None else _tenant_info(self._cluster_name)
        await self._md.put("tenant", tenant, value)
        self._tenants[tenant] = value

    async def update_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        self.require_tenant(tenant)
        await self._md.put("tenant", tenant, info)
        self._tenants[tenant] = info

    def require_tenant(self, tenant: str) -> None:
        if tenant not in self._tenants:
            raise MetadataError("Tenant does not exist")

    async def forget_tenant(self, tenant: str) -> None:
        """Drop the tenant's record (its namespaces are gone already)."""
        await self._md.delete("tenant", tenant)
        del self._tenants[tenant]

    # ------------------------------------------------------------------ namespaces

    async def list_namespaces(self, tenant: str) -> list[str]:
        """``["tenant/ns", ...]``."""
        return sorted(ns for ns in self._namespaces if ns.split("/", 1)[0] == tenant)

    async def create_namespace(self, namespace: str, policies: dict[str, Any] | None = None) -> None:
        tenant, _ = split_namespace(namespace)
        self.require_tenant(tenant)
        if namespace in self._namespaces:
            raise NotAllowedError("Namespace already exists")
        value = policies or {}
        await self._md.put("namespace", namespace, value)
        self._namespaces[namespace] = value
        self._ns_auth.pop(namespace, None)

    def namespace_exists(self, namespace: str) -> bool:
        return namespace in self._namespaces

    def require_namespace(self, namespace: str) -> None:
        if namespace not in self._namespaces:
            raise MetadataError(f"Namespace {namespace} does not exist")

    async def forget_namespace(self, namespace: str) -> None:
        """Drop the namespace's record (its topics are gone already)."""
        await self._md.delete("namespace", namespace)
        del self._namespaces[namespace]
        self._ns_auth.pop(namespace, None)

    # ------------------------------------------------------------------ authorization data
    # (broker.security.authorization.AuthPolicyStore: tenant adminRoles, namespace grants)

    def tenant_admin_roles(self, tenant: str) -> frozenset[str] | None:
        info = self._tenants.get(tenant)
        if info is None:
            return None
        return frozenset(str(r) for r in info.get("adminRoles") or ())

    def namespace_auth(self, namespace: str) -> NamespaceAuth | None:
        cached = self._ns_auth.get(namespace)
        if cached is not None:
            return cached
        policies = self._namespaces.get(namespace)
        if policies is None:
            return None
        try:
            parsed = NamespaceAuth.from_policies(policies)
        except ValueError:
            log.exception("namespace %s has unreadable auth_policies; no grants apply", namespace)
            parsed = NamespaceAuth()
        self._ns_auth[namespace] = parsed
        return parsed

    async def set_auth_policies(self, namespace: str, auth: AuthPolicies) -> None:
        """Replace the namespace's ``auth_policies`` (grants), persisted with its record."""
        if namespace not in self._namespaces:
            raise MetadataError("Namespace does not exist")
        value = {**self._namespaces[namespace], "auth_policies": auth.to_json()}
        await self._md.put("namespace", namespace, value)
        self._namespaces[namespace] = value
        self._ns_auth.pop(namespace, None)

    async def set_subscription_auth_mode(self, namespace: str, mode: str) -> None:
        """Set the namespace's ``subscription_auth_mode`` (None or Prefix), persisted with its
        record: authorization reads it from there (:class:`NamespaceAuth`)."""
        if namespace not in self._namespaces:
            raise MetadataError("Namespace does not exist")
        value = {**self._namespaces[namespace], "subscription_auth_mode": mode}
        await self._md.put("namespace", namespace, value)
        self._namespaces[namespace] = value
        self._ns_auth.pop(namespace, None)

    # ------------------------------------------------------------------ clusters

    async def cluster_record(self, name: str) -> dict[str, Any]:
        """The stored record of cluster *name* (empty when none was set)."""
        return await self._md.get("cluster", name) or {}

    async def set_cluster(self, name: str, data: dict[str, Any]) -> None:
        await self._md.put("cluster", name, data)


def _tenant_info(cluster: str) -> dict[str, Any]:
    return {"adminRoles": [], "allowedClusters": [cluster]}
