"""Transactions: Horae vs Apache Pulsar 4.0, both with the transaction coordinator, same workload.

Starts Horae (``transactionCoordinatorEnabled = true``, fsync before every receipt, the
default) and Apache Pulsar standalone with ``transactionCoordinatorEnabled=true``
(:mod:`bench.pulsar_peer`; bookie journal fsynced before each receipt), each on free ports with
its data in a temporary directory, then drives each in turn with the official Go client
(pulsar-client-go, the program in ``bench/txn_driver``, built once with ``go build``; the
official Python client has no transaction API):

1. plain publish: N async sends of S bytes, batching off, 1000 in flight   (msgs/s)
2. transactional publish: the same, K messages to a transaction, each committed once its K
   receipts are in   (msgs/s)
3. consume-process-produce, plain: N messages already on the topic; each is received
   (Shared), sent on a second topic and acknowledged; K at a time, waiting for the K receipts
   (msgs/s)
4. consume-process-produce in transactions: the same with the K sends and acks in one
   transaction, then its commit   (msgs/s)
5. commit latency: T transactions of one send each; the time of ``Commit`` (p50, p99, us)

Each peer first runs one uncounted warm-up round (``--warmup`` of every count). Figures are
printed per peer with Horae's ratio to it (above 1 = Horae ahead: :mod:`bench.peer_table`).
Latency figures are the most sensitive to other load on the machine: run several rounds.

Usage: ``.venv/bin/python bench/transactions.py [--messages 5000] [--size 1024] [--per-txn 100]
[--commits 500] [--peers horae,pulsar] [--rounds 1] [--json FILE]``. Needs Go (the driver),
Java 17 and Maven (Pulsar). Never part of the test run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from bench.brokers import Broker, start_horae
from bench.peer_table import format_table

DRIVER_DIR = pathlib.Path(__file__).resolve().parent / "txn_driver"
PEERS = ("horae", "pulsar")
PHASE_TIMEOUT_S = 900


@contextlib.contextmanager
def start_peer(name: str, tmp: pathlib.Path) -> Iterator[Broker]:
    if name == "horae":
        with start_horae(tmp, config="transactionCoordinatorEnabled = true\n") as broker:
            yield broker
    else:
        from bench.pulsar_peer import start_pulsar_standalone

        with start_pulsar_standalone(tmp, sync=True, name="pulsar",
                                     extra={"transactionCoordinatorEnabled": "true"}) as broker:
            yield broker


def build_driver(tmp: pathlib.Path) -> pathlib.Path:
    binary = tmp / "txndriver"
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=DRIVER_DIR, check=True,
                   timeout=900)
    return binary


def drive(binary: pathlib.Path, broker: Broker, phase: str, topic: str, n: int,
          args: argparse.Namespace) -> dict[str, float]:
    done = subprocess.run(
        [str(binary), "-url", f"pulsar://{broker.host}:{broker.port}", "-phase", phase,
         "-topic", topic, "-n", str(n), "-size", str(args.size), "-per-txn", str(args.per_txn)],
        capture_output=True, text=True, timeout=PHASE_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{broker.name} {phase}: {done.stderr.strip()[-2000:]}")
    return {k: float(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def run_workload(binary: pathlib.Path, broker: Broker, args: argparse.Namespace) -> dict[str, float]:
    def topic(stem: str) -> str:
        return f"persistent://public/default/txnbench-{stem}-{uuid.uuid4().hex[:8]}"

    n = args.messages
    fig: dict[str, float] = {}
    fig["publish, plain (msg/s)"] = drive(binary, broker, "publish", topic("pub"), n, args)["rate"]
    fig[f"publish, {args.per_txn}/txn (msg/s)"] = drive(
        binary, broker, "publish-txn", topic("pubtxn"), n, args)["rate"]
    for phase, label in (("cpp", "plain"), ("cpp-txn", f"{args.per_txn}/txn")):
        t = topic(phase)
        drive(binary, broker, "prefill", t, n, args)
        fig[f"consume-process-produce, {label} (msg/s)"] = drive(
            binary, broker, phase, t, n, args)["rate"]
    lat = drive(binary, broker, "commit", topic("commit"), args.commits, args)
    fig["commit p50 (us)"] = lat["p50_us"]
    fig["commit p99 (us)"] = lat["p99_us"]
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--per-txn", type=int, default=100, help="messages per transaction")
    parser.add_argument("--commits", type=int, default=500,
                        help="transactions in the commit-latency workload")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warmup", type=float, default=0.2,
                        help="an uncounted first round per peer at this fraction of every "
                             "count (JIT, caches); 0: none")
    parser.add_argument("--peers", default=",".join(PEERS), help="horae, pulsar or both")
    parser.add_argument("--json", type=pathlib.Path, metavar="FILE", help="write all figures")
    args = parser.parse_args(argv)
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    if not peers or any(p not in PEERS for p in peers):
        parser.error(f"--peers: choose from {', '.join(PEERS)}")

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="horae-txnbench-"))
    figures: dict[str, dict[str, list[float]]] = {}
    try:
        binary = build_driver(tmp)
        for name in peers:  # one broker at a time: the machine is small
            with start_peer(name, tmp) as broker:
                if args.warmup > 0:
                    warm = argparse.Namespace(**vars(args))
                    warm.messages = max(int(args.messages * args.warmup), args.per_txn)
                    warm.commits = max(int(args.commits * args.warmup), 10)
                    run_workload(binary, broker, warm)
                    print(f"warm-up {name}: done", flush=True)
                for rnd in range(args.rounds):
                    print(f"round {rnd + 1}: {name} ...", flush=True)
                    for k, v in run_workload(binary, broker, args).items():
                        figures.setdefault(k, {}).setdefault(name, []).append(v)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(f"Go client: {args.messages} x {args.size} B, {args.per_txn} messages a transaction, "
          f"{args.commits} commits; best of {args.rounds} round(s); fsync before every receipt")
    print(format_table(figures, peers, {f for f in figures if f.endswith("(us)")}))
    if args.json is not None:
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)},
                                         "figures": figures}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
