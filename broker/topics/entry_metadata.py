"""A persistent topic's broker entry metadata: what its configured interceptors stamp on entries.

Theory of operation
-------------------
With ``brokerEntryMetadataInterceptors`` set, a :class:`~broker.topics.topic.Topic` owns one
:class:`EntryStamper` and hands it every run of entries right before their append
(:meth:`stamp`, on the loop, in ledger order): each entry gets the prefix of
:mod:`protocol.entry_metadata` with the broker's clock (``AppendBrokerTimestampMetadataInterceptor``)
and/or the index of its last message (``AppendIndexMetadataInterceptor``: the topic's message
count minus one; a batch of N moves it by N), as Pulsar's interceptors do. Entries the ledger
refuses (it is fenced, closed or the store is read-only) are not stamped, so they take no index.

Durability of the index: the stored entries carry it. When the topic loads, :meth:`recover`
reads it back from the last stored entry (after a kill -9 too: only durable entries are read),
and from the ``entry-index`` record of the metadata store, which the topic writes before
trimming ledgers and when it closes (:meth:`record`), so a topic whose every entry was trimmed
still continues its count, as Pulsar keeps it in the managed ledger's properties. An entry
stored without the prefix (written while no index interceptor was configured) says nothing; the
count then continues from the record, else from 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from protocol.entry_metadata import APPEND_BROKER_TIMESTAMP, APPEND_INDEX, parse_prefix, prefix
from protocol.errors import MalformedEntryError
from storage.metadata import MetadataStore

__all__ = ["ENTRY_INDEX_KIND", "EntryStamper", "forget"]

log = logging.getLogger("horae.topic")

ENTRY_INDEX_KIND = "entry-index"
"""Metadata-store kind of a topic's last broker entry index (key: the full topic name)."""


class EntryStamper:
    """The broker entry metadata of one topic (module docstring)."""

    def __init__(self, interceptors: frozenset[str], metadata: MetadataStore, full: str) -> None:
        self.timestamps = APPEND_BROKER_TIMESTAMP in interceptors
        self.indexes = APPEND_INDEX in interceptors
        self.index = -1
        """The index of the last message stamped (-1: none yet)."""
        self._recorded = -1
        self._md = metadata
        self._full = full

    def stamp(self, entries: list[bytes], messages: Sequence[int]) -> list[bytes]:
        """*entries* (of ``messages[i]`` messages each) with their prefixes, in order."""
        now = int(time.time() * 1000) if self.timestamps else None
        if not self.indexes:
            return [prefix(entry, now, None) for entry in entries]
        index = self.index
        out: list[bytes] = []
        for entry, count in zip(entries, messages, strict=True):
            index += count
            out.append(prefix(entry, now, index))
        self.index = index
        return out

    async def recover(self, last_entry: bytes | None) -> None:
        """Continue the count after the topic's last stored entry (None: it has none) and the
        recorded index, whichever is further."""
        doc = await self._md.get(ENTRY_INDEX_KIND, self._full)
        if doc is not None:
            self._recorded = int(doc["index"])
            self.index = max(self.index, self._recorded)
        if last_entry is None:
            return
        try:
            found = parse_prefix(last_entry)
        except MalformedEntryError as exc:
            log.warning("%s: the last entry's broker entry metadata does not parse (%s)",
                        self._full, exc)
            return
        if found is not None and found.index is not None:
            self.index = max(self.index, found.index)

    async def record(self) -> None:
        """Write the current index to the metadata store (before ledgers are trimmed, at
        close), if it moved since the last record."""
        if self.indexes and self.index > self._recorded:
            index = self.index
            await self._md.put(ENTRY_INDEX_KIND, self._full, {"index": index})
            self._recorded = max(self._recorded, index)


async def forget(metadata: MetadataStore, full: str) -> None:
    """The topic is deleted: a topic created again under its name counts from 0."""
    await metadata.delete(ENTRY_INDEX_KIND, full)
