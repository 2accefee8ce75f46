"""The whole peer comparison in one command: Horae / pulsar-lite / Apache Pulsar, with ratios.

Theory of operation
-------------------
Runs, one after another and each as its own process (so each starts and stops its brokers and
a failure of one is reported without hiding the others), the benchmarks that have peers:

1. ``bench/wire_load.py`` unbatched and ``--batch 100`` (raw frames: what the broker takes);
2. ``bench/compare_peer.py`` (the official Python client: async and sync publish, batched
   publish, Shared consume with acks, end-to-end latency, broker CPU per million messages, RSS);
3. ``bench/compare_java.py`` (the official Java client: async publish unbatched and batched,
   Shared consume with acks, broker and client CPU per million messages, RSS; skipped without
   a JDK);
4. ``bench/scale.py`` (many connections and topics: time to open them, idle CPU, RSS; a backlog
   published and drained).

Each writes ``--json``; this script reads them back and prints every figure in one table per
benchmark (:mod:`bench.peer_table`: above 1 = Horae ahead), headed by the machine (cores, CPU
model, memory) and the load average (``/proc/loadavg``) before and after each benchmark, since
the figures are only comparable within one run on one machine.

``--quick`` (the default sizes are for a quiet machine) shrinks every count so the whole
comparison takes minutes on a shared one. ``--peers`` is passed on (default
``horae,pulsar-lite,pulsar``; add ``horae-nofsync,pulsar-nosync`` for the relaxed pair).

``--relaxed`` adds the comparison at equal durability to every benchmark: ``horae-nofsync``
(``journalSyncData = false``, no fsync or fdatasync) runs beside pulsar-lite, which never syncs.
Each benchmark's default table stays Horae with an fsync before every receipt; the relaxed run
follows it as a table of its own, ratios against ``horae-nofsync``
(:func:`bench.peer_table.relaxed_table`).

Usage: ``.venv/bin/python bench/compare_all.py [--quick] [--rounds 1] [--peers ...] [--relaxed]
[--only wire,client,java,scale] [--out DIR]``. Never part of the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from bench.brokers import DEFAULT_PEERS, ROOT, parse_peers
from bench.compare_peer import is_lower_better
from bench.peer_table import format_table, relaxed_table, with_relaxed, without_relaxed_horae
from bench.wire_load import HIGHER_IS_BETTER

SIZES = {
    # benchmark: (full sizes, --quick sizes)
    "wire": (["--messages", "100000"], ["--messages", "30000", "--warmup", "10000"]),
    "client": (["--messages", "50000", "--sync", "5000", "--e2e", "5000"],
               ["--messages", "10000", "--sync", "1000", "--e2e", "1000"]),
    "java": (["--messages", "200000"], ["--messages", "30000"]),
    # idle CPU over a minute: one metric export at the broker's default interval in each window
    "scale": (["--connections", "10000", "--topics", "10000", "--backlog", "1000000",
               "--idle-seconds", "60"],
              ["--connections", "10000", "--topics", "10000", "--backlog", "100000",
               "--idle-seconds", "5"]),
}


def loadavg() -> str:
    return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])


def machine() -> str:
    model = next((line.split(":", 1)[1].strip()
                  for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    mem_kib = int(next(line.split()[1] for line in
                       pathlib.Path("/proc/meminfo").read_text().splitlines()
                       if line.startswith("MemTotal:")))
    return (f"{os.cpu_count()} cores ({model}), {mem_kib / 2**20:.0f} GiB, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}")


def run(name: str, script: str, extra: Sequence[str], json_path: pathlib.Path) -> str:
    """Run one benchmark script; returns the load averages around it."""
    before = loadavg()
    cmd = [sys.executable, str(ROOT / "bench" / script), *extra, "--json", str(json_path)]
    print(f"\n=== {name}: {' '.join(cmd[1:])}  (load before: {before})", flush=True)
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=ROOT, check=True)
    after = loadavg()
    print(f"=== {name} took {time.monotonic() - t0:.0f} s (load after: {after})", flush=True)
    return f"load average before {before}, after {after}"


def wire_figures(data: Mapping[str, Any]) -> dict[str, dict[str, list[float]]]:
    figures: dict[str, dict[str, list[float]]] = {}
    for peer, rounds in data["results"].items():
        for r in rounds:
            for fig, value in r["figures"].items():
                figures.setdefault(fig, {}).setdefault(peer, []).append(value)
    return figures


def scale_figures(data: Mapping[str, Any]) -> dict[str, dict[str, list[float]]]:
    figures: dict[str, dict[str, list[float]]] = {}
    for peer, out in data["results"].items():
        for key, value in out.items():
            if isinstance(value, int | float):
                figures.setdefault(key, {})[peer] = [float(value)]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts (shared machine)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--peers", default=",".join(DEFAULT_PEERS))
    parser.add_argument("--relaxed", action="store_true",
                        help="also horae-nofsync beside pulsar-lite (neither syncs), in tables "
                             "of their own")
    parser.add_argument("--only", default="wire,client,java,scale",
                        help="which benchmarks: wire, client, java, scale")
    parser.add_argument("--out", type=pathlib.Path, help="keep the JSON files in DIR")
    args = parser.parse_args(argv)
    try:
        peers = parse_peers(args.peers)
    except ValueError as exc:
        parser.error(str(exc))
    if args.relaxed:
        peers = with_relaxed(peers)
    only = {s.strip() for s in args.only.split(",")}
    if not only <= set(SIZES):
        parser.error(f"--only takes {', '.join(SIZES)}")
    out = args.out or pathlib.Path(tempfile.mkdtemp(prefix="horae-compare-all-"))
    out.mkdir(parents=True, exist_ok=True)
    pick = 1 if args.quick else 0
    common = ["--peers", ",".join(peers)]
    rounds = ["--rounds", str(args.rounds)]
    tables: list[str] = []
    failed: list[str] = []

    def section(title: str, loads: str, figures: Mapping[str, Mapping[str, Sequence[float]]],
                lower: set[str]) -> None:
        names = [p for p in peers if any(p in per for per in figures.values())]
        default = without_relaxed_horae(names)
        if default:
            tables.append(f"\n{title}\n({loads})\n{format_table(figures, default, lower)}")
        relaxed = relaxed_table(figures, names, lower)
        if relaxed:
            tables.append(f"\n{title}; RELAXED, equal durability (neither syncs)\n({loads})\n"
                          f"{relaxed}")

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for mode, batch in (("unbatched", []), ("batches of 100", ["--batch", "100"])):
        if "wire" not in only:
            break
        path = out / f"wire_load_{'batched' if batch else 'unbatched'}.json"
        try:
            loads = run(f"wire load, {mode}", "wire_load.py",
                        [*SIZES["wire"][pick], *batch, *rounds, *common], path)
        except subprocess.CalledProcessError:
            failed.append(f"wire load, {mode}")
            continue
        data = json.loads(path.read_text())
        s = data["settings"]
        figures = wire_figures(data)
        section(f"raw wire, {mode}: {s['connections']} connections x {s['in_flight']} SENDs in "
                f"flight, {s['messages']:,} x {s['size']} B", loads, figures,
                set(figures) - HIGHER_IS_BETTER)
    if "client" in only:
        path = out / "compare_peer.json"
        try:
            loads = run("official client", "compare_peer.py",
                        [*SIZES["client"][pick], *rounds, *common], path)
            data = json.loads(path.read_text())
            s = data["settings"]
            figures = data["figures"]
            section(f"official Python client: {s['messages']:,} x {s['size']} B async, "
                    f"{s['sync']:,} sync, {s['e2e']:,} end to end", loads, figures,
                    {f for f in figures if is_lower_better(f)})
        except subprocess.CalledProcessError:
            failed.append("official client")
    if "java" in only:
        path = out / "compare_java.json"
        try:
            loads = run("official Java client", "compare_java.py",
                        [*SIZES["java"][pick], *rounds, *common], path)
            if path.exists():
                data = json.loads(path.read_text())
                s = data["settings"]
                figures = data["figures"]
                section(f"official Java client: {s['messages']:,} x {s['size']} B async", loads,
                        figures, {f for f in figures if is_lower_better(f)})
            else:   # no JDK: the benchmark said why and skipped
                tables.append("\nofficial Java client: skipped (no JDK; see its output above)")
        except subprocess.CalledProcessError:
            failed.append("official Java client")
    if "scale" in only:
        path = out / "scale.json"
        try:
            loads = run("scale", "scale.py", [*SIZES["scale"][pick], *common], path)
            data = json.loads(path.read_text())
            s = data["settings"]
            figures = scale_figures(data)
            section(f"scale: {s['connections']:,} connections, {s['topics']:,} topics, backlog "
                    f"{s['backlog']:,} x {s['size']} B in entries of {s['batch']}", loads,
                    figures, {k for k in figures if not k.endswith("_per_s")})
        except subprocess.CalledProcessError:
            failed.append("scale")

    print("\n" + "=" * 100)
    print(f"Horae vs pulsar-lite 0.2.0 vs Apache Pulsar standalone ({started}); {machine()}")
    print("Horae: fsync before every receipt, dedup on (defaults). Pulsar: bookie journal "
          "fsynced before every receipt, dedup on. pulsar-lite: as shipped (never syncs).")
    if "horae-nofsync" in peers:
        print("RELAXED tables: horae-nofsync = Horae with journalSyncData=false (no fsync or "
              "fdatasync), against pulsar-lite, which makes none either.")
    for table in tables:
        print(table)
    print(f"\nJSON: {out}")
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
