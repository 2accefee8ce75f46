"""The system names a transactional client looks up to find the transaction coordinator.

Theory of operation
-------------------
With ``transactionCoordinatorEnabled`` Pulsar keeps the ``pulsar`` tenant, the
``pulsar/system`` namespace and the partitioned topic ``transaction_coordinator_assign``: a
client reads that topic's partition count, then looks up each partition to reach the
coordinator with that id. Horae has one coordinator, so one partition.
:func:`ensure_coordinator_assign_topic` creates what is missing at the broker's start (the
broker's :class:`broker.topics.service.BrokerService` hands in its tenancy, its partitioned
topics and the way it creates one).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Container

from broker.topics.names import TopicName
from broker.topics.tenancy import Tenancy
from broker.transactions.service import TC_ASSIGN_PARTITIONS, TC_ASSIGN_TOPIC

__all__ = ["ensure_coordinator_assign_topic"]


async def ensure_coordinator_assign_topic(
        tenancy: Tenancy, partitioned: Container[str],
        create_partitioned: Callable[[str, int], Awaitable[None]]) -> None:
    """Create the system tenant, namespace and coordinator-assign topic where missing."""
    tn = TopicName.parse(TC_ASSIGN_TOPIC)
    tenant, _ = tn.namespace.split("/", 1)
    if await tenancy.get_tenant(tenant) is None:
        await tenancy.create_tenant(tenant)
    if not tenancy.namespace_exists(tn.namespace):
        await tenancy.create_namespace(tn.namespace)
    if tn.full not in partitioned:
        await create_partitioned(tn.full, TC_ASSIGN_PARTITIONS)
