"""Persistent topics coming and going, told to whoever listens (the topic-list watchers).

Theory of operation
-------------------
The service owns one :class:`TopicEvents` (``service.topic_events``) and calls
:meth:`TopicEvents.created` when a persistent topic or partition is loaded (a new one, or one
found in storage) or a partitioned topic gains partitions, and :meth:`TopicEvents.deleted` when
one is deleted (a partitioned topic's partitions all, loaded or not). Listeners are plain callables ``(full_name, created)``, registered and removed by
their owner (a connection's watchers); they run synchronously on the loop thread and must not
raise. A listener decides for itself whether a name is news (a topic loaded again after an
unload is told again). Loop thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

__all__ = ["TopicEvents", "TopicListener"]

log = logging.getLogger("horae.topic_events")

TopicListener = Callable[[str, bool], None]
"""Called with a full topic name and True (created) or False (deleted)."""


class TopicEvents:
    """The listeners of topic creation and deletion (see the module docstring)."""

    def __init__(self) -> None:
        self._listeners: dict[int, TopicListener] = {}

    def add(self, listener: TopicListener) -> None:
        self._listeners[id(listener)] = listener

    def remove(self, listener: TopicListener) -> None:
        self._listeners.pop(id(listener), None)

    def __len__(self) -> int:
        return len(self._listeners)

    def created(self, names: Iterable[str]) -> None:
        self._tell(names, True)

    def deleted(self, names: Iterable[str]) -> None:
        self._tell(names, False)

    def _tell(self, names: Iterable[str], created: bool) -> None:
        if not self._listeners:
            return
        for name in names:
            for listener in list(self._listeners.values()):
                try:
                    listener(name, created)
                except Exception:  # one broken listener must not stop the others
                    log.exception("topic listener failed on %s", name)
