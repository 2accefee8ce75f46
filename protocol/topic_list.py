"""Topic-list watchers on the wire: WATCH_TOPIC_LIST and its answers, and the list's hash.

Theory of operation
-------------------
A client that saw ``supports_topic_watchers`` in CONNECTED may watch the topics of a namespace
that match a pattern instead of polling GET_TOPICS_OF_NAMESPACE: WATCH_TOPIC_LIST (request id,
watcher id, namespace, pattern, the hash of the list it already has) is answered
WATCH_TOPIC_LIST_SUCCESS (the matching topics and their hash; no topics when the client's hash
is already the current one), then WATCH_TOPIC_UPDATE (new and deleted topics, the new hash) as
topics come and go, until WATCH_TOPIC_LIST_CLOSE (answered SUCCESS).

The hash is Pulsar's ``TopicList.calculateHash``: Guava's CRC32C over the UTF-8 names in sorted
order, written as the lower-case hex of the hash's little-endian bytes.
"""

from __future__ import annotations

from collections.abc import Iterable

from crc32c import crc32c

from protocol import pulsar_pb as pb
from protocol.framing import encode_command

__all__ = [
    "encode_watch_topic_list",
    "encode_watch_topic_list_close",
    "encode_watch_topic_list_success",
    "encode_watch_topic_update",
    "topics_hash",
]

_T = pb.BaseCommand


def topics_hash(topics: Iterable[str]) -> str:
    """Pulsar's hash of a topic list (order does not matter)."""
    crc = 0
    for name in sorted(topics):
        crc = crc32c(name.encode(), crc)
    return crc.to_bytes(4, "little").hex()


def encode_watch_topic_list_success(request_id: int, watcher_id: int, topics: Iterable[str],
                                    topics_hash_: str) -> bytes:
    cmd = pb.BaseCommand(type=_T.WATCH_TOPIC_LIST_SUCCESS)
    r = cmd.watchTopicListSuccess
    r.request_id, r.watcher_id, r.topics_hash = request_id, watcher_id, topics_hash_
    r.topic.extend(topics)
    return encode_command(cmd)


def encode_watch_topic_update(watcher_id: int, new_topics: Iterable[str],
                              deleted_topics: Iterable[str], topics_hash_: str) -> bytes:
    cmd = pb.BaseCommand(type=_T.WATCH_TOPIC_UPDATE)
    u = cmd.watchTopicUpdate
    u.watcher_id, u.topics_hash = watcher_id, topics_hash_
    u.new_topics.extend(new_topics)
    u.deleted_topics.extend(deleted_topics)
    return encode_command(cmd)


# --------------------------------------------------------------------------- client side

def encode_watch_topic_list(request_id: int, watcher_id: int, namespace: str, pattern: str,
                            topics_hash_: str | None = None) -> bytes:
    cmd = pb.BaseCommand(type=_T.WATCH_TOPIC_LIST)
    w = cmd.watchTopicList
    w.request_id, w.watcher_id, w.namespace, w.topics_pattern = (
        request_id, watcher_id, namespace, pattern)
    if topics_hash_ is not None:
        w.topics_hash = topics_hash_
    return encode_command(cmd)


def encode_watch_topic_list_close(request_id: int, watcher_id: int) -> bytes:
    cmd = pb.BaseCommand(type=_T.WATCH_TOPIC_LIST_CLOSE)
    cmd.watchTopicListClose.request_id = request_id
    cmd.watchTopicListClose.watcher_id = watcher_id
    return encode_command(cmd)
