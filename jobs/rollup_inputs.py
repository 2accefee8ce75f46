"""Stage 1 of the metrics rollup: which snapshot files to read, and which to set aside.

Theory of operation
-------------------
Local input (a directory, or a ``file:`` URI) is listed recursively; every candidate ``.gz``
is test-decompressed in the driver (threads; zlib releases the GIL) before Spark starts, so a
corrupt or empty file is named in a warning and skipped (:func:`discover_local`). Remote input
(``hdfs://``, ``s3a://``) is listed through Hadoop with no driver-side validation; Spark's
``ignoreCorruptFiles`` skips corrupt files there (:func:`discover_remote`). Snapshot names
follow ``jobs/SCHEMA.md``: hidden and underscore files (in-progress ``.x.tmp`` writes, Hadoop
markers) are never input. Used by :mod:`jobs.metrics_rollup` only; imports nothing of the
broker, and pyspark only for typing.
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["InputListing", "discover_local", "discover_remote", "is_remote", "local_path"]

_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True, slots=True)
class InputListing:
    files: list[str]
    skipped: list[tuple[str, str]]  # (path, reason)
    remote: bool


def is_remote(path: str) -> bool:
    return bool(_SCHEME_RE.match(path)) and not path.startswith("file:")


def local_path(path: str) -> Path:
    return Path(re.sub(r"^file:(//)?", "", path)) if path.startswith("file:") else Path(path)


def _is_snapshot_name(name: str) -> bool:
    # Hidden and underscore files are in-progress writes (.x.tmp) or Hadoop markers.
    return not name.startswith((".", "_")) and name.endswith((".jsonl.gz", ".jsonl"))


def _check_gzip(path: Path) -> str | None:
    """Why ``path`` cannot be read, or None. Decompresses it fully: CRC and length checked."""
    try:
        if path.stat().st_size == 0:
            return "empty file (not a gzip stream)"
        if path.suffix != ".gz":
            return None
        with gzip.open(path, "rb") as stream:
            while stream.read(1 << 20):
                pass
    except (OSError, EOFError, zlib.error) as exc:
        return f"corrupt gzip: {exc}"
    return None


def discover_local(root: Path, *, validate: bool = True) -> InputListing:
    """List snapshot files under ``root`` (recursively) and set corrupt ones aside."""
    candidates = sorted(p for p in root.rglob("*") if p.is_file() and _is_snapshot_name(p.name))
    skipped: list[tuple[str, str]] = []
    if validate and candidates:
        workers = min(8, os.cpu_count() or 1, len(candidates))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            problems = list(pool.map(_check_gzip, candidates))
    else:
        problems = [None] * len(candidates)
    files: list[str] = []
    for path, problem in zip(candidates, problems, strict=True):
        if problem is None:
            files.append(str(path.resolve()))
        else:
            skipped.append((str(path), problem))
    return InputListing(files, skipped, remote=False)


def discover_remote(spark: SparkSession, uri: str) -> InputListing:
    """List snapshot files under a Hadoop URI (no driver-side validation)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jpath = jvm.org.apache.hadoop.fs.Path(uri)
    fs = jpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(jpath):
        return InputListing([], [], remote=True)
    files: list[str] = []
    it = fs.listFiles(jpath, True)
    while it.hasNext():
        status = it.next()
        if _is_snapshot_name(status.getPath().getName()) and status.getLen() > 0:
            files.append(status.getPath().toString())
    return InputListing(sorted(files), [], remote=True)
