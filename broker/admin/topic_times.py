"""A topic's creation and last-publish times, as Pulsar's topic stats carry them.

Theory of operation: ``topicCreationTimeStamp`` is kept in the topic's policy record (so it is
durable, survives restarts and goes with the topic); a topic that has none yet gets it the
first time its stats are read: the creation time of its oldest ledger (the one made when the
topic was created, unless retention has trimmed it since), else now. ``lastPublishTimeStamp``
is the publish time of the topic's last stored message, read from that entry (0 when the
topic holds none), so it needs no bookkeeping on the publish path and is right after a
restart. A partitioned topic's stats take the earliest creation and the latest publish of its
partitions.
"""

from __future__ import annotations

import time
from typing import Any

from broker.admin.service import AdminEntries, AdminService
from broker.topics.topic import Topic
from protocol.metadata import entry_timestamp

__all__ = ["CREATED", "LAST_PUBLISH", "stamp", "stamp_partitioned"]

CREATED = "topicCreationTimeStamp"
LAST_PUBLISH = "lastPublishTimeStamp"


async def _created_ms(admin: AdminService, topic: Topic) -> int:
    records = admin.policy_store.records
    value = records.topic(topic.full).get(CREATED)
    if isinstance(value, int):
        return value
    value = AdminEntries.first_ledger_created_ms(topic) or int(time.time() * 1000)
    await records.set_topic_field(topic.full, CREATED, value)
    return value


async def _last_publish_ms(topic: Topic) -> int:
    pos = AdminEntries.last_position(topic)
    if pos.entry_id < 0:
        return 0
    data = await AdminEntries.read(topic, pos)
    if data is None:
        return 0
    try:
        return int(entry_timestamp(data))
    except Exception:   # an entry whose metadata does not parse has no publish time to show
        return 0


async def stamp(admin: AdminService, topic: Topic, doc: dict[str, Any]) -> None:
    """Add both times to *topic*'s stats document."""
    doc[CREATED] = await _created_ms(admin, topic)
    doc[LAST_PUBLISH] = await _last_publish_ms(topic)


def stamp_partitioned(doc: dict[str, Any], partitions: list[dict[str, Any]]) -> None:
    """The partitioned topic's times from its partitions' documents."""
    created = [p[CREATED] for p in partitions if p.get(CREATED)]
    doc[CREATED] = min(created) if created else 0
    doc[LAST_PUBLISH] = max((p.get(LAST_PUBLISH, 0) for p in partitions), default=0)
