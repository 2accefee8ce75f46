"""A topic's snapshot lines, written straight from its record: no families, no samples.

Theory of operation
-------------------
:meth:`broker.metrics.collector.HoraeCollector.collect_rendered_async` keeps each topic's
share of every per-topic family as text and renders it again when the topic's figures move.
The general way to render is to build the families of prometheus_client (a ``Sample`` and,
for each histogram bucket, a labels dict per series) and turn each sample into a line
(:func:`broker.metrics.snapshots.sample_line_texts`). For the snapshot format that cost
~190 µs a topic on the first export after 10,000 topics appeared, most of it objects built
only to be formatted and dropped, and the garbage collections those objects set off.

:class:`TopicSnapshotLines` writes the same lines from what the record holds: the topic's
series values (in :data:`broker.metrics.collector._TOPIC_SERIES` order), its other series
as (family, label values, value) triples in the order they were added, its maxima, its
write-latency accumulator and its windowed latency and entry-size counts. A plan built once
from the per-topic template (one entry per template family: which figures its lines come
from, and each line's fixed head) says what each family holds. The line format is the
snapshot writer's own (:func:`broker.metrics.snapshots.line_head`,
:func:`broker.metrics.snapshots.labels_text`, :func:`broker.metrics.snapshots.value_text`);
the order and the values of the lines are those the families would hold: a family's series
in the order they were first added, sums added in order starting from ``0.0``, maxima as
read; histogram buckets cumulative, then ``+Inf``, ``_count`` and ``_sum``.

Invariant: for every record, the text of each family equals what the general way renders
for it, byte for byte (``tests/admin/test_metrics_rendered.py`` compares the two as topics
change, and over generated topics). A template this module does not know (a family added to
the per-topic ones without a plan here) fails the plan's construction, not a scrape's text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client.metrics_core import Metric

from broker.metrics.entry_size import COUNT as ENTRY_SIZE_COUNT
from broker.metrics.entry_size import ENTRY_SIZE_SERIES
from broker.metrics.entry_size import SUM as ENTRY_SIZE_SUM
from broker.metrics.exposition import SUB_LABELS, TOPIC_LABELS
from broker.metrics.snapshots import labels_text, line_head, value_text
from broker.metrics.write_latency import HISTOGRAM, LE_LABELS, PULSAR_BUCKET_SERIES

__all__ = ["TopicRecord", "TopicSnapshotLines"]

#: What a topic's lines are made of: its label values, its topic series' values (in the
#: collector's topic-series order), its other series and its maxima (flat triples: family
#: name, label values, value), its write-latency accumulator (buckets, overflow, sum ms) and
#: its windowed latency and entry-size counts.
TopicRecord = tuple[tuple[str, ...], Sequence[float], Sequence[object], Sequence[object],
                    Sequence[float], Sequence[float], Sequence[float]]

# What a template family's lines come from (the first item of its plan entry).
_TABLE, _HISTOGRAM, _LATENCY_GAUGE, _SIZE_GAUGE, _SIZE_COUNT, _SIZE_SUM = range(6)


class TopicSnapshotLines:
    """The snapshot text of one topic's share of each per-topic template family."""

    __slots__ = ("_plan", "_topic_places")

    def __init__(self, template: Sequence[Metric], topic_series: Sequence[str]) -> None:
        """*template*: the per-topic families in render order; *topic_series*: the family
        names of a record's topic values, in their order."""
        self._topic_places = {name: i for i, name in enumerate(topic_series)}
        # (what the lines come from, the family's name, its bucket's index, the lines' head)
        plan: list[tuple[int, str, int, str]] = []
        for family in template:
            name, typ = family.name, family.type
            if name == HISTOGRAM:
                plan.append((_HISTOGRAM, name, 0, ""))
            elif name in PULSAR_BUCKET_SERIES:
                plan.append((_LATENCY_GAUGE, name, PULSAR_BUCKET_SERIES.index(name),
                             line_head(name, typ)))
            elif name in ENTRY_SIZE_SERIES:
                plan.append((_SIZE_GAUGE, name, ENTRY_SIZE_SERIES.index(name),
                             line_head(name, typ)))
            elif name == ENTRY_SIZE_COUNT:
                plan.append((_SIZE_COUNT, name, 0, line_head(name, typ)))
            elif name == ENTRY_SIZE_SUM:
                plan.append((_SIZE_SUM, name, 0, line_head(name, typ)))
            elif typ in ("counter", "gauge"):
                sample_name = name + "_total" if typ == "counter" else name
                plan.append((_TABLE, name, 0, line_head(sample_name, typ)))
            else:
                raise ValueError(f"no snapshot lines for the per-topic family {name!r} ({typ})")
        self._plan = plan

    def render(self, record: TopicRecord, texts: list[bytes],
               families: Iterable[int] | None = None) -> None:
        """Set ``texts[j]`` to *record*'s lines of template family *j*, UTF-8 encoded (``b""``
        where it has none), for each *j* in *families* (all of them if ``None``)."""
        key, topic_values, flat, maxima, latency, latency_windowed, sizes_windowed = record
        plan = self._plan
        topic_places = self._topic_places
        labels_of: dict[tuple[str, ...], str] = {}

        def labels(label_values: tuple[str, ...]) -> str:
            text = labels_of.get(label_values)
            if text is None:
                names = SUB_LABELS if len(label_values) == 4 else TOPIC_LABELS
                text = labels_of[label_values] = labels_text(
                    dict(zip(names, label_values, strict=True)))
            return text

        own = labels(key)
        series = _series(key, topic_values, topic_places, flat, maxima)
        for j in range(len(plan)) if families is None else families:
            kind, name, i, head = plan[j]
            lines: list[str] = []
            if kind == _TABLE:
                rows = series.get(name)
                if rows is None:   # the usual case: a topic series and nothing else
                    place = topic_places.get(name)
                    if place is not None:
                        _line(lines, head, own, 0.0 + topic_values[place])
                else:
                    for label_values, value in rows.items():
                        _line(lines, head, labels(label_values), value)
            elif kind == _HISTOGRAM:
                lines = _histogram_lines(own, latency)
            else:
                if kind == _LATENCY_GAUGE:
                    value = float(latency_windowed[i]) if i < len(latency_windowed) else 0.0
                elif kind == _SIZE_GAUGE:
                    value = float(sizes_windowed[i])
                elif kind == _SIZE_COUNT:
                    value = float(sum(sizes_windowed[:len(ENTRY_SIZE_SERIES)]))
                else:   # _SIZE_SUM
                    value = float(sizes_windowed[len(ENTRY_SIZE_SERIES)])
                _line(lines, head, own, value)
            texts[j] = "".join(lines).encode("utf-8")


