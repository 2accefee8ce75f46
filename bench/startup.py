"""The broker process's own start, as installed: from ``Popen`` to the binary port accepting and
to the started line, with the process's CPU seconds (every thread) and RSS at each.

Usage: .venv/bin/python bench/startup.py [--rounds 5] [--compare-with CHECKOUT] [--data-dir DIR]

Each round starts ``python -m broker serve`` (this interpreter, the checkout's code: its
directory is the working directory, first on ``sys.path``) on free loopback ports and an empty
data directory (``--data-dir DIR``: a copy of DIR's contents instead), at the default log level.
The checkout's ``.pyc`` files are written first (:func:`bench.processes.compile_sources`): pip
compiles a package's modules when it installs it, so an installed broker never compiles its
sources at start. Measured from ``Popen``:

- ``listening``: the binary port's first accepted connection (a connect is tried every 2 ms);
- ``started``: the started line (``... started: service ... web ...``) read from the output;
- ``*_cpu_s``: the process's CPU seconds then (``/proc``, every thread); ``rss_mib``: its RSS
  at the started line; ``web_first_ms``: the first ``GET /metrics`` right after it.

``--compare-with CHECKOUT`` alternates each round with that checkout's broker (this checkout
first); the load average is printed with every round. One JSON line per start.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0]).resolve() == HERE / "bench":
    del sys.path[0]                  # bench/storage.py would shadow the storage package
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from bench.processes import compile_sources, cpu_seconds, free_port, rss_mib  # noqa: E402

STARTED = " started: service "


def start_once(root: Path, tmp: Path, seed: Path | None, timeout_s: float) -> dict[str, object]:
    data = tmp / "data"
    shutil.rmtree(data, ignore_errors=True)
    if seed is not None:
        shutil.copytree(seed, data)
    port, web = free_port(), free_port()
    args = [sys.executable, "-m", "broker", "serve", "--data-dir", str(data), "--broker-port",
            str(port), "--web-port", str(web), "--bind-address", "127.0.0.1",
            "--advertised-address", "127.0.0.1"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    started = threading.Event()
    marks: dict[str, object] = {}
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if STARTED in line and not started.is_set():
                marks["started_s"] = round(time.perf_counter() - t0, 3)
                marks["started_cpu_s"] = round(cpu_seconds(proc.pid), 2)
                marks["rss_mib"] = round(rss_mib(proc.pid), 1)
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = t0 + timeout_s
        while time.perf_counter() < deadline and proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    marks["listening_s"] = round(time.perf_counter() - t0, 3)
                    marks["listening_cpu_s"] = round(cpu_seconds(proc.pid), 2)
                    break
            except OSError:
                time.sleep(0.002)
        if not started.wait(max(deadline - time.perf_counter(), 0)):
            raise RuntimeError("no started line:\n" + "".join(lines[-20:]))
        t = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{web}/metrics", timeout=30) as resp:
            resp.read()
        marks["web_first_ms"] = round((time.perf_counter() - t) * 1000, 1)
    finally:
        proc.kill()
        proc.wait()
    return marks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--compare-with", default="", dest="compare_with",
                   help="alternate each round with this checkout's broker")
    p.add_argument("--data-dir", default="", dest="data_dir",
                   help="start on a copy of this data directory (default: an empty one)")
    p.add_argument("--timeout-s", type=float, default=120.0, dest="timeout_s")
    args = p.parse_args()
    roots = [HERE] + ([Path(args.compare_with).resolve()] if args.compare_with else [])
    for root in roots:
        compile_sources(root)
    seed = Path(args.data_dir) if args.data_dir else None
    with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
        for r in range(args.rounds):
            for root in roots:
                load = os.getloadavg()[0]
                marks = start_once(root, Path(tmp), seed, args.timeout_s)
                print(json.dumps({"round": r, "checkout": str(root), "load": round(load, 2),
                                  **marks}), flush=True)


if __name__ == "__main__":
    main()
