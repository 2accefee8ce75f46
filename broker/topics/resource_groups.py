"""Resource groups: Pulsar's publish and dispatch quotas shared by the namespaces attached to a group.

Theory of operation
-------------------
A group is Pulsar's ``ResourceGroup`` body (``publishRateInMsgs``, ``publishRateInBytes``,
``dispatchRateInMsgs``, ``dispatchRateInBytes``; ``-1`` or unset is no limit), kept in the
metadata store (kind ``"resource_group"``, key the group's name) and mirrored in memory. A
namespace joins a group through its policy field ``resource_group_name`` (Pulsar's
``Policies`` name, :class:`broker.topics.policy_records.PolicyRecords`).

On one node the group's quota is what every topic of its namespaces shares, per second:

- **publish**: one :class:`broker.topics.publish_rate.PublishRateLimiter` per group, set as the
  ``group`` of each member topic's own limiter. Every socket read of SENDs is counted there too;
  once the group's window is full the producer's connections stop being read until it ends,
  as a topic's own publish rate does (Pulsar's ``ResourceGroupPublishLimiter`` pauses the
  producers' reads the same way).
- **dispatch**: one :class:`broker.subscriptions.dispatch_rate.GroupDispatch` per group, set as
  the ``group`` of each member topic's ``TopicDispatch``. It counts what all member topics
  dispatched in the current period; at the limit every member dispatcher waits for the period's
  end, as a dispatch rate does.

A topic is attached (:meth:`ResourceGroups.attach`) when a producer or consumer arrives and
whenever its namespace's fields change (:mod:`broker.topics.live_policies`); a group's new
rates reach its limiters at once, as they are shared objects. The counts of what each group
let through (``pulsar_resource_group_messages_used`` / ``_bytes_used`` by ``MonitoringClass``
``Publish``/``Dispatch``) come from the limiters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from broker.subscriptions.dispatch_rate import (
    NO_DISPATCH_RATE,
    DispatchRate,
    GroupDispatch,
    TopicDispatch,
)
from broker.topics.policy_records import PolicyRecords
from broker.topics.publish_rate import NO_PUBLISH_RATE, PublishRate, PublishRateLimiter
from storage.metadata import MetadataStore

__all__ = ["FIELDS", "NS_RESOURCE_GROUP", "GroupLimiters", "ResourceGroups"]

KIND = "resource_group"
NS_RESOURCE_GROUP = "resource_group_name"
#: Pulsar's ResourceGroup fields, in its order
FIELDS = ("publishRateInMsgs", "publishRateInBytes", "dispatchRateInMsgs", "dispatchRateInBytes")


class _Member(Protocol):
    """What a topic offers a group (both domains; a non-persistent topic has no dispatch rate)."""

    publish_rate: PublishRateLimiter


@dataclass(slots=True)
class GroupLimiters:
    """The limiters one group's member topics share."""

    publish: PublishRateLimiter
    dispatch: GroupDispatch


def _rate(body: dict[str, Any], field: str) -> int:
    value = body.get(field)
    return -1 if value is None else int(value)


class ResourceGroups:
    """The broker's resource groups and their shared limiters (module docstring)."""

    def __init__(self, metadata: MetadataStore, records: PolicyRecords) -> None:
        self._md = metadata
        self._records = records
        self._groups: dict[str, dict[str, Any]] = {}
        self._limiters: dict[str, GroupLimiters] = {}

    async def load(self) -> None:
        for name, body in await self._md.list(KIND):
            self._groups[name] = dict(body)
            self._set_limits(name)

    # ------------------------------------------------------------------ the records

    def names(self) -> list[str]:
        return sorted(self._groups)

    def get(self, name: str) -> dict[str, Any] | None:
        body = self._groups.get(name)
        return None if body is None else dict(body)

    async def put(self, name: str, body: dict[str, Any]) -> None:
        """Create *name* with *body*, or replace its record (durable before the mirror)."""
        await self._md.put(KIND, name, body)
        self._groups[name] = dict(body)
        self._set_limits(name)

    def namespaces_using(self, name: str) -> list[str]:
        """The namespaces attached to *name*."""
        return [ns for ns in self._records.namespaces_with(NS_RESOURCE_GROUP)
                if self._records.namespace_value(ns, NS_RESOURCE_GROUP) == name]

    async def delete(self, name: str) -> None:
        if self._groups.pop(name, None) is not None:
            await self._md.delete(KIND, name)
        self._limiters.pop(name, None)

    # ------------------------------------------------------------------ enforcement

    def limiters(self, name: str) -> GroupLimiters | None:
        return self._limiters.get(name)

    def _set_limits(self, name: str) -> None:
        body = self._groups[name]
        limiters = self._limiters.get(name)
        if limiters is None:
            limiters = self._limiters[name] = GroupLimiters(PublishRateLimiter(), GroupDispatch())
        publish = PublishRate(_rate(body, "publishRateInMsgs"), _rate(body, "publishRateInBytes"))
        dispatch = DispatchRate(_rate(body, "dispatchRateInMsgs"),
                                _rate(body, "dispatchRateInBytes"))
        limiters.publish.rate = publish if publish.limited else NO_PUBLISH_RATE
        limiters.dispatch.rate = dispatch if dispatch.limited else NO_DISPATCH_RATE

    def of_namespace(self, namespace: str) -> GroupLimiters | None:
        """The limiters of the group *namespace* is attached to, else None."""
        name = self._records.namespace_value(namespace, NS_RESOURCE_GROUP)
        return self._limiters.get(name) if isinstance(name, str) else None

    def attach(self, namespace: str, topic: _Member) -> None:
        """Give *topic* (of *namespace*) its group's shared limiters, or none."""
        limiters = self.of_namespace(namespace)
        topic.publish_rate.group = None if limiters is None else limiters.publish
        topic_dispatch = getattr(topic, "topic_dispatch", None)
        if isinstance(topic_dispatch, TopicDispatch):
            topic_dispatch.join(None if limiters is None else limiters.dispatch)

    def usage_figures(self) -> list[tuple[str, str, int, int]]:
        """(group, ``Publish``/``Dispatch``, messages, bytes) used while attached."""
        figures = []
        for name, limiters in sorted(self._limiters.items()):
            publish = limiters.publish
            figures.append((name, "Publish", publish.used_msgs, publish.used_bytes))
            figures.append((name, "Dispatch", *limiters.dispatch.dispatched()))
        return figures
