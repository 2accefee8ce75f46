"""Horae vs Apache Pulsar 4.0 driven by the official Java client, pulsar-client 4.0.8.

Starts the peers as :mod:`bench.brokers` does (Horae with an fsync before every receipt, the
default; Apache Pulsar standalone with its bookie journal fsynced before each receipt and
deduplication on: :mod:`bench.pulsar_peer`), each on free loopback ports with its data in a
temporary directory, then drives each in turn with the Java client, one JVM per workload
(``bench/peers/java-client``, class ``dev.horae.bench.ClientLoad``):

1. async publish of N x S bytes, batching off   (msgs/s, first send to last receipt)
2. async publish of N x S bytes, batching on    (msgs/s; batches of at most 1,000 or 10 ms)
3. Shared consume of workload 1's N messages with an ``acknowledgeAsync`` per message (msgs/s)

The producer settings are those of ``bench/compare_peer.py``'s Python client (5,000 pending at
most, the sender blocked when they are all out, a 120 s send timeout), so the two benchmarks
differ by the client alone. Why both: the Python client is the C++ client under the GIL, and
its async publish hands the GIL between the sending thread and the I/O thread that runs each
receipt's callback; against a broker whose receipts come back while the sender is still
sending (Horae's) that is some 0.4 context switches per message (``bench/client_cost.py``),
which bounds the rate before the broker does. The Java client has no such lock, and is what
most Pulsar users run.

Each peer first runs one uncounted warm-up round (``--warmup``: that fraction of the count;
a broker's JVM compiles its hot paths then). The client's JVM is new for each workload, so each
also sends (or receives) that fraction of the count untimed before its timed N, through the
same code (a consume reads what its publish's lead-in left). The child prints a line as its
clock starts and another as it stops; the broker's CPU seconds (``/proc/PID/stat``, all
threads; for Pulsar the JVM's) are read at each, so the broker's CPU per million messages
covers the timed phase alone, as does the client's: the client JVM's own CPU over that phase
(every thread: caller, IO, JIT, GC). After the round, the broker's RSS. Every figure is printed
for each peer with Horae's ratio to it (above 1 = Horae ahead: Horae/peer for rates,
peer/Horae for CPU and memory; :mod:`bench.peer_table`).

The first run compiles the class and copies the client's jars (``mvn -q -B compile
dependency:copy-dependencies`` in ``bench/peers/java-client``, into its ``target/``, ignored by
git); later runs reuse them. Without ``java`` (or, before that first build, ``mvn``) the
benchmark prints why it skipped and exits with 0.

Usage: ``.venv/bin/python bench/compare_java.py [--messages 100000] [--size 1024]
[--peers horae,pulsar] [--rounds 1] [--warmup 0.2] [--json FILE]``; ``pulsar-lite``,
``horae-nofsync`` and ``pulsar-nosync`` are peers too. Never part of the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from bench.brokers import Broker, cpu_seconds, parse_peers, rss_mib
from bench.compare_peer import is_lower_better, measure_rounds
from bench.peer_table import format_table

PROJECT = pathlib.Path(__file__).resolve().parent / "peers" / "java-client"
SOURCE = PROJECT / "src" / "main" / "java" / "dev" / "horae" / "bench" / "ClientLoad.java"
CLASSES = PROJECT / "target" / "classes"
LIB_DIR = PROJECT / "target" / "lib"
MAIN_CLASS = "dev.horae.bench.ClientLoad"
CLIENT_VERSION = "4.0.8"
"""Must match ``pulsar.version`` in ``bench/peers/java-client/pom.xml``."""
BUILD_TIMEOUT_S = 600.0  # the first build resolves the client's jars (about 20)
WORKLOAD_TIMEOUT_S = 900.0  # the class gives up on its own after 600 s without progress
DEFAULT_PEERS = ("horae", "pulsar")
MARKS = ("timing", "timed")
"""The lines the class prints as its clock starts and stops (the broker's CPU is read at each)."""

# What Pulsar's client documentation asks of a JVM on Java 11+ so that the shaded Netty frees
# direct buffers through its fast paths, and reaches CRC32C directly.
JVM_OPTS = [
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
    "-Dorg.apache.pulsar.shade.io.netty.tryReflectionSetAccessible=true",
]


class ClientUnavailable(RuntimeError):
    """The Java client cannot run here: no ``java``, or no build and no ``mvn``."""


class BuildFailed(RuntimeError):
    """``mvn`` ran and failed (e.g. the client's jars could not be resolved)."""


def _built() -> bool:
    main_class = CLASSES / (MAIN_CLASS.replace(".", "/") + ".class")
    return ((LIB_DIR / f"pulsar-client-{CLIENT_VERSION}.jar").exists() and main_class.exists()
            and main_class.stat().st_mtime >= SOURCE.stat().st_mtime)


def client_classpath() -> str:
    """The classpath of :data:`MAIN_CLASS`, compiled and its jars copied on first use (or after
    the source changed). Raises :class:`ClientUnavailable` or :class:`BuildFailed`."""
    if shutil.which("java") is None:
        raise ClientUnavailable("java not found")
    if not _built():
        if shutil.which("mvn") is None:
            raise ClientUnavailable("mvn not found (needed once, to build the Java client)")
        done = subprocess.run(["mvn", "-q", "-B", "compile", "dependency:copy-dependencies"],
                              cwd=PROJECT, capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S, check=False)
        if done.returncode != 0 or not _built():
            raise BuildFailed(f"mvn compile dependency:copy-dependencies in {PROJECT} failed: "
                              f"{(done.stdout + done.stderr)[-2000:]}")
    return f"{CLASSES}{os.pathsep}{LIB_DIR}/*"


def run_client(classpath: str, url: str, workload: str, topic: str, messages: int, *,
               warmup: int = 0, size: int = 1024, batching: bool = False,
               subscription: str | None = None,
               on_mark: Callable[[str], None] = lambda mark: None) -> dict[str, Any]:
    """One :data:`MAIN_CLASS` run as a child JVM, *warmup* messages untimed before the timed
    *messages*; *on_mark* is called with each of :data:`MARKS` as the child prints it (its clock
    starting, stopping). Returns its JSON line (``msg_per_s``, ``client_cpu_s``, ...); a failed
    run raises with the class's own reason."""
    args = ["java", *JVM_OPTS, "-cp", classpath, MAIN_CLASS, "--url", url,
            "--workload", workload, "--topic", topic, "--messages", str(messages),
            "--warmup", str(warmup), "--size", str(size)]
    if batching:
        args.append("--batching")
    if subscription is not None:
        args += ["--subscription", subscription]
    lines: list[str] = []
    with tempfile.TemporaryFile() as err, subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=err, text=True) as proc:
        watchdog = threading.Timer(WORKLOAD_TIMEOUT_S, proc.kill)
        watchdog.start()
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.strip()
                if line in MARKS:
                    on_mark(line)
                elif line:
                    lines.append(line)
            returncode = proc.wait()
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
        if returncode != 0 or not lines:
            err.seek(0)
            reason = err.read().decode(errors="replace").strip()[-2000:]
            raise RuntimeError(f"Java client {workload} on {topic} exited {returncode}: {reason}")
    figures: dict[str, Any] = json.loads(lines[-1])
    return figures