def _line(lines: list[str], head: str, labels: str, value: float | None) -> None:
    """Add the line of one sample to *lines*, unless the file leaves it out (no value, NaN)."""
    if value is None:
        return
    number = float(value)
    if number - number == 0.0:   # finite: its repr is its JSON (value_text, without a call)
        lines.append(f'{head}{labels},"value":{float.__repr__(number)}}}\n')
        return
    text = value_text(number)
    if text is not None:
        lines.append(f'{head}{labels},"value":{text}}}\n')


def _series(key: tuple[str, ...], topic_values: Sequence[float],
            topic_places: dict[str, int], flat: Sequence[object], maxima: Sequence[object]
            ) -> dict[str, dict[tuple[str, ...], float]]:
    """The series of the families a record's flat triples and maxima name, as a scrape adds
    them up: a family that is also a topic series starts with the topic's value, flat series
    are summed from ``0.0`` in the order added, then maxima keep the larger value."""
    out: dict[str, dict[tuple[str, ...], float]] = {}

    def family(name: str) -> dict[tuple[str, ...], float]:
        rows = out.get(name)
        if rows is None:
            rows = out[name] = {}
            place = topic_places.get(name)
            if place is not None:
                rows[key] = 0.0 + topic_values[place]
        return rows

    for i in range(0, len(flat), 3):
        name, label_values, value = flat[i:i + 3]
        rows = family(name)  # type: ignore[arg-type]
        rows[label_values] = rows.get(label_values, 0.0) + value  # type: ignore
    for i in range(0, len(maxima), 3):
        name, label_values, value = maxima[i:i + 3]
        rows = family(name)  # type: ignore[arg-type]
        rows[label_values] = (max(rows[label_values], value)  # type: ignore
                              if label_values in rows else value)
    return out


def _histogram_lines(own: str, acc: Sequence[float]) -> list[str]:
    """The write-latency histogram's lines of one topic: cumulative buckets (``le``), then
    ``+Inf``, ``_count`` and ``_sum``."""
    bucket = _BUCKET_HEAD
    rest = own[1:]   # the labels after "le", which sorts before every other label name
    lines: list[str] = []
    total = 0.0
    for i, le in enumerate(LE_LABELS):
        total += acc[i]
        _line(lines, bucket, f'{{"le":"{le}",{rest}', total)
    for c in acc[len(LE_LABELS):-1]:
        total += c
    _line(lines, bucket, f'{{"le":"+Inf",{rest}', total)
    _line(lines, _COUNT_HEAD, own, total)
    _line(lines, _SUM_HEAD, own, float(acc[-1]))
    return lines


_BUCKET_HEAD = line_head(HISTOGRAM + "_bucket", "histogram")
_COUNT_HEAD = line_head(HISTOGRAM + "_count", "histogram")
_SUM_HEAD = line_head(HISTOGRAM + "_sum", "histogram")
