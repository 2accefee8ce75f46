"""Shadow topics (Pulsar's PIP-180) on one node: which topic a shadow reads, and opening it.

Theory of operation
-------------------
A shadow topic is a persistent topic created with the property ``PULSAR.SHADOW_SOURCE`` (the
source topic's full name), as ``pulsar-admin topics create-shadow-topic`` creates it. For a
partitioned shadow the property is the partitioned topic's, and partition *i* reads
partition *i* of the source (as Pulsar's ``BrokerService.fetchTopicPropertiesAsync`` maps
it). The property is kept with the topic's other properties (the policy records): it is
durable before the create is answered and goes when the shadow is deleted.

Loading a shadow loads its source first, then opens the shadow's managed ledger as a view
of the source's (:class:`storage.shadow.ShadowLedger`): the source's entries and message
ids, the shadow's own cursors (its subscriptions, kept in the shadow's own directory). The
shadow's subscriptions hear the source's new entries as the source's do. Closing the source
(unload, delete, reload after a failed write) closes its loaded shadows first; their
clients reconnect and load them again over the source's new ledger.

A shadow may be the source of another shadow (Pulsar creates one): it then reads the
first source's ledger, and closes (so reloads) with it. A shadow's schema is its root source's (:mod:`broker.net.schemas`, as Pulsar's
``PersistentTopic.getSchemaId``). Nothing is published on a shadow: a SEND is refused with Pulsar's NotAllowedError ``Cannot
send messages to a shadow topic`` (:meth:`broker.topics.topic.Topic.check_publish`).

The source's ``shadowTopics`` topic policy (``set-shadow-topics``) is kept as Pulsar keeps
it, a local topic policy: Pulsar's source replicates its entries to the topics listed there;
here a shadow reads the source's ledger directly, so the list is not needed for delivery. It
still guards the source as in Pulsar: a source that lists shadows is not deleted without
``force``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from broker.topics.names import TopicName
from broker.topics.policy_records import PolicyRecords
from broker.topics.topic import Topic
from protocol.errors import NotAllowedError
from storage.ledger import ManagedLedger
from storage.store import SegmentStore

__all__ = [
    "SHADOW_SOURCE_KEY",
    "SHADOW_TOPICS",
    "open_topic_ledger",
    "root_source",
    "shadow_source",
    "shadow_topics_of",
    "shadows_of",
]

#: The topic property naming a shadow topic's source (Pulsar's PROPERTY_SOURCE_TOPIC_KEY).
SHADOW_SOURCE_KEY = "PULSAR.SHADOW_SOURCE"
#: The source's topic policy field listing its shadows (Pulsar's TopicPolicies.shadowTopics).
SHADOW_TOPICS = "shadowTopics"
_PROPERTIES = "properties"


def _own_source(records: PolicyRecords, full: str) -> str | None:
    props: Any = records.topic(full).get(_PROPERTIES)
    if not isinstance(props, dict):
        return None
    value = props.get(SHADOW_SOURCE_KEY)
    return value if isinstance(value, str) and value else None


def shadow_source(records: PolicyRecords, tn: TopicName) -> TopicName | None:
    """The source topic of the shadow *tn*, None when *tn* is not a shadow. A partition of a
    partitioned shadow reads the same partition of the source."""
    own = _own_source(records, tn.full)
    if own is not None:
        return TopicName.parse(own)
    if tn.is_partition:
        parent = _own_source(records, tn.partitioned_parent)
        if parent is not None:
            return TopicName.parse(parent).partition(tn.partition_index)
    return None


def root_source(records: PolicyRecords, tn: TopicName) -> TopicName | None:
    """The topic whose ledger the shadow *tn* reads in the end (a shadow may shadow a
    shadow, as Pulsar lets one be created); None when *tn* is not a shadow. Raises
    NotAllowedError on a cycle (properties edited after creation)."""
    seen = {tn.full}
    source = shadow_source(records, tn)
    while source is not None:
        if source.full in seen:
            raise NotAllowedError(f"Shadow topic {tn.full} has a cycle of shadow sources")
        seen.add(source.full)
        further = shadow_source(records, source)
        if further is None:
            return source
        source = further
    return None


def shadow_topics_of(records: PolicyRecords, full: str) -> list[str]:
    """The source's ``shadowTopics`` policy (empty when unset)."""
    value: Any = records.topic(full).get(SHADOW_TOPICS)
    return [str(v) for v in value] if isinstance(value, list) else []


def shadows_of(topics: Iterable[Topic], source_full: str) -> list[Topic]:
    """The loaded shadow topics reading *source_full*."""
    return [t for t in topics if t.shadow_source == source_full]


async def open_topic_ledger(store: SegmentStore, records: PolicyRecords, tn: TopicName,
                            load_source: Callable[[str], Awaitable[Topic]]) -> ManagedLedger:
    """The managed ledger the topic *tn* is loaded over: its own, or for a shadow a view of
    its source's (*load_source* loads the source topic, which must exist)."""
    if root_source(records, tn) is None:   # (raises on a cycle, before anything loads)
        return await store.open_ledger(tn.full)
    source = shadow_source(records, tn)
    assert source is not None
    source_topic = await load_source(source.full)
    return await store.open_shadow_ledger(tn.full, source_topic.ledger)