def _measured(broker: Broker, cpu: dict[str, float], phase: str, messages: int,
              **client: Any) -> float:
    """Runs one workload (*client*: :func:`run_client`'s arguments) with the broker's CPU read
    as the child's clock starts and stops; records both CPU figures per million messages under
    *phase*; returns the msg/s."""
    broker_cpu: dict[str, float] = {}

    def on_mark(mark: str) -> None:
        broker_cpu[mark] = cpu_seconds(broker.pid)

    out = run_client(url=broker.url, messages=messages, on_mark=on_mark, **client)
    if set(broker_cpu) != set(MARKS):
        raise RuntimeError(f"Java client {phase}: marks {sorted(broker_cpu)}, not {MARKS}")
    cpu[f"broker CPU s/M msgs, {phase}"] = (
        (broker_cpu["timed"] - broker_cpu["timing"]) / messages * 1e6)
    cpu[f"client CPU s/M msgs, {phase}"] = float(out["client_cpu_s"]) / messages * 1e6
    return float(out["msg_per_s"])


def run_workload(broker: Broker, args: argparse.Namespace, rnd: int,
                 classpath: str) -> dict[str, float]:
    rnd_name = "warm" if rnd < 0 else str(rnd)
    t_plain = f"persistent://public/default/java-plain-{rnd_name}"
    t_batch = f"persistent://public/default/java-batch-{rnd_name}"
    results: dict[str, float] = {}
    cpu: dict[str, float] = {}
    # each JVM's own untimed lead-in (its JIT), the same in the publish and the consume of a
    # topic: that consume reads what that publish left
    common = {"classpath": classpath, "size": args.size,
              "warmup": int(args.messages * args.warmup)}
    # the publish creates the subscription before its first send, so the consume reads it all
    results["async publish, batching off (msg/s)"] = _measured(
        broker, cpu, "publish unbatched", args.messages, workload="publish", topic=t_plain,
        subscription="bench", **common)
    results["async publish, batching on (msg/s)"] = _measured(
        broker, cpu, "publish batched", args.messages, workload="publish", topic=t_batch,
        batching=True, **common)
    results["Shared consume + ack each (msg/s)"] = _measured(
        broker, cpu, "consume + ack", args.messages, workload="consume", topic=t_plain,
        subscription="bench", **common)
    results.update(cpu)
    results["broker RSS after round (MiB)"] = rss_mib(broker.pid)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warmup", type=float, default=0.2,
                        help="an uncounted first round per peer at this fraction of the "
                             "count (JIT, caches); 0: none")
    parser.add_argument("--peers", default=",".join(DEFAULT_PEERS),
                        help="comma-separated peers to run: horae, pulsar-lite, pulsar, "
                             "horae-nofsync, pulsar-nosync")
    parser.add_argument("--json", type=pathlib.Path, metavar="FILE", help="write all figures")
    args = parser.parse_args(argv)
    try:
        peers = parse_peers(args.peers)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        classpath = client_classpath()
    except ClientUnavailable as exc:
        print(f"skipped: {exc}")
        return 0
    except BuildFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    figures, versions, failures = measure_rounds(
        peers, args, ("messages",),
        lambda broker, run_args, rnd: run_workload(broker, run_args, rnd, classpath))
    print()
    print(f"official Java client {CLIENT_VERSION}: {args.messages} x {args.size} B async; best "
          f"of {args.rounds} round(s); Horae and Pulsar fsync before every receipt")
    print(format_table(figures, peers, {f for f in figures if is_lower_better(f)}))
    for failure in failures:
        print(f"left out: {failure}")
    if args.json is not None:
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)},
                                         "versions": versions | {"java-client": CLIENT_VERSION},
                                         "figures": figures, "failures": failures}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
