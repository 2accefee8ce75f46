"""A topic's lines, written straight from its record: no prometheus_client families, no samples.

Theory of operation
-------------------
:meth:`broker.metrics.collector.HoraeCollector.collect_rendered_async` keeps each topic's
share of every per-topic family as text, in two formats (the snapshot exporter's lines and
the Prometheus text of ``/metrics``), and renders it again when the topic's figures move. The
general way to render is to build prometheus_client's families (a ``Sample`` and, for each
histogram bucket, a labels dict per series) and let the format's serialiser turn each sample
into a line. That cost ~190 µs a topic in the snapshot format and ~350 in Prometheus text on
the first export after 10,000 topics appeared, most of it objects built only to be formatted
and dropped, and the garbage collections those objects set off.

:class:`TopicLines` writes the same lines from what the record holds: the topic's series
values (in the collector's topic-series order), its other series as (family, label values,
value) triples in the order they were added, its maxima, its write-latency accumulator and
its windowed latency and entry-size counts. A plan built once from the per-topic template
(one entry per template family: which figures its lines come from, and each line's fixed
head) says what each family holds; the order and the values of the lines are those the
families would hold: a family's series in the order they were first added, sums added in
order starting from ``0.0``, maxima as read; histogram buckets cumulative, then ``+Inf``,
``_count`` and ``_sum``. What a line looks like is its format's:

* snapshot lines: the writer's own pieces (:func:`broker.metrics.snapshots.line_head`,
  :func:`broker.metrics.snapshots.labels_text`, :func:`broker.metrics.snapshots.value_text`);
* Prometheus text: ``name{labels} value``, the labels as prometheus_client writes them (one
  ``generate_latest`` of one sample per label set of the topic: its escaping and label order,
  whatever its version) and the value by its ``floatToGoString``.

Invariant: for every record, the text of each family equals what the general way renders
for it, byte for byte (``tests/admin/test_metrics_rendered.py`` compares the two as topics
change, and over generated topics). A template this module does not know (a family added to
the per-topic ones without a plan here) fails the plan's construction, not a scrape's text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from broker.metrics.entry_size import COUNT as ENTRY_SIZE_COUNT
from broker.metrics.entry_size import ENTRY_SIZE_SERIES
from broker.metrics.entry_size import SUM as ENTRY_SIZE_SUM
from broker.metrics.exposition import SUB_LABELS, TOPIC_LABELS, CollectedFamilies
from broker.metrics.snapshots import labels_text, line_head, value_text
from broker.metrics.write_latency import HISTOGRAM, LE_LABELS, PULSAR_BUCKET_SERIES

__all__ = ["TopicLines", "TopicRecord"]

#: What a topic's lines are made of: its label values, its topic series' values (in the
#: collector's topic-series order), its other series and its maxima (flat triples: family
#: name, label values, value), its write-latency accumulator (buckets, overflow, sum ms) and
#: its windowed latency and entry-size counts.
TopicRecord = tuple[tuple[str, ...], Sequence[float], Sequence[object], Sequence[object],
                    Sequence[float], Sequence[float], Sequence[float]]

# What a template family's lines come from (the first item of its plan entry).
_TABLE, _HISTOGRAM, _LATENCY_GAUGE, _SIZE_GAUGE, _SIZE_COUNT, _SIZE_SUM = range(6)
_BUCKET, _COUNT, _SUM = (f"{HISTOGRAM}_bucket", f"{HISTOGRAM}_count", f"{HISTOGRAM}_sum")


class TopicLines:
    """The text of one topic's share of each per-topic template family, in one format:
    snapshot lines (UTF-8 ``bytes``) or Prometheus text (``str``)."""

    __slots__ = ("_bucket", "_count", "_plan", "_snapshot", "_sum", "_topic_places")

    def __init__(self, template: Sequence[Metric], topic_series: Sequence[str], *,
                 snapshot: bool) -> None:
        """*template*: the per-topic families in render order; *topic_series*: the family
        names of a record's topic values, in their order; *snapshot*: snapshot lines, else
        Prometheus text."""
        self._snapshot = snapshot
        self._topic_places = {name: i for i, name in enumerate(topic_series)}
        head = line_head if snapshot else _prometheus_head
        self._bucket = head(_BUCKET, "histogram")
        self._count = head(_COUNT, "histogram")
        self._sum = head(_SUM, "histogram")
        # (what the lines come from, the family's name, its bucket's index, the lines' head)
        plan: list[tuple[int, str, int, str]] = []
        for family in template:
            name, typ = family.name, family.type
            if name == HISTOGRAM:
                plan.append((_HISTOGRAM, name, 0, ""))
            elif name in PULSAR_BUCKET_SERIES:
                plan.append((_LATENCY_GAUGE, name, PULSAR_BUCKET_SERIES.index(name),
                             head(name, typ)))
            elif name in ENTRY_SIZE_SERIES:
                plan.append((_SIZE_GAUGE, name, ENTRY_SIZE_SERIES.index(name), head(name, typ)))
            elif name == ENTRY_SIZE_COUNT:
                plan.append((_SIZE_COUNT, name, 0, head(name, typ)))
            elif name == ENTRY_SIZE_SUM:
                plan.append((_SIZE_SUM, name, 0, head(name, typ)))
            elif typ in ("counter", "gauge"):
                sample_name = name + "_total" if typ == "counter" else name
                plan.append((_TABLE, name, 0, head(sample_name, typ)))
            else:
                raise ValueError(f"no lines for the per-topic family {name!r} ({typ})")
        self._plan = plan

    def render(self, record: TopicRecord, texts: list[bytes] | list[str],
               families: Iterable[int] | None = None) -> None:
        """Set ``texts[j]`` to *record*'s lines of template family *j* (empty where it has
        none), for each *j* in *families* (all of them if ``None``)."""
        key, topic_values, flat, maxima, latency, latency_windowed, sizes_windowed = record
        plan = self._plan
        topic_places = self._topic_places
        snapshot = self._snapshot
        line = _snapshot_line if snapshot else _prometheus_line
        series = _series(key, topic_values, topic_places, flat, maxima)
        labels, le_labels = self._labels(key, series)
        own = labels[key]
        for j in range(len(plan)) if families is None else families:
            kind, name, i, head = plan[j]
            lines: list[str] = []
            if kind == _TABLE:
                rows = series.get(name)
                if rows is None:   # the usual case: a topic series and nothing else
                    place = topic_places.get(name)
                    if place is not None:
                        line(lines, head, own, 0.0 + topic_values[place])
                else:
                    for label_values, value in rows.items():
                        line(lines, head, labels[label_values], value)
            elif kind == _HISTOGRAM:
                total = 0.0
                bucket = self._bucket
                for n, le in enumerate(le_labels):
                    if n < len(LE_LABELS):
                        total += latency[n]
                    else:   # +Inf: the overflow too
                        for c in latency[len(LE_LABELS):-1]:
                            total += c
                    line(lines, bucket, le, total)
                line(lines, self._count, own, total)
                line(lines, self._sum, own, float(latency[-1]))
            else:
                if kind == _LATENCY_GAUGE:
                    value = float(latency_windowed[i]) if i < len(latency_windowed) else 0.0
                elif kind == _SIZE_GAUGE:
                    value = float(sizes_windowed[i])
                elif kind == _SIZE_COUNT:
                    value = float(sum(sizes_windowed[:len(ENTRY_SIZE_SERIES)]))
                else:   # _SIZE_SUM
                    value = float(sizes_windowed[len(ENTRY_SIZE_SERIES)])
                line(lines, head, own, value)
            text = "".join(lines)
            texts[j] = text.encode("utf-8") if snapshot else text  # type: ignore[assignment]

    def _labels(self, key: tuple[str, ...], series: dict[str, dict[tuple[str, ...], float]]
                ) -> tuple[dict[tuple[str, ...], str], list[str]]:
        """The labels' text of every label set of the record, and the histogram buckets'
        labels in ``le`` order (``+Inf`` last)."""
        sets: dict[tuple[str, ...], None] = {key: None}
        for rows in series.values():
            sets.update(dict.fromkeys(rows))
        if self._snapshot:
            out = {values: labels_text(_labels_dict(values)) for values in sets}
            rest = out[key][1:]   # "le" sorts before every other label name of the topic
            return out, [f'{{"le":"{le}",{rest}' for le in (*LE_LABELS, "+Inf")]
        # One generate_latest of one sample per label set: its escaping, its label order.
        own = _labels_dict(key)
        dicts = [_labels_dict(values) for values in sets]
        dicts += [{**own, "le": le} for le in (*LE_LABELS, "+Inf")]
        texts = _prometheus_labels(dicts)
        return dict(zip(sets, texts[:len(sets)], strict=True)), texts[len(sets):]


def _labels_dict(values: tuple[str, ...]) -> dict[str, str]:
    return dict(zip(SUB_LABELS if len(values) == 4 else TOPIC_LABELS, values, strict=True))


def _snapshot_line(lines: list[str], head: str, labels: str, value: float | None) -> None:
    """Add a snapshot line of one sample to *lines*, unless the file leaves it out (no
    value, NaN)."""
    if value is None:
        return
    number = float(value)
    if number - number == 0.0:   # finite: its repr is its JSON (value_text, without a call)
        lines.append(f'{head}{labels},"value":{float.__repr__(number)}}}\n')
        return
    text = value_text(number)
    if text is not None:
        lines.append(f'{head}{labels},"value":{text}}}\n')


def _prometheus_line(lines: list[str], head: str, labels: str, value: float | None) -> None:
    """Add the Prometheus text line of one sample to *lines*."""
    lines.append(f"{head}{labels} {floatToGoString(value)}\n")  # type: ignore[no-untyped-call]


def _prometheus_head(sample_name: str, family_type: str) -> str:
    """The start of a Prometheus text line of *sample_name*: the name itself."""
    return sample_name


def _prometheus_labels(dicts: list[dict[str, str]]) -> list[str]:
    """Each labels dict as prometheus_client writes it in a sample's line (``{...}``)."""
    family = GaugeMetricFamily("x", "")
    family.samples.extend(Sample("x", labels, 0.0) for labels in dicts)
    text = generate_latest(CollectedFamilies([family])).decode("utf-8")
    lines = text.split("\n")[2:-1]
    if len(lines) != len(dicts):
        raise RuntimeError("one line per labels dict expected")
    return [line[1:line.rindex(" ")] for line in lines]


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
