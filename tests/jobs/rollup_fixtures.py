"""Snapshot fixtures for the rollup job tests, and the expected rollup in plain Python.

The fixture is two brokers of cluster ``c1`` exporting every 20 s from 23:54:00 to
00:05:40 UTC (36 ticks, ``k = 0..35``), so windows cross midnight and two date partitions:

* broker ``broker-a:8080`` (a ':' the file name must sanitise) is silent for ``k = 9..16``
  (a gap); topic ``born`` appears at ``k = 20``; its snapshot of ``k = 5`` is written last
  (a late file); its ``k = 30`` file carries bad lines and a NaN sample.
* broker ``broker-b`` restarts at ``k = 24``: its counters and histogram buckets drop.
* topic ``shared`` moves from broker a (``k <= 8``) to broker b (``k >= 17``).
* corrupt files (truncated gzip, not gzip at all) and a hidden ``.tmp`` file hold samples of
  a ``ghost`` topic that must never appear.

:func:`expected_rollup` recomputes every output row from the valid samples with the rules
of ``jobs/SCHEMA.md`` in plain Python, independently of Spark.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

T0_MS = int(dt.datetime(2026, 11, 20, 23, 54, tzinfo=dt.UTC).timestamp() * 1000)
STEP_MS = 20_000
TICKS = 36
BROKER_A = "broker-a:8080"
BROKER_B = "broker-b"
CLUSTER = "c1"
NS = "public/default"
T1 = "persistent://public/default/t1"
T2 = "persistent://public/default/t2"
BORN = "persistent://public/default/born"
SHARED = "persistent://public/default/shared"
GHOST = "persistent://public/default/ghost"
A_GAP = range(9, 17)
B_RESTART = 24
LATE_TICK = 5
BAD_LINES_TICK = 30
BAD_LINES = ('{"ts": 1, "broker": "x"', '{"ts": 1, "broker": "x", "cluster": "c1"}', '["array"]')
INF = math.inf


def ts(k: int) -> int:
    return T0_MS + k * STEP_MS


def _row(
    k: int, broker: str, metric: str, mtype: str, labels: dict[str, str], value: float
) -> dict[str, Any]:
    return {
        "ts": ts(k),
        "broker": broker,
        "cluster": CLUSTER,
        "metric": metric,
        "type": mtype,
        "labels": labels,
        "value": float(value),
    }


def _topic(topic: str) -> dict[str, str]:
    return {"namespace": NS, "topic": topic}


def _histogram(
    k: int, broker: str, topic: str, name: str, cumulative: list[tuple[str, float]], total: float
) -> list[dict[str, Any]]:
    rows = [
        _row(k, broker, f"{name}_bucket", "histogram", {**_topic(topic), "le": le}, n)
        for le, n in cumulative
    ]
    rows.append(_row(k, broker, f"{name}_count", "histogram", _topic(topic), cumulative[-1][1]))
    rows.append(_row(k, broker, f"{name}_sum", "histogram", _topic(topic), total))
    return rows


def broker_a_rows(k: int) -> list[dict[str, Any]]:
    rows = [
        _row(k, BROKER_A, "pulsar_in_messages_total", "counter", _topic(T1), 5 * k + k // 3),
        _row(k, BROKER_A, "pulsar_out_messages_total", "counter", _topic(T1), 4 * k),
        _row(k, BROKER_A, "pulsar_msg_backlog", "gauge", _topic(T1), (7 * k) % 11),
        _row(
            k,
            BROKER_A,
            "pulsar_subscription_delayed",
            "gauge",
            {**_topic(T1), "subscription": "s1"},
            k % 5,
        ),
        _row(k, BROKER_A, "pulsar_delayed_message_index_size_bytes", "gauge", _topic(T1), 100 * k),
        _row(
            k,
            BROKER_A,
            "pulsar_broker_topic_messages_delayed_rejected_total",
            "counter",
            _topic(T1),
            k // 4,
        ),
        _row(
            k,
            BROKER_A,
            "pulsar_broker_topic_messages_fixed_delay_overridden_total",
            "counter",
            _topic(T1),
            k // 6,
        ),
        _row(k, BROKER_A, "pulsar_topics_count", "gauge", {"namespace": NS}, 2),
        _row(k, BROKER_A, "horae_custom_widgets", "untyped", {"shape": "round"}, k),
        _row(k, BROKER_A, "horae_strange", "weird", {}, 1),
    ]
    rows += _histogram(
        k,
        BROKER_A,
        T1,
        "pulsar_storage_write_latency",
        [("1.0", k), ("5.0", 3 * k), ("10.0", 4 * k), ("+Inf", 4 * k + k // 2)],
        10.0 * k,
    )
    if k >= 20:
        rows.append(
            _row(k, BROKER_A, "pulsar_in_messages_total", "counter", _topic(BORN), 7 * (k - 19))
        )
    if k <= 8:
        rows.append(
            _row(k, BROKER_A, "pulsar_in_messages_total", "counter", _topic(SHARED), 10 * k)
        )
    return rows


def broker_b_rows(k: int) -> list[dict[str, Any]]:
    restarted = k >= B_RESTART
    in_total = 2 * (k - 23) if restarted else 100 + 6 * k
    n = k - 23 if restarted else k
    rows = [
        _row(k, BROKER_B, "pulsar_in_messages_total", "counter", _topic(T2), in_total),
        _row(
            k,
            BROKER_B,
            "pulsar_subscription_back_log",
            "gauge",
            {**_topic(T2), "subscription": "s2"},
            50 - k,
        ),
        _row(k, BROKER_B, "pulsar_topics_count", "gauge", {"namespace": NS}, 3),
    ]
    rows += _histogram(
        k,
        BROKER_B,
        T2,
        "pulsar_storage_write_latency",
        [("0.5", n), ("2.0", 2 * n), ("+Inf", 2 * n + 1)],
        1.5 * n,
    )
    if k >= 17:
        rows.append(
            _row(k, BROKER_B, "pulsar_in_messages_total", "counter", _topic(SHARED), 10 * (k - 16))
        )
    return rows


def _file_name(broker: str, ts_ms: int) -> str:
    return f"metrics-{broker.replace(':', '_')}-{ts_ms}.jsonl.gz"


def _date_dir(root: Path, ts_ms: int) -> Path:
    day = dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d")
    path = root / f"date={day}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as out:
        for line in lines:
            out.write(line + "\n")


def write_fixture(root: Path) -> list[dict[str, Any]]:
    """Write the snapshot tree under ``root``; return the valid samples it holds."""
    valid: list[dict[str, Any]] = []
    late: tuple[Path, list[str]] | None = None
    for k in range(TICKS):
        for broker, make in ((BROKER_A, broker_a_rows), (BROKER_B, broker_b_rows)):
            if broker == BROKER_A and k in A_GAP:
                continue
            rows = make(k)
            valid += rows
            lines = [json.dumps(r) for r in rows]
            if broker == BROKER_A and k == BAD_LINES_TICK:
                nan = _row(k, BROKER_A, "horae_custom_nan", "gauge", {}, 0.0)
                lines += [*BAD_LINES, json.dumps(nan).replace("0.0", "NaN")]
            path = _date_dir(root, ts(k)) / _file_name(broker, ts(k))
            if broker == BROKER_A and k == LATE_TICK:
                late = (path, lines)
                continue
            _write_lines(path, lines)
    assert late is not None
    _write_lines(*late)  # written after every later snapshot, with a later mtime
    os.utime(late[0], (os.path.getmtime(late[0]) + 3600,) * 2)

    day = _date_dir(root, ts(0))
    ghost = [
        json.dumps(_row(k, BROKER_B, "pulsar_in_messages_total", "counter", _topic(GHOST), 1e6))
        for k in range(200)
    ]
    _write_lines(day / ".metrics-broker-b-1.jsonl.gz.tmp", ghost)  # in-progress write: ignored
    truncated = day / _file_name(BROKER_B, ts(7) + 1)
    _write_lines(truncated, ghost)
    truncated.write_bytes(truncated.read_bytes()[:-40])
    (day / "metrics-garbage-1.jsonl.gz").write_bytes(b"\x1f\x8b\x08 this is not a gzip stream")
    (day / "README.txt").write_text("not a snapshot\n")
    return valid


# -- the expected rollup, in plain Python --------------------------------------------------


def kind_of(row: dict[str, Any]) -> str:
    metric, mtype = row["metric"], row["type"]
    if metric.endswith("_created"):
        return "gauge"
    if mtype == "counter":
        return "counter"
    if mtype == "histogram" and metric.endswith("_bucket") and "le" in row["labels"]:
        return "bucket"
    if mtype in ("histogram", "summary") and metric.endswith(("_sum", "_count")):
        return "counter"
    return "gauge"


def labels_string(labels: dict[str, str], *, drop_le: bool = False) -> str:
    skip = {"cluster", "namespace", "topic", "subscription"} | ({"le"} if drop_le else set())
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in skip)


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile over (upper bound, cumulative count), sorted."""
    if len(buckets) < 2 or buckets[-1][0] != INF:
        return None
    mono: list[tuple[float, float]] = []
    highest = -INF
    for le, n in buckets:
        highest = max(highest, n)
        mono.append((le, highest))
    total = mono[-1][1]
    if total <= 0:
        return None
    rank = q * total
    b = next(i for i, (_, n) in enumerate(mono) if n >= rank)
    if b == len(mono) - 1:
        return mono[-2][0]
    if b == 0 and mono[0][0] <= 0:
        return mono[0][0]
    start, below = (0.0, 0.0) if b == 0 else mono[b - 1]
    return start + (mono[b][0] - start) * (rank - below) / (mono[b][1] - below)


