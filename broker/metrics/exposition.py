"""Shared pieces of the Prometheus exposition: label sets, sample tables, histogram buckets.

Theory of operation
-------------------
A scrape accumulates plain floats into :data:`SampleTable` s (family name -> label values ->
value) and histogram accumulators, then turns them into prometheus_client metric families.
This module holds what every family builder shares: Pulsar's label names, the conversion of
non-cumulative bucket counts (overflow last) into Prometheus' cumulative ``le`` pairs, and
:func:`topic_namespace`, and :class:`LabelSets`, which hands every family of one scrape the
same labels dict for the same label values (a scrape of 10,000 topics builds ~40 samples per
topic: one dict each would dominate its cost). Sample label dicts are therefore shared and
must never be mutated by a reader (prometheus_client's exposition and the snapshot writer only
read them). Pure functions, no IO; used by :mod:`broker.metrics.collector`,
:mod:`broker.metrics.delayed_index` and :mod:`broker.metrics.lag`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import Metric

__all__ = ["NS_LABELS", "SUB_LABELS", "TOPIC_LABELS", "CollectedFamilies", "LabelSets",
           "RenderedFamily", "SampleTable", "cumulative", "topic_namespace"]

TOPIC_LABELS = ("cluster", "namespace", "topic")
NS_LABELS = ("cluster", "namespace")
SUB_LABELS = ("cluster", "namespace", "topic", "subscription")

#: family name -> label values -> value (a defaultdict of defaultdicts during a scrape).
SampleTable = dict[str, dict[tuple[str, ...], float]]


class LabelSets:
    """One scrape's labels dicts: ``labels_of(names, values)`` returns the same dict for the
    same names and values (read-only by contract, see the module docstring)."""

    __slots__ = ("_dicts",)

    def __init__(self) -> None:
        self._dicts: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[str, str]] = {}

    def __call__(self, names: tuple[str, ...], values: tuple[str, ...]) -> dict[str, str]:
        labels = self._dicts.get((names, values))
        if labels is None:
            labels = self._dicts[(names, values)] = dict(zip(names, values, strict=True))
        return labels


class RenderedFamily(Metric):
    """A family whose samples are already text in one consumer's format: the Prometheus text
    lines of ``/metrics``, or the snapshot writer's lines (written by
    :class:`broker.metrics.topic_lines.TopicLines`). Name, help and type as usual and no
    ``samples``: ``generate_latest`` renders its header only, the consumer appends the text,
    :attr:`parts` in order (``str`` for ``/metrics``; for the snapshot writer UTF-8 ``bytes``,
    which it compresses as they are)."""

    def __init__(self, name: str, documentation: str, typ: str,
                 parts: list[str] | list[bytes]) -> None:
        super().__init__(name, documentation, typ)
        self.parts = parts


class CollectedFamilies:
    """Already collected families, in the shape ``generate_latest`` reads (``collect()``)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def cumulative(counts: Sequence[int | float], bounds: Sequence[float]) -> list[tuple[str, float]]:
    """Non-cumulative counts (len(bounds)+1, overflow last) -> Prometheus (le, cumulative)."""
    out: list[tuple[str, float]] = []
    total = 0.0
    for i, bound in enumerate(bounds):
        total += float(counts[i]) if i < len(counts) else 0.0
        out.append((_le(bound), total))
    total += sum(float(c) for c in counts[len(bounds):])
    out.append(("+Inf", total))
    return out


def _le(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def topic_namespace(full: str) -> str:
    """``persistent://tenant/ns/topic`` -> ``tenant/ns``; a V1 name
    ``persistent://tenant/cluster/ns/topic`` (the V1 heartbeat topic) -> ``tenant/cluster/ns``."""
    parts = full.split("://", 1)[-1].split("/")
    return "/".join(parts[:-1])
