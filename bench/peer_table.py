"""One table format for every benchmark that compares Horae with its peers.

Theory of operation
-------------------
A benchmark collects ``figures[figure][peer] = [value per round]``. :func:`best` keeps each
peer's best round (max, or min for a lower-is-better figure), and :func:`format_table` prints
one row per figure, one column per peer, then one ratio column per peer other than Horae. Every
ratio reads the same way: **above 1 means Horae is ahead** (Horae ÷ peer for a throughput,
peer ÷ Horae for a latency, CPU or memory figure). When both relaxed peers ran, a last column
compares them (``horae-nofsync`` against ``pulsar-nosync``).
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


def format_table(figures: Figures, peers: Sequence[str], lower_is_better: Collection[str],
                 *, width: int = 40) -> str:
    ratio_peers = [p for p in peers if p != "horae"] if "horae" in peers else []
    relaxed = "horae-nofsync" in peers and "pulsar-nosync" in peers
    head = f"{'figure':{width}}" + "".join(f"{p:>14}" for p in peers)
    head += "".join(f"{'horae/' + p:>20}" for p in ratio_peers)
    if relaxed:
        head += f"{'nofsync: horae/pulsar':>23}"
    lines = [head]
    for fig, per in figures.items():
        low = fig in lower_is_better
        b = {p: best(per.get(p, []), low) for p in peers}
        line = f"{fig:{width}}" + "".join(f"{b[p]:>14,.2f}" for p in peers)
        line += "".join(f"{advantage(b['horae'], b[p], low):>20.2f}" for p in ratio_peers)
        if relaxed:
            line += f"{advantage(b['horae-nofsync'], b['pulsar-nosync'], low):>23.2f}"
        lines.append(line)
    lines.append("ratios: above 1 means Horae is ahead (Horae/peer for rates, peer/Horae for "
                 "latency, CPU and memory)")
    return "\n".join(lines)
