"""A loaded persistent topic's lifecycle, as one value (:class:`broker.topics.topic.Topic`)."""

from __future__ import annotations

import enum

__all__ = ["TopicState"]


class TopicState(enum.Enum):
    """A loaded topic's lifecycle: OPEN -> TERMINATED (no message will be added; a failed
    record of the termination goes back to OPEN) -> FENCED (a persistence failure: being
    reloaded) -> CLOSED; any state -> CLOSED."""

    OPEN = "open"
    TERMINATED = "terminated"
    FENCED = "fenced"
    CLOSED = "closed"
