"""A connection's topic-list watchers: WATCH_TOPIC_LIST, its updates, WATCH_TOPIC_LIST_CLOSE.

Theory of operation
-------------------
Pattern consumers (the Java client's ``topicsPattern``) watch the persistent topics of a
namespace that match their pattern when CONNECTED advertised ``supports_topic_watchers``
(``enableBrokerSideSubscriptionPatternEvaluation``), as Pulsar's TopicListService serves them:

1. WATCH_TOPIC_LIST: refused with NotAllowedError when the feature is off or the pattern is
   longer than ``subscriptionPatternMaxLength`` (Pulsar's texts; the client then polls), or
   when the connection already has :data:`MAX_WATCHERS` watchers; authorized as
   GET_TOPICS_OF_NAMESPACE. The pattern loses its ``persistent://`` scheme and must match a
   whole topic name without scheme and without partition suffix. The watcher listens to
   ``service.topic_events`` from before the namespace is listed (what arrives meanwhile is
   applied to the list), then answers WATCH_TOPIC_LIST_SUCCESS with the matching topics
   (partitions by their own names) and their hash, or no topics when the client's hash is the
   current one. A second WATCH_TOPIC_LIST with a live watcher's id is answered again.
2. Matching topics created or deleted afterwards: WATCH_TOPIC_UPDATE with them and the new
   hash, at the end of the loop turn they came in: each watcher keeps, per topic changed since
   its last update, whether the client was told it exists, and forgets a topic whose state came
   back to that; one update then carries the net change (at most :data:`MAX_UPDATE_TOPICS`
   names, more in several), so a partitioned topic made with thousands of partitions costs
   one hash of the list, not one per partition (the hash sorts the whole list). While the
   connection is not writable (its peer does not read: ``writes_paused``) nothing is written;
   the changes wait in the same way until writing resumes (:meth:`TopicWatchers.on_writable`).
   What a watcher keeps is bounded by the topics the client knows and those that exist, not by
   how often they came and went; the events of a namespace still being listed are kept the
   same way (the last one per topic).
3. WATCH_TOPIC_LIST_CLOSE: the watcher stops listening; SUCCESS (also for an unknown id).
4. The connection closes: every watcher stops listening (:meth:`TopicWatchers.close`).

Owned by :class:`broker.net.connection.ServerConnection` (created on first use); loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Final, Protocol

from broker.net.handshake import Handshake
from broker.net.view import ConnectionView
from broker.topics.names import TopicName
from broker.topics.service import BrokerService
from protocol import pulsar_pb as pb
from protocol.errors import NotAllowedError, ServiceNotReadyError
from protocol.topic_list import (
    encode_watch_topic_list_success,
    encode_watch_topic_update,
    topics_hash,
)

__all__ = ["MAX_UPDATE_TOPICS", "MAX_WATCHERS", "WATCHERS_DISABLED", "TopicWatchers"]

log = logging.getLogger("horae.net.topic_watchers")

#: Pulsar's texts for a watcher refused (TopicListService).
WATCHERS_DISABLED: Final = (
    "Unable to create topic list watcher: Evaluating subscription patterns is disabled.")
PATTERN_TOO_LONG: Final = "Unable to create topic list watcher: Pattern longer than maximum: {}"
#: Watchers one connection may hold (a client holds one per pattern consumer).
MAX_WATCHERS: Final = 256
#: Most topic names in one WATCH_TOPIC_UPDATE (~60 bytes each: well within a frame).
MAX_UPDATE_TOPICS: Final = 10_000
_SCHEME = "persistent://"


class WatcherConnection(ConnectionView, Protocol):
    """What the watchers need of their connection."""

    @property
    def service(self) -> BrokerService: ...

    @property
    def handshake(self) -> Handshake: ...

    @property
    def writes_paused(self) -> bool: ...


class _Watcher:
    """One watcher: its namespace, pattern, the matching topics, and the changes to them the
    client has not been sent yet."""

    def __init__(self, owner: TopicWatchers, watcher_id: int, namespace: str,
                 pattern: re.Pattern[str]) -> None:
        self._owner = owner
        self.watcher_id = watcher_id
        self.namespace = namespace
        self.pattern = pattern
        self.topics: set[str] | None = None  # None until the namespace has been listed
        self._early: dict[str, bool] = {}  # the last event per topic while it was being listed
        # topics changed since the client's last update -> whether the client knows it exists
        self._unsent: dict[str, bool] = {}

    def matches(self, full: str) -> bool:
        if not full.startswith(_SCHEME):
            return False
        try:
            tn = TopicName.parse(full)
        except ValueError:
            return False
        if tn.namespace != self.namespace:
            return False
        name = tn.partitioned_parent if tn.is_partition else tn.full
        return self.pattern.fullmatch(name[len(_SCHEME):]) is not None

    def listed(self, topics: list[str]) -> None:
        self.topics = {t for t in topics if self.matches(t)}
        for full, created in self._early.items():
            (self.topics.add if created else self.topics.discard)(full)
        self._early.clear()

    def __call__(self, full: str, created: bool) -> None:
        """A topic event (:class:`broker.topics.topic_events.TopicEvents`)."""
        if not self.matches(full):
            return
        if self.topics is None:
            self._early[full] = created  # the last event per topic decides
            return
        if created == (full in self.topics):
            return  # nothing new (a topic loaded again, a partition already listed)
        if created:
            self.topics.add(full)
        else:
            self.topics.discard(full)
        told = self._unsent.pop(full, not created)
        if told != created:
            self._unsent[full] = told
        self._owner.flush_soon(self)

    def told_all(self) -> None:
        """The client was just given the whole list: nothing it was not told remains."""
        self._unsent.clear()

    def flush(self) -> None:
        """Tell the client the net change of the topics changed since its last update."""
        unsent, self._unsent = self._unsent, {}
        topics = self.topics
        if not unsent or topics is None:
            return
        # a topic stays in _unsent only while its state differs from what the client was told
        new = sorted(full for full, told in unsent.items() if not told)
        deleted = sorted(full for full, told in unsent.items() if told)
        # one update per MAX_UPDATE_TOPICS names, each with the hash of the list once applied
        state = (topics - set(new)) | set(deleted)  # what the client knows now
        changes = [(full, False) for full in deleted] + [(full, True) for full in new]
        for start in range(0, len(changes), MAX_UPDATE_TOPICS):
            part = changes[start:start + MAX_UPDATE_TOPICS]
            added = [full for full, created in part if created]
            gone = [full for full, created in part if not created]
            state.difference_update(gone)
            state.update(added)
            self._owner.write(encode_watch_topic_update(self.watcher_id, added, gone,
                                                        topics_hash(state)))


class TopicWatchers:
    """The topic-list watchers of one connection (see the module docstring)."""

    def __init__(self, connection: WatcherConnection) -> None:
        self._connection = connection
        self._watchers: dict[int, _Watcher] = {}
        self._closed = False
        self._due: set[_Watcher] = set()  # watchers with changes to send this turn

    def write(self, data: bytes) -> None:
        self._connection.write(data)

    @property
    def paused(self) -> bool:
        """The connection's peer is not reading: updates wait (module docstring, 2)."""
        return self._connection.writes_paused

    def flush_soon(self, watcher: _Watcher) -> None:
        """*watcher* has changes: they go out at the end of this loop turn, or when the
        connection is writable again (module docstring, 2)."""
        if not self._due:
            asyncio.get_running_loop().call_soon(self._flush_due)
        self._due.add(watcher)

    def _flush_due(self) -> None:
        if self._closed or self.paused:
            self._due.clear()  # the watchers keep their changes for on_writable
            return
        due, self._due = self._due, set()
        for watcher in due:
            if self._watchers.get(watcher.watcher_id) is watcher:  # not closed meanwhile
                watcher.flush()

    def on_writable(self) -> None:
        """The connection is writable again: each watcher's net change goes out."""
        if self._closed:
            return
        for watcher in list(self._watchers.values()):
            watcher.flush()

    def watch(self, m: pb.CommandWatchTopicList) -> None:
        """WATCH_TOPIC_LIST (a RequestError raised here is answered ERROR)."""
        service = self._connection.service
        config = service.config
        if not config.enable_broker_side_subscription_pattern_evaluation:
            raise NotAllowedError(WATCHERS_DISABLED)
        if len(m.topics_pattern) > config.subscription_pattern_max_length:
            raise NotAllowedError(PATTERN_TOO_LONG.format(config.subscription_pattern_max_length))
        self._connection.handshake.require_namespace_lookup(m.namespace)
        watcher_id = int(m.watcher_id)
        existing = self._watchers.get(watcher_id)
        if existing is not None and existing.topics is not None:
            self._answer(int(m.request_id), existing, m)
            return
        if existing is not None:
            raise ServiceNotReadyError("Topic list watcher is already present on the connection")
        if len(self._watchers) >= MAX_WATCHERS:
            raise NotAllowedError(f"Too many topic list watchers on the connection "
                                  f"(at most {MAX_WATCHERS})")
        pattern_text = m.topics_pattern
        if "://" in pattern_text:
            head, _, tail = pattern_text.partition("://")
            pattern_text = ("^" if head.startswith("^") else "") + tail
        try:
            pattern = re.compile(pattern_text)
        except re.error as exc:
            raise NotAllowedError(f"Unable to create topic list watcher: invalid pattern: "
                                  f"{exc}") from None
        watcher = _Watcher(self, watcher_id, m.namespace, pattern)
        self._watchers[watcher_id] = watcher
        service.topic_events.add(watcher)
        self._connection.spawn(self._list(int(m.request_id), watcher, m), int(m.request_id))

    async def _list(self, request_id: int, watcher: _Watcher,
                    m: pb.CommandWatchTopicList) -> None:
        try:
            topics = await self._connection.service.topics_of_namespace(watcher.namespace)
        except BaseException:
            self._forget(watcher.watcher_id)
            raise
        if self._closed or self._watchers.get(watcher.watcher_id) is not watcher:
            return  # closed meanwhile
        watcher.listed(topics)
        self._answer(request_id, watcher, m)

    def _answer(self, request_id: int, watcher: _Watcher, m: pb.CommandWatchTopicList) -> None:
        assert watcher.topics is not None
        current = sorted(watcher.topics)
        digest = topics_hash(current)
        if m.HasField("topics_hash") and m.topics_hash == digest:
            current = []
        watcher.told_all()
        self.write(encode_watch_topic_list_success(request_id, watcher.watcher_id, current,
                                                   digest))

    def unwatch(self, watcher_id: int) -> None:
        """WATCH_TOPIC_LIST_CLOSE (the handler answers SUCCESS)."""
        self._forget(watcher_id)

    def _forget(self, watcher_id: int) -> None:
        watcher = self._watchers.pop(watcher_id, None)
        if watcher is not None:
            self._connection.service.topic_events.remove(watcher)

    def close(self) -> None:
        """The connection went away: every watcher stops listening."""
        self._closed = True
        for watcher_id in list(self._watchers):
            self._forget(watcher_id)
