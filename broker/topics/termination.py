"""A topic's terminated state (Pulsar's ``terminate``): no more messages, ever.

Theory of operation
-------------------
One :class:`Termination` per loaded topic (``Topic.termination``). :meth:`begin` refuses new
messages at once; once the appends in flight are durable, :meth:`record` writes the topic's
last message id in the metadata store (kind ``"terminated"``, key the full topic
name) before it reports the topic terminated, so the state survives unloads and restarts;
:meth:`load` reads it back when the topic loads. From then on the topic refuses new producers
and SENDs with ``TopicTerminatedError`` ("Topic was already terminated"), as Pulsar does.
Consumers are not sent REACHED_END_OF_TOPIC: pulsar-client 3.13 (C++ 4.2.0) closes the
connection on that command (reference 2.2); they simply receive nothing more.

Terminating twice answers the same last id. Deleting the topic drops the record
(:func:`forget`). Called by :class:`broker.topics.topic.Topic` and the admin API.
"""

from __future__ import annotations

from storage.metadata import MetadataStore
from storage.positions import Position

__all__ = ["TERMINATED_KIND", "TERMINATED_REASON", "Termination", "forget"]

TERMINATED_KIND = "terminated"
TERMINATED_REASON = "Topic was already terminated"


class Termination:
    """The terminated flag and last message id of one topic (module docstring)."""

    def __init__(self, metadata: MetadataStore, full: str) -> None:
        self._md = metadata
        self._full = full
        self.last: Position | None = None
        self.terminated = False
        self.recorded = False   # durable (terminated may be True alone while draining)

    async def load(self) -> None:
        doc = await self._md.get(TERMINATED_KIND, self._full)
        if doc is not None:
            self.terminated = self.recorded = True
            ledger, entry = int(doc["ledgerId"]), int(doc["entryId"])
            self.last = Position(ledger, entry) if ledger >= 0 else None

    def begin(self) -> None:
        """Refuse new messages from now on (the topic then drains its in-flight appends)."""
        self.terminated = True

    async def record(self, last: Position | None) -> Position | None:
        """Make the termination durable at *last* (None: the topic has no message); a failed
        write lifts the refusal again, so the topic is never terminated only in memory."""
        self.terminated = True
        doc = {"ledgerId": last.ledger_id if last else -1, "entryId": last.entry_id if last else -1}
        try:
            await self._md.put(TERMINATED_KIND, self._full, doc)
        except BaseException:
            self.terminated = False
            raise
        self.last = last
        self.recorded = True
        return last


async def forget(metadata: MetadataStore, full: str) -> None:
    """The topic is deleted: a topic created again under its name is not terminated."""
    await metadata.delete(TERMINATED_KIND, full)