Key = tuple[
    str, int, str, str, str, str, str, str, str
]  # window, start, cluster, ns, topic, sub, metric, labels, kind


def expected_rollup(
    samples: list[dict[str, Any]], windows: dict[str, int]
) -> dict[Key, dict[str, Any]]:
    """Every expected output row, keyed like the job's output (window name, start ms, ...)."""
    first_ts = {}
    for s in samples:
        first_ts[s["broker"]] = min(first_ts.get(s["broker"], s["ts"]), s["ts"])
    series: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        key = (s["broker"], s["cluster"], s["metric"], json.dumps(s["labels"], sort_keys=True))
        series[key].append(s)

    contributions = []  # (sample, increase, reset, ms since the series' previous sample or None)
    for rows in series.values():
        rows.sort(key=lambda r: (r["ts"], r["value"]))
        for i, row in enumerate(rows):
            if kind_of(row) == "gauge":
                contributions.append((row, None, 0, None))
            elif i == 0:
                contributions.append(
                    (row, row["value"] if row["ts"] > first_ts[row["broker"]] else 0.0, 0, None)
                )
            else:
                took = row["ts"] - rows[i - 1]["ts"]
                if row["value"] >= rows[i - 1]["value"]:
                    contributions.append((row, row["value"] - rows[i - 1]["value"], 0, took))
                else:
                    contributions.append((row, row["value"], 1, took))

    out: dict[Key, dict[str, Any]] = {}
    for name, ms in windows.items():
        counters: dict[Key, dict[str, Any]] = defaultdict(
            lambda: {
                "increase": 0.0,
                "samples": 0,
                "resets": 0,
                "brokers": set(),
                "span": [None, None],  # [earliest interval start, latest sample] in ms
            }
        )
        gauges: dict[tuple[Key, str], list[tuple[int, float]]] = defaultdict(list)
        for row, inc, reset, took in contributions:
            labels = row["labels"]
            start = row["ts"] - row["ts"] % ms
            key: Key = (
                name,
                start,
                row["cluster"],
                labels.get("namespace", ""),
                labels.get("topic", ""),
                labels.get("subscription", ""),
                row["metric"],
                labels_string(labels),
                kind_of(row),
            )
            if inc is None:
                gauges[(key, row["broker"])].append((row["ts"], row["value"]))
            else:
                acc = counters[key]
                acc["increase"] += inc
                acc["timed"] = acc.get("timed", 0.0) + (inc if took is not None else 0.0)
                acc["samples"] += 1
                acc["resets"] += reset
                acc["brokers"].add(row["broker"])
                since = row["ts"] - (took or 0)
                span = acc["span"]
                span[0] = since if span[0] is None else min(span[0], since)
                span[1] = row["ts"] if span[1] is None else max(span[1], row["ts"])
                acc["le"] = float(labels["le"]) if kind_of(row) == "bucket" else None
                acc["hist_labels"] = labels_string(labels, drop_le=True)
        for key, acc in counters.items():
            covered = acc["span"][1] - acc["span"][0]
            acc["covered"] = covered
            out[key] = {
                "increase": acc["increase"],
                "rate_per_s": acc.get("timed", 0.0) / (covered / 1000) if covered else None,
                "covered_s": covered / 1000 if covered else None,
                "samples": acc["samples"],
                "resets": acc["resets"],
                "brokers": len(acc["brokers"]),
            }
        per_group: dict[Key, list[list[tuple[int, float]]]] = defaultdict(list)
        for (key, _broker), values in gauges.items():
            per_group[key].append(sorted(values))
        for key, per_broker in per_group.items():
            out[key] = {
                "min": sum(min(v for _, v in s) for s in per_broker),
                "max": sum(max(v for _, v in s) for s in per_broker),
                "avg": sum(sum(v for _, v in s) / len(s) for s in per_broker),
                "last": sum(s[-1][1] for s in per_broker),
                "samples": sum(len(s) for s in per_broker),
                "brokers": len(per_broker),
            }
        hist: dict[Key, list[tuple[float, float]]] = defaultdict(list)
        hist_covered: dict[Key, int] = {}
        for key, acc in counters.items():
            if key[-1] == "bucket":
                base = key[6].removesuffix("_bucket")
                hkey: Key = (*key[:6], base, acc["hist_labels"], "histogram")  # type: ignore[assignment]
                hist[hkey].append((acc["le"], acc["increase"]))
                hist_covered[hkey] = max(hist_covered.get(hkey, 0), acc["covered"])
        for hkey, buckets in hist.items():
            buckets.sort()
            total = buckets[-1][1] if buckets[-1][0] == INF else None
            covered = hist_covered[hkey]
            out[hkey] = {
                "increase": total,
                "rate_per_s": None if total is None or not covered else total / (covered / 1000),
                **{
                    p: histogram_quantile(q, buckets)
                    for p, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
                },
            }
    return out
