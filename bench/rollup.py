"""Benchmark: the metrics rollup job on local[2] over N million samples in the snapshot schema.

Usage::

    .venv/bin/python bench/rollup.py                 # 1M and 10M samples
    .venv/bin/python bench/rollup.py --sizes 0.5,2   # millions, any number of sizes

For each size it generates (once; reused from ``--data-dir`` on later runs) a snapshot tree
as a broker fleet would write it: ``--brokers`` brokers exporting every 60 s, each file one
snapshot of ``--topics`` topics with 18 samples per topic (in/out counters, rates, backlog,
subscription and delayed-delivery gauges, the delayed-delivery counters and a 6-bucket
write-latency histogram), counters restarting now and then. It then runs
``python -m jobs.metrics_rollup --master local[2] --window 1m,1h`` in a fresh process and
prints the wall time, the job's own time (without JVM start-up), samples per second, and
how the time grows from the smallest to each larger size (1.0 per 1x data would be linear).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES_PER_TOPIC = 18
INTERVAL_MS = 60_000
START_MS = int(dt.datetime(2026, 11, 1, tzinfo=dt.UTC).timestamp() * 1000)
LATENCY_BOUNDS = ("0.5", "1.0", "5.0", "10.0", "50.0", "+Inf")


def _templates(broker: str, topics: int) -> list[tuple[str, str, str]]:
    """Per series: (json before ts, json between ts and value, kind) with the value last."""
    out = []
    for t in range(topics):
        topic = f"persistent://public/ns{t % 10}/topic-{t}"
        base = {"namespace": f"public/ns{t % 10}", "topic": topic}
        sub = {**base, "subscription": "sub-0"}
        series = [
            ("pulsar_in_messages_total", "counter", base, "in"),
            ("pulsar_out_messages_total", "counter", base, "out"),
            ("pulsar_in_bytes_total", "counter", base, "bytes"),
            ("pulsar_rate_in", "gauge", base, "rate"),
            ("pulsar_rate_out", "gauge", base, "rate"),
            ("pulsar_msg_backlog", "gauge", base, "backlog"),
            ("pulsar_subscription_back_log", "gauge", sub, "backlog"),
            ("pulsar_subscription_delayed", "gauge", sub, "delayed"),
            ("pulsar_delayed_message_index_size_bytes", "gauge", base, "index"),
            ("pulsar_broker_topic_messages_delayed_rejected_total", "counter", base, "rare"),
            ("pulsar_broker_topic_messages_fixed_delay_overridden_total", "counter", base, "rare"),
        ]
        for i, le in enumerate(LATENCY_BOUNDS):
            series.append(
                ("pulsar_storage_write_latency_bucket", "histogram", {**base, "le": le}, f"h{i}")
            )
        series.append(("pulsar_storage_write_latency_count", "histogram", base, "h5"))
        assert len(series) == SAMPLES_PER_TOPIC
        for metric, mtype, labels, kind in series:
            head = '{"ts":'
            middle = (
                f',"broker":{json.dumps(broker)},"cluster":"bench","metric":"{metric}",'
                f'"type":"{mtype}","labels":{json.dumps(labels, separators=(",", ":"))},"value":'
            )
            out.append((head, middle, kind))
    return out


def _value(kind: str, tick: int, series_no: int) -> float:
    # Counters grow per tick and restart every 500 ticks (a broker restart); gauges wander.
    age = tick % 500
    rate = 10 + series_no % 90
    if kind in ("in", "out"):
        return float(age * rate)
    if kind == "bytes":
        return float(age * rate * 512)
    if kind == "rare":
        return float(age // 50)
    if kind.startswith("h"):
        return float(age * (int(kind[1]) + 1) * 3)
    if kind == "rate":
        return float(rate + tick % 7)
    if kind == "index":
        return float(24 * ((tick * 13 + series_no) % 1000))
    return float((tick * 31 + series_no) % 997)  # backlog / delayed


def _write_snapshot(job: tuple[str, str, int, int, int]) -> int:
    root, broker, broker_no, tick, topics = job
    ts = START_MS + tick * INTERVAL_MS + broker_no * 1_000
    day = dt.datetime.fromtimestamp(ts / 1000, tz=dt.UTC).strftime("%Y-%m-%d")
    directory = Path(root) / f"date={day}"
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        f"{head}{ts}{middle}{_value(kind, tick, n)}}}\n"
        for n, (head, middle, kind) in enumerate(_templates_cached(broker, topics))
    ]
    path = directory / f"metrics-{broker}-{ts}.jsonl.gz"
    with gzip.open(path, "wt", compresslevel=1, encoding="utf-8") as out:
        out.write("".join(lines))
    return len(lines)


_TEMPLATE_CACHE: dict[tuple[str, int], list[tuple[str, str, str]]] = {}


def _templates_cached(broker: str, topics: int) -> list[tuple[str, str, str]]:
    key = (broker, topics)
    if key not in _TEMPLATE_CACHE:
        _TEMPLATE_CACHE[key] = _templates(broker, topics)
    return _TEMPLATE_CACHE[key]


def generate(root: Path, samples: int, brokers: int, topics: int) -> tuple[int, int, float]:
    """Write about ``samples`` samples under ``root``; return (samples, files, seconds)."""
    per_file = topics * SAMPLES_PER_TOPIC
    ticks = max(1, round(samples / (per_file * brokers)))
    marker = root / "COMPLETE.json"
    spec = {
        "samples": ticks * per_file * brokers,
        "brokers": brokers,
        "topics": topics,
        "ticks": ticks,
    }
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return spec["samples"], ticks * brokers, 0.0
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    started = time.monotonic()
    jobs = [
        (str(root), f"broker-{b}", b, tick, topics) for tick in range(ticks) for b in range(brokers)
    ]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        written = sum(pool.map(_write_snapshot, jobs, chunksize=16))
    marker.write_text(json.dumps(spec))
    return written, len(jobs), time.monotonic() - started


def run_job(data: Path, out: Path, master: str, driver_memory: str) -> tuple[float, float, int]:
    """Run the job in a fresh process; return (wall s, job s from its log, exit code)."""
    cmd = [
        sys.executable, "-m", "jobs.metrics_rollup", "--input", str(data), "--output", str(out),
        "--master", master, "--window", "1m,1h", "--conf", f"spark.driver.memory={driver_memory}",
        "--conf", "spark.ui.showConsoleProgress=false",
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    match = re.search(r"done in ([\d.]+)s", proc.stderr)
    if proc.returncode != 0 or match is None:
        sys.stderr.write(proc.stderr[-4000:])
    for line in proc.stderr.splitlines():
        if " rollup " in line:
            print(f"    {line}", flush=True)
    return wall, float(match.group(1)) if match else float("nan"), proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="1,10", help="millions of samples, comma-separated (default 1,10)"
    )
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/horae-bench-rollup"))
    parser.add_argument("--brokers", type=int, default=2)
    parser.add_argument(
        "--topics", type=int, default=100, help="topics per broker (x18 samples per file)"
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    args = parser.parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",")]

    results = []
    for millions in sizes:
        samples = int(millions * 1_000_000)
        data = args.data_dir / f"samples-{millions:g}M" / "metrics"
        n, files, gen_s = generate(data, samples, args.brokers, args.topics)
        size_mb = sum(p.stat().st_size for p in data.rglob("*.gz")) / 1e6
        print(
            f"{millions:g}M: {n:,} samples in {files:,} files ({size_mb:,.0f} MB gzip), "
            f"generated in {gen_s:.1f}s" + (" (reused)" if gen_s == 0 else ""),
            flush=True,
        )
        out = args.data_dir / f"out-{millions:g}M"
        shutil.rmtree(out, ignore_errors=True)
        wall, job_s, rc = run_job(data, out, args.master, args.driver_memory)
        rows_out = sum(1 for _ in (out / "rollup").rglob("*.parquet")) if rc == 0 else 0
        print(
            f"{millions:g}M: exit {rc}, wall {wall:.1f}s, job {job_s:.1f}s, "
            f"{n / job_s:,.0f} samples/s rolled up on {args.master} ({rows_out} parquet files)",
            flush=True,
        )
        results.append((millions, n, wall, job_s))

    print("\nsize      samples      wall s    job s   samples/s   time vs first")
    first = results[0]
    for millions, n, wall, job_s in results:
        growth = job_s / first[3]
        print(
            f"{millions:>4g}M  {n:>12,}  {wall:>8.1f}  {job_s:>7.1f}  {n / job_s:>10,.0f}   "
            f"x{growth:.2f} for x{n / first[1]:.1f} data"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
