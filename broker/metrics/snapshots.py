"""Metric snapshots on disk: the broker's side of the rollup pipeline's only contract.

Theory of operation
-------------------
Every ``metricsExportIntervalSeconds`` the broker turns the metric families its Prometheus
collectors produce into flat rows and appends them, as one new file, under::

    <data>/metrics/date=YYYY-MM-DD/metrics-<broker_id>-<epoch_ms>.jsonl.gz

one gzip-compressed JSON object per line (the schema is ``jobs/SCHEMA.md``)::

    {"ts": 1795312645000, "broker": "localhost:8080", "cluster": "standalone",
     "metric": "pulsar_in_messages_total", "type": "counter",
     "labels": {"namespace": "public/default", "topic": "persistent://public/default/t"},
     "value": 42.0}

Rules the rest of the pipeline relies on:

1. A file is complete or absent: it is written under a hidden ``.<name>.tmp`` name in the same
   directory, fsynced and renamed. Readers (``jobs/metrics_rollup.py``) skip hidden files.
2. ``metric`` is the Prometheus *sample* name (``x_total``, ``x_bucket``, ``x_sum``);
   ``type`` is the *family* type, so a reader can tell a histogram's ``_bucket`` samples
   from a gauge that happens to end in ``_bucket``. ``_created`` samples are not exported
   (the rollup detects counter resets from drops in value). NaN samples are dropped;
   infinities are written as the JSON extension tokens ``Infinity`` / ``-Infinity``.
3. ``cluster`` is a top-level field, never repeated in ``labels``.
4. The date directory is the UTC date of ``ts``; the file name carries the same ``ts``, so
   retention can decide from names alone.

Who calls what: :func:`run_exporter` runs as a task on the broker's event loop. Collecting
(reading plain ints through the collectors) happens on the loop, where those ints live, in
slices (``collect`` is a coroutine that yields to the loop every few hundred topics: at
10,000 topics one export is ~400,000 samples). The collected families are finished values;
turning them into rows, serialising, compressing, fsync and retention run in the default
executor (:meth:`MetricSnapshotWriter.write_families_and_retain`), so the loop neither waits
on the disk nor spends the CPU of the rows. The writer keeps the text of the last snapshot's
runs of samples and serialises again only the runs whose samples changed (idle topics' series
do not); the start of each line (timestamp, broker, cluster) is spliced into the kept text as
it is written. The collector hands over the series of idle topics as already rendered text
(:class:`broker.metrics.exposition.RenderedFamily`, lines made by :func:`line_head`,
:func:`labels_text` and :func:`value_text`), which the writer copies as it is. This module imports nothing else from the broker but
:mod:`broker.metrics.exposition`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import math
import operator
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, Protocol, cast

from isal import igzip
from prometheus_client.metrics_core import Metric

from broker.metrics.exposition import RenderedFamily
from storage.pacing import until_beat

log = logging.getLogger("horae.metrics.snapshots")

METRICS_DIR_NAME = "metrics"
FILE_SUFFIX = ".jsonl.gz"
_DAY_MS = 86_400_000
# gzip by ISA-L (isal.igzip: the same gzip format, several times faster than zlib), level 1 of
# its 0-3: the rows repeat so much that 90 MB of rows at 10,000 topics take ~2.3 MB in
# ~0.06 CPU s (zlib's level 1: ~2.2 MB in ~0.35 s; level 6: a third smaller at 3x the CPU).
_GZIP_LEVEL = 1
#: isal ships no annotations: its GzipFile, typed as what it is (a binary file).
_GzipFile = cast(Callable[..., BinaryIO], igzip.GzipFile)
#: Characters of text joined per gzip write (bounds the memory of one export's text).
_WRITE_CHARS = 1 << 20
#: Topics' texts of a rendered family joined per write (~0.1-1 MB of lines).
_JOIN_PARTS = 1024
#: Samples per cached run of a family (see :meth:`MetricSnapshotWriter.write_families`): a
#: changed topic re-serialises one run in each family it moved in.
_RUN_SAMPLES = 16
#: Stands for the start of a line up to its metric name (``{"ts":...,"broker":...,"cluster":...,
#: "metric":``) in cached text, so that text depends on neither the timestamp nor the broker.
#: JSON text never holds a raw NUL (``json.dumps`` escapes it, numbers and the fixed pieces have
#: none), so replacing it is exact.
LINE_MARK = "\x00"
_LINE_MARK_BYTES = LINE_MARK.encode("utf-8")
#: Label sets' JSON kept however few the last write serialised.
_LABELS_KEPT_MIN = 4096
_DATE_DIR_RE = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
_FILE_RE = re.compile(r"^metrics-(?P<broker>.+)-(?P<ts>\d+)\.jsonl(?:\.gz)?$")
# Hadoop's Path (which Spark uses to read the files) rejects ':' in a file name, and '/'
# would make a directory: the broker id goes into the name sanitised, and verbatim in rows.
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]")

# prometheus_client family types -> the five types of the schema. Families whose samples are
# not monotonic counters (info, stateset, enum, gauge histograms) are gauges.
_FAMILY_TYPES: Mapping[str, str] = {
    "counter": "counter",
    "gauge": "gauge",
    "histogram": "histogram",
    "summary": "summary",
    "untyped": "untyped",
    "unknown": "untyped",
    "gaugehistogram": "gauge",
    "info": "gauge",
    "stateset": "gauge",
    "enum": "gauge",
}


class _SupportsCollect(Protocol):
    def collect(self) -> Iterable[Metric]: ...


def _utc_date(ts_ms: int) -> str:
    return dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d")


def _date_start_ms(date: str) -> int:
    day = dt.datetime.strptime(date, "%Y-%m-%d").replace(tzinfo=dt.UTC)
    return int(day.timestamp() * 1000)


class _FamilyText(NamedTuple):
    """What a family's lines were made of last time (sample names, labels and values, as
    plain tuples: a Sample is a tuple subclass, which the garbage collector never stops
    tracking, so keeping the Samples would make every full collection walk them), and the
    text of each run of them."""

    names: tuple[str, ...]
    labels: tuple[Any, ...]
    values: tuple[Any, ...]
    runs: list[str]


_NAME, _LABELS, _VALUE = (operator.itemgetter(i) for i in range(3))


class MetricSnapshotWriter:
    """Turns metric families into schema rows and writes them as one complete file per call.

    ``root`` is the broker's data directory; files go under ``root/metrics``
    (:attr:`metrics_dir`). ``retention_hours <= 0`` keeps files forever.
    :meth:`write` and :meth:`apply_retention` block: call them off the event loop.
    """

    def __init__(self, root: Path, broker_id: str, cluster: str, retention_hours: float) -> None:
        self.root = Path(root)
        self.metrics_dir = self.root / METRICS_DIR_NAME
        self.broker_id = broker_id
        self.cluster = cluster
        self.retention_hours = retention_hours
        self._file_broker = _UNSAFE_NAME_CHARS.sub("_", broker_id) or "broker"
        # Label values -> the labels' JSON, kept from one write to the next (a label set's JSON
        # is computed once while it lives, not once per export).
        self._labels_json: dict[tuple[tuple[str, str], ...], str] = {}
        # (family name, row type) -> its samples and their text, from the last write.
        self._runs: dict[tuple[str, str], _FamilyText] = {}

    # -- rows -----------------------------------------------------------------------------

    def collect_rows(
        self, registry_or_families: _SupportsCollect | Iterable[Metric], ts_ms: int
    ) -> list[dict[str, Any]]:
        """Flatten families (a registry, a Collector, or ``collect()``'s result) into rows."""
        if hasattr(registry_or_families, "collect"):
            families: Iterable[Metric] = registry_or_families.collect()
        else:
            families = registry_or_families
        ts = int(ts_ms)
        rows: list[dict[str, Any]] = []
        for family in families:
            row_type = _FAMILY_TYPES.get(family.type, "untyped")
            created = family.name + "_created"
            for sample in family.samples:
                if sample.name == created or sample.value is None:
                    continue
                value = float(sample.value)
                if math.isnan(value):
                    continue
                labels = {
                    str(k): str(v) for k, v in sorted(sample.labels.items()) if k != "cluster"
                }
                rows.append(
                    {
                        "ts": ts,
                        "broker": self.broker_id,
                        "cluster": self.cluster,
                        "metric": sample.name,
                        "type": row_type,
                        "labels": labels,
                        "value": value,
                    }
                )
        return rows

    # -- files ----------------------------------------------------------------------------

    def path_for(self, ts_ms: int) -> Path:
        """Where the snapshot taken at ``ts_ms`` lives."""
        name = f"metrics-{self._file_broker}-{int(ts_ms)}{FILE_SUFFIX}"
        return self.metrics_dir / f"date={_utc_date(int(ts_ms))}" / name

    def write(self, rows: Iterable[Mapping[str, Any]], ts_ms: int) -> Path:
        """Write ``rows`` as one complete file (tmp name, fsync, rename); return its path.

        One file per broker per millisecond: a second write with the same ``ts_ms`` replaces
        the first. An empty ``rows`` still writes a (valid, empty) file: it records that the
        broker was up.
        """
        return self._write_lines(
            (json.dumps(row, separators=(",", ":")) + "\n" for row in rows), ts_ms)

    def write_families(self, families: Iterable[Metric], ts_ms: int) -> Path:
        """:meth:`write` of ``collect_rows(families, ts_ms)``, byte for byte, without building
        the row dicts, and serialising only what changed since the previous call.

        Each family's samples are taken in runs of :data:`_RUN_SAMPLES`; a run equal to the
        same run of the previous call (same sample names, labels and values: C-level tuple
        comparisons) reuses that call's text, where every line's ``ts`` is a marker replaced
        as the text is written (one ``str.replace`` per write buffer). Only runs that changed
        are serialised, from per-name and per-label-set JSON pieces. So the Python work of a
        snapshot follows the number of series that moved; the remaining per-sample cost is
        the comparison, the replace and gzip, all in C. Blocks: call it off the loop."""
        return self._write_lines(self._texts(families), ts_ms)

    def _texts(self, families: Iterable[Metric]) -> Iterator[str | bytes]:
        """Text of *families*' lines with :data:`LINE_MARK` for their start; keeps each
        family's runs (samples and text) for the next call, and only this call's. A
        :class:`RenderedFamily` is already that text (``str``, or UTF-8 ``bytes``)."""
        previous, kept = self._runs, {}
        # id(labels dict) -> its JSON; the dicts stay alive (held by families) meanwhile.
        labels_json: dict[int, str] = {}
        known_labels = self._labels_json
        kept_labels: dict[tuple[tuple[str, str], ...], str] = {}
        for family in families:
            if isinstance(family, RenderedFamily):
                # joined in C, _JOIN_PARTS topics at a time: no Python step per topic, and
                # no buffer of a whole family (bounds the memory of one export's text)
                parts = family.parts
                join = b"".join if parts and isinstance(parts[0], bytes) else "".join
                for start in range(0, len(parts), _JOIN_PARTS):
                    yield join(parts[start:start + _JOIN_PARTS])  # type: ignore[arg-type]
                continue
            row_type = _FAMILY_TYPES.get(family.type, "untyped")
            key = (family.name, row_type)
            # A family name met twice in one snapshot is serialised, not cached, the 2nd time.
            old = previous.get(key) if key not in kept else None
            samples = family.samples
            names = tuple(map(_NAME, samples))
            labels = tuple(map(_LABELS, samples))
            values = tuple(map(_VALUE, samples))
            if (old is not None and old.values == values and old.labels == labels
                    and old.names == names):   # the usual case when idle
                kept[key] = old
                yield from old.runs
                continue
            runs: list[str] = []
            if old is None:
                old = _FamilyText((), (), (), [])
            old_runs = old.runs
            prefixes: dict[str, str] = {}
            for i, start in enumerate(range(0, len(samples), _RUN_SAMPLES)):
                end = start + _RUN_SAMPLES
                part = samples[start:end]
                if (i < len(old_runs) and old.values[start:end] == values[start:end]
                        and old.labels[start:end] == labels[start:end]
                        and old.names[start:end] == names[start:end]):
                    text = old_runs[i]
                else:
                    text = "".join(self._lines_of(
                        part, family.name + "_created", row_type, prefixes, labels_json,
                        known_labels, kept_labels))
                runs.append(text)
                yield text
            if key not in kept:
                kept[key] = _FamilyText(names, labels, values, runs)
        self._runs = kept
        # Label sets of unchanged runs are not met again: keep what the previous call knew.
        known_labels.update(kept_labels)
        if len(known_labels) > 2 * max(len(kept_labels), _LABELS_KEPT_MIN):
            known_labels = kept_labels
        self._labels_json = known_labels

    @staticmethod
    def _lines_of(samples: Iterable[Any], created: str, row_type: str,
                  prefixes: dict[str, str], labels_json: dict[int, str],
                  known: dict[tuple[tuple[str, str], ...], str],
                  kept: dict[tuple[tuple[str, str], ...], str]) -> Iterator[str]:
        for sample in samples:
            name = sample.name
            if name == created:
                continue
            value = value_text(sample.value)
            if value is None:
                continue
            prefix = prefixes.get(name)
            if prefix is None:
                prefix = prefixes[name] = line_head(name, row_type)
            labels = sample.labels
            text = labels_json.get(id(labels))
            if text is None:
                items = tuple(labels.items())
                text = known.get(items)
                if text is None:
                    text = labels_text(labels)
                labels_json[id(labels)] = kept[items] = text
            yield f'{prefix}{text},"value":{value}}}\n'

    def _write_lines(self, texts: Iterable[str | bytes], ts_ms: int) -> Path:
        """Write *texts* (whole lines, each starting with :data:`LINE_MARK`; ``str``, or UTF-8
        ``bytes`` written as they are) as the snapshot of *ts_ms*: tmp name, fsync, rename."""
        final = self.path_for(ts_ms)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.tmp")
        head = (f'{{"ts":{int(ts_ms)},"broker":{json.dumps(self.broker_id)},'
                f'"cluster":{json.dumps(self.cluster)},"metric":')
        try:
            with open(tmp, "wb") as raw:
                # mtime=0: the file's bytes depend on the rows only.
                with _GzipFile(
                    fileobj=raw, mode="wb", compresslevel=_GZIP_LEVEL, mtime=0
                ) as gz:
                    chunk: list[str] = []
                    size = 0
                    head_bytes = head.encode("utf-8")
                    for text in texts:
                        if isinstance(text, bytes):
                            if chunk:
                                gz.write("".join(chunk).replace(LINE_MARK, head).encode("utf-8"))
                                chunk.clear()
                                size = 0
                            # UTF-8 has no NUL byte but U+0000's: the same lines as below
                            gz.write(text.replace(_LINE_MARK_BYTES, head_bytes))
                            continue
                        chunk.append(text)
                        size += len(text)
                        if size >= _WRITE_CHARS:
                            gz.write("".join(chunk).replace(LINE_MARK, head).encode("utf-8"))
                            chunk.clear()
                            size = 0
                    gz.write("".join(chunk).replace(LINE_MARK, head).encode("utf-8"))
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        _fsync_dir(final.parent)
        return final

    def apply_retention(self, now_ms: int) -> list[Path]:
        """Delete snapshot files (and then-empty date directories) older than retention.

        A file's age comes from the ``epoch_ms`` in its name (its mtime if the name does not
        parse); stale ``.tmp`` files left by a crash go by mtime. Files that are not
        snapshots are never touched, so a date directory holding one is kept.
        """
        if self.retention_hours <= 0 or not self.metrics_dir.is_dir():
            return []
        cutoff_ms = int(now_ms - self.retention_hours * 3_600_000)
        deleted: list[Path] = []
        for date_dir in sorted(self.metrics_dir.iterdir()):
            match = _DATE_DIR_RE.match(date_dir.name)
            if match is None or not date_dir.is_dir():
                continue
            try:
                day_start_ms = _date_start_ms(match.group(1))
            except ValueError:
                continue
            if day_start_ms >= cutoff_ms:
                continue  # the whole day is within retention
            for path in sorted(date_dir.iterdir()):
                ts = _snapshot_ts(path)
                if ts is not None and ts < cutoff_ms:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                        deleted.append(path)
            if day_start_ms + _DAY_MS <= cutoff_ms:
                with contextlib.suppress(OSError):  # not empty: someone else's file is there
                    date_dir.rmdir()
                    deleted.append(date_dir)
        return deleted

    def write_families_and_retain(self, families: Iterable[Metric], ts_ms: int) -> Path:
        """One executor job per export: write the snapshot, then trim old ones."""
        path = self.write_families(families, ts_ms)
        removed = self.apply_retention(ts_ms)
        if removed:
            log.info("metrics retention removed %d old snapshot paths", len(removed))
        return path


def line_head(sample_name: str, family_type: str) -> str:
    """The start of a snapshot line of *sample_name* in a family of *family_type* (a
    prometheus_client type), up to its labels: :data:`LINE_MARK`, the name and the type."""
    return (f'{LINE_MARK}{json.dumps(sample_name)},"type":"'
            f'{_FAMILY_TYPES.get(family_type, "untyped")}","labels":')


def labels_text(labels: Mapping[str, str]) -> str:
    """A sample's labels as a snapshot line holds them: JSON, keys sorted, without
    ``cluster`` (a field of its own)."""
    return json.dumps({str(k): str(v) for k, v in sorted(labels.items()) if k != "cluster"},
                      separators=(",", ":"))


def value_text(value: float | None) -> str | None:
    """A sample's value as a snapshot line holds it, or ``None`` for a sample the file
    leaves out (no value, or NaN)."""
    if value is None:
        return None
    number = float(value)
    if math.isnan(number):
        return None
    return _json_float(number)


def _snapshot_ts(path: Path) -> int | None:
    """The age key of a file under a date directory, or None if it is not ours."""
    name = path.name
    if name.startswith(".") and name.endswith(".tmp"):
        try:
            return int(path.stat().st_mtime * 1000)
        except FileNotFoundError:
            return None
    match = _FILE_RE.match(name)
    if match is None or not path.is_file():
        return None
    return int(match.group("ts"))


def _json_float(value: float) -> str:
    """``json.dumps(value)`` for a non-NaN float (``Infinity`` for infinities)."""
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _fsync_dir(directory: Path) -> None:
    # Makes the rename durable; some filesystems refuse fsync on a directory, and losing the
    # last metrics snapshot in a power cut is acceptable, so errors are ignored.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


async def run_exporter(
    writer: MetricSnapshotWriter,
    collect: Callable[[], Awaitable[Iterable[Metric]]],
    interval_s: float,
    stop_event: asyncio.Event,
) -> None:
    """Export a snapshot now, every ``interval_s`` seconds, and once more when stopped.

    The first snapshot is taken at once so counters born between start-up and the first
    tick are seen from zero, and the last one when ``stop_event`` is set so a clean shutdown
    loses nothing. Ticks keep a fixed cadence (missed ones are skipped, not bunched). A
    failing collect or write is logged and the exporter carries on: metrics must never take
    the broker down.
    """
    if interval_s <= 0:
        raise ValueError(f"interval_s must be positive, got {interval_s}")
    loop = asyncio.get_running_loop()
    while True:
        await _export_once(writer, collect, loop)
        # the next beat of the interval, which the broker's other periodic work shares
        # (storage.pacing): a late export skips to the following one
        try:
            await asyncio.wait_for(stop_event.wait(),
                                   timeout=until_beat(loop.time(), interval_s))
        except TimeoutError:
            continue
        await _export_once(writer, collect, loop)
        return


async def _export_once(
    writer: MetricSnapshotWriter,
    collect: Callable[[], Awaitable[Iterable[Metric]]],
    loop: asyncio.AbstractEventLoop,
) -> None:
    ts_ms = time.time_ns() // 1_000_000
    try:
        # On the loop, in slices: the collectors read counters the loop mutates.
        families = list(await collect())
    except Exception:
        log.exception("collecting metrics for the snapshot failed")
        return
    try:
        await loop.run_in_executor(None, writer.write_families_and_retain, families, ts_ms)
    except Exception:
        log.exception("writing the metrics snapshot failed")
