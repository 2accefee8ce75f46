"""The stored namespace and topic policy fields, their in-memory mirror, and who hears of a change.

Theory of operation
-------------------
Kind ``"ns_policies"`` (key ``"tenant/ns"``) holds a namespace's fields under Pulsar's
``Policies`` JSON names; kind ``"topic_policies"`` (key the full topic name; a partitioned
topic's parent name covers its partitions) a topic's, under Pulsar's ``TopicPolicies`` names.
Writes go to the metadata store first, then the mirror, so a reader never sees a value that is
not durable. After each write the watchers (:meth:`PolicyRecords.watch`) are told which
namespace or topic changed, so loaded topics apply it at once (:mod:`broker.topics.live_policies`),
as Pulsar's topics do on a policies update. :meth:`resolve` is the lookup every resolver shares:
the topic's value, else (for a partition) its partitioned topic's, else the namespace's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.topics.names import TopicName
from storage.metadata import MetadataStore

__all__ = ["NS_KIND", "TOPIC_KIND", "PolicyChange", "PolicyRecords"]

NS_KIND = "ns_policies"
TOPIC_KIND = "topic_policies"

#: (namespace "tenant/ns" or None, full topic name or None): what a write changed
PolicyChange = Callable[[str | None, str | None], None]


class PolicyRecords:
    """Namespace and topic policy fields, durable in the metadata store (module docstring)."""

    def __init__(self, metadata: MetadataStore) -> None:
        self._md = metadata
        self._ns: dict[str, dict[str, Any]] = {}
        self._topics: dict[str, dict[str, Any]] = {}
        self._watchers: list[PolicyChange] = []
        #: Counts changes of the mirror: a reader that caches what it resolved (the topic's
        #: replace-by-key switch) resolves again only when this moved.
        self.generation = 0

    async def load(self, legacy_kinds: tuple[tuple[str, str, str], ...] = ()) -> None:
        """Read both kinds; fields once kept under another kind (legacy kind, kind, field) move
        into their record."""
        self._ns = dict(await self._md.list(NS_KIND))
        self._topics = dict(await self._md.list(TOPIC_KIND))
        for legacy, kind, field in legacy_kinds:
            mirror = self._ns if kind == NS_KIND else self._topics
            for key, body in await self._md.list(legacy):
                if mirror.get(key, {}).get(field) is None:
                    await self._write(kind, mirror, key, field, body)
                await self._md.delete(legacy, key)
        self.generation += 1

    def watch(self, watcher: PolicyChange) -> None:
        """Call *watcher* after every change of a stored field."""
        self._watchers.append(watcher)

    # ------------------------------------------------------------------ reading

    def namespace(self, namespace: str) -> dict[str, Any]:
        """A copy of the namespace's stored fields (empty when none is set)."""
        return dict(self._ns.get(namespace, {}))

    def topic(self, full: str) -> dict[str, Any]:
        return dict(self._topics.get(full, {}))

    def namespaces_with(self, field: str) -> list[str]:
        """The namespaces whose record sets *field*."""
        return [ns for ns, fields in self._ns.items() if fields.get(field) is not None]

    def namespace_value(self, namespace: str, field: str) -> Any:
        return self._ns.get(namespace, {}).get(field)

    def topic_value(self, tn: TopicName, field: str) -> Any:
        """The topic's value, else (for a partition) its partitioned topic's; None if unset."""
        value = self._topics.get(tn.full, {}).get(field)
        if value is None and tn.is_partition:
            value = self._topics.get(tn.partitioned_parent, {}).get(field)
        return value

    def resolve(self, tn: TopicName, topic_field: str, ns_field: str) -> Any:
        """The topic level (:meth:`topic_value`) over the namespace's; None if neither sets it."""
        value = self.topic_value(tn, topic_field)
        return self._ns.get(tn.namespace, {}).get(ns_field) if value is None else value

    # ------------------------------------------------------------------ writing

    async def set_namespace_field(self, namespace: str, field: str, value: Any) -> None:
        await self._write(NS_KIND, self._ns, namespace, field, value)
        self._changed(namespace, None)

    async def remove_namespace_field(self, namespace: str, field: str) -> None:
        await self._write(NS_KIND, self._ns, namespace, field, None)
        self._changed(namespace, None)

    async def set_topic_field(self, full: str, field: str, value: Any) -> None:
        await self._write(TOPIC_KIND, self._topics, full, field, value)
        self._changed(None, full)

    async def remove_topic_field(self, full: str, field: str) -> None:
        await self._write(TOPIC_KIND, self._topics, full, field, None)
        self._changed(None, full)

    async def keep_topic_fields(self, full: str, keep: frozenset[str]) -> None:
        """Remove every field of the topic's record but *keep*, in one write."""
        fields = self._topics.get(full, {})
        kept = {k: v for k, v in fields.items() if k in keep}
        if kept == fields:
            return
        if kept:
            await self._md.put(TOPIC_KIND, full, kept)
            self._topics[full] = kept
        else:
            await self._md.delete(TOPIC_KIND, full)
            self._topics.pop(full, None)
        self.generation += 1
        self._changed(None, full)

    async def drop_namespace(self, namespace: str) -> None:
        if self._ns.pop(namespace, None) is not None:
            self.generation += 1
            await self._md.delete(NS_KIND, namespace)

    async def drop_topic(self, full: str) -> None:
        if self._topics.pop(full, None) is not None:
            self.generation += 1
            await self._md.delete(TOPIC_KIND, full)

    def _changed(self, namespace: str | None, full: str | None) -> None:
        for watcher in list(self._watchers):
            watcher(namespace, full)

    async def _write(self, kind: str, mirror: dict[str, dict[str, Any]], key: str, field: str,
                     value: Any) -> None:
        fields = dict(mirror.get(key, {}))
        if value is None:
            if field not in fields:
                return
            del fields[field]
        else:
            fields[field] = value
        if fields:
            await self._md.put(kind, key, fields)
            mirror[key] = fields
        else:
            await self._md.delete(kind, key)
            mirror.pop(key, None)
        self.generation += 1
