"""The admin API's view of the broker service: existence checks, partitions, fan-out.

Theory of operation: REST handlers never touch service internals directly; they ask this
facade, which (1) checks tenant / namespace / topic / subscription existence itself so the
answer carries Pulsar's exact 404/409 reason whatever the service would raise, (2) expands
a partitioned topic into its partitions for the operations Pulsar fans out, and (3) calls
:class:`broker.topics.service.BrokerService` directly and typed (one codebase: no optional
members, no fallbacks).

Everything here runs on the broker loop (the web app shares it), so service objects are
used directly, without locks or thread hops.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from aiohttp import web

from broker.admin import errors as E
from broker.subscriptions.subscription import Subscription
from broker.topics.names import TopicName
from broker.topics.service import BrokerService
from broker.topics.topic import Topic
from protocol.errors import TopicNotFoundError

#: The policy levels the admin API stores (namespace over topic, see BrokerService).
PolicyLevel = Literal["namespace", "topic"]

_PARTITION_SUFFIX = re.compile(r"^(?P<parent>.+)-partition-(?P<index>\d+)$")

PERSISTENT = "persistent"


def topic_full_name(tenant: str, namespace: str, local: str, domain: str = PERSISTENT) -> str:
    """The topic a REST path names, checked as Pulsar's validateTopicName does before anything
    is looked up: InvalidTopicNameError (412) for a name broker.topics.names refuses."""
    return TopicName.parse(f"{domain}://{tenant}/{namespace}/{local}").full


def partition_name(parent: str, index: int) -> str:
    return f"{parent}-partition-{index}"


def split_partition(full: str) -> tuple[str, int]:
    """("persistent://t/ns/x-partition-3") -> ("persistent://t/ns/x", 3); (name, -1) otherwise."""
    m = _PARTITION_SUFFIX.match(full)
    if m is None:
        return full, -1
    return m.group("parent"), int(m.group("index"))


def namespace_of(full: str) -> str:
    """"persistent://t/ns/x" -> "t/ns"."""
    rest = full.split("://", 1)[-1]
    parts = rest.split("/")
    return "/".join(parts[:2]) if len(parts) >= 3 else ""


class AdminFacade:
    """Existence checks and partition fan-out over a BrokerService (see module docstring)."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service

    # --- tenants and namespaces --------------------------------------------------------
    async def tenants(self) -> list[str]:
        return sorted(await self.service.tenancy.list_tenants())

    async def require_tenant(self, tenant: str) -> None:
        if tenant not in await self.service.tenancy.list_tenants():
            raise E.not_found(E.TENANT_NOT_FOUND)

    async def namespaces(self, tenant: str) -> list[str]:
        await self.require_tenant(tenant)
        return await self.service.tenancy.list_namespaces(tenant)

    async def namespace_exists(self, tenant: str, namespace: str) -> bool:
        if tenant not in await self.service.tenancy.list_tenants():
            return False
        return self.service.tenancy.namespace_exists(f"{tenant}/{namespace}")

    async def require_namespace(self, tenant: str, namespace: str) -> None:
        if not await self.namespace_exists(tenant, namespace):
            raise E.not_found(E.NAMESPACE_NOT_FOUND)

    # --- topics ------------------------------------------------------------------------
    async def list_topics(self, tenant: str, namespace: str) -> list[str]:
        """Non-partitioned topics and partitions, as Pulsar's GET /persistent/{t}/{ns}."""
        await self.require_namespace(tenant, namespace)
        names = set(await self.service.list_topics(f"{tenant}/{namespace}"))
        for parent in await self.list_partitioned(tenant, namespace):
            names.discard(parent)
            for i in range(await self.partition_count(parent)):
                names.add(partition_name(parent, i))
        return sorted(n for n in names if n.startswith(f"{PERSISTENT}://"))

    async def list_partitioned(self, tenant: str, namespace: str) -> list[str]:
        await self.require_namespace(tenant, namespace)
        return sorted(await self.service.list_partitioned_topics(f"{tenant}/{namespace}"))

    async def partition_count(self, full: str) -> int:
        if split_partition(full)[1] >= 0:
            return 0
        return await self.service.get_partition_count(full)

    async def topic_exists(self, full: str) -> bool:
        """A non-partitioned topic (or a partition) exists: loaded, or known to the store."""
        if full in self.service.topics:
            return True
        tenant, _, namespace = namespace_of(full).partition("/")
        if not await self.namespace_exists(tenant, namespace):
            return False
        names = await self.service.list_topics(namespace_of(full))
        if full in names:
            return True
        parent, index = split_partition(full)
        return index >= 0 and index < await self.partition_count(parent)

    async def get_topic(self, full: str, *, create: bool = False) -> Topic:
        """The loaded Topic, or 404 "Topic not found"."""
        topic = self.service.topics.get(full)
        if topic is not None:
            return topic
        parent, index = split_partition(full)
        if index >= 0 and index < await self.partition_count(parent):
            create = True   # partitions of a partitioned topic exist as soon as it does
        try:
            return await self.service.get_topic(full, create=create)
        except TopicNotFoundError:
            raise E.not_found(E.TOPIC_NOT_FOUND) from None

    async def targets(self, full: str) -> list[Topic]:
        """The topics an operation on ``full`` applies to: its partitions when partitioned
        (Pulsar fans out), else the topic itself (404 when absent)."""
        n = await self.partition_count(full)
        if n > 0:
            return [await self.get_topic(partition_name(full, i), create=True) for i in range(n)]
        if not await self.topic_exists(full):
            raise E.not_found(E.TOPIC_NOT_FOUND)
        return [await self.get_topic(full)]

    async def require_topic_or_partitioned(self, full: str) -> int:
        """404 unless ``full`` is a topic or a partitioned topic; returns its partition count."""
        n = await self.partition_count(full)
        if n == 0 and not await self.topic_exists(full):
            raise E.not_found(E.TOPIC_NOT_FOUND)
        return n

    # --- subscriptions -----------------------------------------------------------------
    @staticmethod
    def subscription(topic: Topic, name: str) -> Subscription:
        sub = topic.subscriptions.get(name)
        if sub is None:
            raise E.not_found(E.SUBSCRIPTION_NOT_FOUND)
        return sub

    async def subscriptions_of(self, full: str, name: str) -> list[tuple[Topic, Subscription]]:
        """(topic, subscription) pairs for ``name`` on ``full`` or each of its partitions."""
        pairs = []
        for topic in await self.targets(full):
            pairs.append((topic, self.subscription(topic, name)))
        return pairs

    # --- policies ------------------------------------------------------------------------
    async def get_policy(self, level: PolicyLevel, key: str) -> dict[str, Any] | None:
        return self.service.policies.delayed_body(
            level, key if level == "namespace" else TopicName.parse(key).full)

    async def set_policy(self, level: PolicyLevel, key: str, policy: dict[str, Any]) -> None:
        if level == "namespace":
            await self.service.set_namespace_policy(key, policy)
        else:
            await self.service.set_topic_policy(key, policy)

    async def remove_policy(self, level: PolicyLevel, key: str) -> None:
        if level == "namespace":
            await self.service.remove_namespace_policy(key)
        else:
            await self.service.remove_topic_policy(key)


#: Where create_app keeps the facade for the handlers.
ADMIN_KEY = web.AppKey("horae_admin", AdminFacade)
