"""One table format for every benchmark that compares Horae with its peers.

Theory of operation
-------------------
A benchmark collects ``figures[figure][peer] = [value per round]``. :func:`best` keeps each
peer's best round (max, or min for a lower-is-better figure), and :func:`format_table` prints
one row per figure, one column per peer, then one ratio column per peer other than Horae. Every
ratio reads the same way: **above 1 means Horae is ahead** (Horae ÷ peer for a throughput,
peer ÷ Horae for a latency, CPU or memory figure). When both relaxed peers ran, a last column
compares them (``horae-nofsync`` against ``pulsar-nosync``).

:func:`relaxed_table` is the comparison at equal durability: ``horae-nofsync``
(``journalSyncData = false``: no fsync or fdatasync) against the peers that do not sync before a
receipt either (``pulsar-lite``, which never syncs, and ``pulsar-nosync``), its own rows with
``horae-nofsync`` as the reference of every ratio.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

Figures = Mapping[str, Mapping[str, Sequence[float]]]


def best(values: Sequence[float], lower_is_better: bool) -> float:
    clean = [v for v in values if not math.isnan(v)]
    if not clean:
        return math.nan
    return min(clean) if lower_is_better else max(clean)


def advantage(horae: float, peer: float, lower_is_better: bool) -> float:
    """Horae's advantage over *peer* on one figure: > 1 means Horae is ahead."""
    if math.isnan(horae) or math.isnan(peer) or (horae == 0 and peer == 0):
        return math.nan
    if lower_is_better:
        return peer / horae if horae else math.inf
    return horae / peer if peer else math.inf


RELAXED_HORAE = "horae-nofsync"
NEVER_SYNCED = ("pulsar-lite", "pulsar-nosync")
"""The peers that do not sync before a receipt: Horae's relaxed run is compared with these."""


def format_table(figures: Figures, peers: Sequence[str], lower_is_better: Collection[str],
                 *, width: int = 40, reference: str = "horae") -> str:
    """One row per figure; a ratio column per peer against *reference* (Horae's default run,
    or its relaxed one in :func:`relaxed_table`)."""
    ratio_peers = [p for p in peers if p != reference] if reference in peers else []
    relaxed = (reference == "horae" and "horae-nofsync" in peers and "pulsar-nosync" in peers)
    ratio_width = max(20, len(reference) + 15)
    head = f"{'figure':{width}}" + "".join(f"{p:>14}" for p in peers)
    head += "".join(f"{reference + '/' + p:>{ratio_width}}" for p in ratio_peers)
    if relaxed:
        head += f"{'nofsync: horae/pulsar':>23}"
    lines = [head]
    for fig, per in figures.items():
        low = fig in lower_is_better
        b = {p: best(per.get(p, []), low) for p in peers}
        line = f"{fig:{width}}" + "".join(f"{b[p]:>14,.2f}" for p in peers)
        line += "".join(f"{advantage(b[reference], b[p], low):>{ratio_width}.2f}"
                        for p in ratio_peers)
        if relaxed:
            line += f"{advantage(b['horae-nofsync'], b['pulsar-nosync'], low):>23.2f}"
        lines.append(line)
    lines.append("ratios: above 1 means Horae is ahead (Horae/peer for rates, peer/Horae for "
                 "latency, CPU and memory)")
    return "\n".join(lines)


def relaxed_table(figures: Figures, peers: Sequence[str], lower_is_better: Collection[str],
                  *, width: int = 40) -> str:
    """The comparison at equal durability: ``horae-nofsync`` and the peers of
    :data:`NEVER_SYNCED` that ran, ratios against ``horae-nofsync``; "" when it did not run."""
    names = [p for p in (RELAXED_HORAE, *NEVER_SYNCED) if p in peers]
    if RELAXED_HORAE not in names or len(names) < 2:
        return ""
    return format_table(figures, names, lower_is_better, width=width, reference=RELAXED_HORAE)


def with_relaxed(peers: Sequence[str]) -> list[str]:
    """*peers* plus ``horae-nofsync`` and ``pulsar-lite`` (the equal-durability pair), order kept."""
    return list(dict.fromkeys([*peers, "pulsar-lite", RELAXED_HORAE]))


def without_relaxed_horae(peers: Sequence[str]) -> list[str]:
    """The peers of the default comparison (fsync before every receipt for Horae)."""
    return [p for p in peers if p != RELAXED_HORAE]
