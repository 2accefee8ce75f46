"""Tenants and namespaces as wholes, and the delayed-delivery policies written on them.

Theory of operation
-------------------
:class:`NamespaceService` serves the admin API (:class:`broker.admin.service.AdminService`
builds it over the broker's :class:`broker.topics.service.BrokerService`, its only caller):

- deleting a tenant or a namespace deletes its topics first, through the service (which owns
  the loaded topics and the partitioned-topic records), then forgets the records in
  ``service.tenancy`` and the namespace's policies;
- the cluster record is the stored one over this broker's own URLs
  (``service.addresses``);
- a delayed-delivery policy written on a namespace or a topic is stored in
  ``service.policies``, then the loaded topics it concerns resolve theirs again
  (:meth:`BrokerService.invalidate_policies`), so the next message sees it.

Reads of tenants, namespaces and grants go to ``service.tenancy`` directly.
"""

from __future__ import annotations

from typing import Any

from broker.topics.names import TopicName
from broker.topics.policies import NS_DELAYED, TOPIC_DELAYED
from broker.topics.service import BrokerService
from protocol.errors import MetadataError, NotAllowedError

__all__ = ["NamespaceService"]


class NamespaceService:
    """Tenant and namespace deletion, the cluster record, delayed-delivery policy writes."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service

    # ------------------------------------------------------------------ tenants, namespaces

    async def delete_tenant(self, tenant: str, *, force: bool = False) -> None:
        tenancy = self._service.tenancy
        tenancy.require_tenant(tenant)
        namespaces = await tenancy.list_namespaces(tenant)
        if namespaces and not force:
            raise NotAllowedError("The tenant still has active namespaces")
        for ns in namespaces:
            await self.delete_namespace(ns, force=True)
        await tenancy.forget_tenant(tenant)

    async def delete_namespace(self, namespace: str, *, force: bool = False) -> None:
        service = self._service
        if not service.tenancy.namespace_exists(namespace):
            raise MetadataError("Namespace does not exist")
        topics = await service.list_topics(namespace)
        partitioned = await service.list_partitioned_topics(namespace)
        if (topics or partitioned) and not force:
            raise NotAllowedError("Cannot delete non empty namespace")
        for t in partitioned:
            await service.delete_topic(t, force=True)
        for t in await service.list_topics(namespace):
            await service.delete_topic(t, force=True)
        await service.tenancy.forget_namespace(namespace)
        await service.policies.records.drop_namespace(namespace)

    async def get_cluster(self, name: str) -> dict[str, Any]:
        """The cluster record: the stored one over this broker's own URLs."""
        urls = self._service.addresses.urls()
        own: dict[str, Any] = {"serviceUrl": urls.web_url, "brokerServiceUrl": urls.broker_url}
        if urls.web_url_tls is not None:
            own["serviceUrlTls"] = urls.web_url_tls
        if urls.broker_url_tls is not None:
            own["brokerServiceUrlTls"] = urls.broker_url_tls
        return {**own, **(await self._service.tenancy.cluster_record(name))}

    # ------------------------------------------------------------------ delayed-delivery policies
    # (read with policies.delayed_body; a write drops loaded topics' cached resolution)

    async def set_namespace_policy(self, namespace: str, policy: dict[str, Any]) -> None:
        await self._service.policies.records.set_namespace_field(namespace, NS_DELAYED, dict(policy))
        self._service.invalidate_policies(lambda t: t.name.namespace == namespace)

    async def remove_namespace_policy(self, namespace: str) -> None:
        await self._service.policies.records.remove_namespace_field(namespace, NS_DELAYED)
        self._service.invalidate_policies(lambda t: t.name.namespace == namespace)

    async def set_topic_policy(self, topic: str, policy: dict[str, Any]) -> None:
        full = TopicName.parse(topic).full
        await self._service.policies.records.set_topic_field(full, TOPIC_DELAYED, dict(policy))
        self._service.invalidate_policies(lambda t: full in (t.full, t.name.partitioned_parent))

    async def remove_topic_policy(self, topic: str) -> None:
        full = TopicName.parse(topic).full
        await self._service.policies.records.remove_topic_field(full, TOPIC_DELAYED)
        self._service.invalidate_policies(lambda t: full in (t.full, t.name.partitioned_parent))
