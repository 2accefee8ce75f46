"""The per-family columns of the topics' kept text, patched where topics changed.

Theory of operation
-------------------
:meth:`broker.metrics.collector.HoraeCollector.collect_rendered_async` keeps each topic's text
as one row: a tuple with that topic's share of every per-topic family. A family's output is a
column: every topic's share of it, in topic order. Turning 10,000 rows of ~100 families into
columns touches a million text objects scattered over the heap (a reference taken to each):
~0.2-0.4 s of CPU per scrape at 10,000 topics, whether or not anything moved.

:class:`TopicColumns` keeps, per output format, the rows of the previous scrape (by identity)
and the columns made of them. A scrape whose rows are the same objects at the same places
(every topic reused its kept text) gets the same columns back. Where a few rows are new (topics
rendered again), only the columns whose text differs at those places are copied and patched;
the others are the kept lists. Anything else (a topic loaded or unloaded moves the places, or
most rows changed) builds every column again. So a column always holds, at place *i*, the
*i*-th row's text of its family: what the transposition of all rows gives.

Columns handed out are never mutated afterwards (a patch copies the column first), so a
consumer may still be reading the previous scrape's columns in another thread (the snapshot
writer) while the next scrape runs. Memory: one list of references per family (no text is
copied). Loop only, no locks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["TopicColumns"]

#: (signature, the topic's text per family) as the collector keeps it for one topic.
Row = tuple[object, Sequence[Any]]


class TopicColumns:
    """Columns of the last scrape's rows per format (module docstring)."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[list[Row], list[list[Any]]]] = {}
        self.rebuilt = 0   # scrapes that built every column (for tests and profiles)
        self.patched = 0   # scrapes that reused or patched the kept columns

    def clear(self) -> None:
        self._kept.clear()

    def columns(self, fmt: str, rows: list[Row], width: int) -> list[list[Any]]:
        """*width* columns of *rows* (one per family, in topic order). Do not mutate them."""
        kept = self._kept.get(fmt)
        columns: list[list[Any]] | None = None
        if kept is not None and len(kept[0]) == len(rows) and len(kept[1]) == width:
            columns = _patched(kept[0], kept[1], rows)
        if columns is None:
            self.rebuilt += 1
            columns = [list(column) for column in zip(*(row[1] for row in rows), strict=True)]
            if not columns:
                columns = [[] for _ in range(width)]
        else:
            self.patched += 1
        self._kept[fmt] = (rows, columns)
        return columns


def _patched(old_rows: list[Row], old_columns: list[list[Any]],
             rows: list[Row]) -> list[list[Any]] | None:
    """*old_columns* with the places where *rows* differ from *old_rows* patched, or ``None``
    when most places differ (building every column is then cheaper)."""
    moved = [i for i, (row, old) in enumerate(zip(rows, old_rows, strict=True)) if row is not old]
    if len(moved) * 2 > len(rows):
        return None
    columns = list(old_columns)
    copied: set[int] = set()
    for i in moved:
        texts, old_texts = rows[i][1], old_rows[i][1]
        for j, (text, old_text) in enumerate(zip(texts, old_texts, strict=True)):
            if text is not old_text:
                if j not in copied:
                    columns[j] = list(columns[j])
                    copied.add(j)
                columns[j][i] = text
    return columns
