"""How long one connection's big ACK frames hold the broker's event loop away from everyone else.

Usage::

    .venv/bin/python bench/loop_stall.py [--frames 3] [--ids 400000] [--seconds 2]

Theory of operation
-------------------
A Horae broker runs as a subprocess (``bench/brokers.py``, fsync on). An attacker connection
publishes a few entries, subscribes (Shared) and then sends ``--frames`` ACK frames of ``--ids``
individual message ids each (400,000 ids make a 3 MiB frame, under the 5 MiB limit), all with a
request id, so the broker's ACK_RESPONSEs tell when each ACK was applied. The ids point below
the topic's last entry, so each one takes the whole acknowledgement path. Meanwhile a healthy
connection sends a PING every 5 ms and waits for its PONG: its worst round trip is the longest
the loop left it waiting. The same PINGs run for ``--seconds`` before the attack (the quiet
figure). Printed: the healthy client's worst and 99th-percentile PONG latency, quiet and under
attack, and how long the attacker waited for its last ACK_RESPONSE.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "broker"))

from broker_rawclient import RawClient, make_entry  # noqa: E402

from bench.brokers import start_horae  # noqa: E402
from protocol import commands as C  # noqa: E402
from protocol import pulsar_pb as pb  # noqa: E402

T = pb.BaseCommand
PING_INTERVAL_S = 0.005
TOPIC = "persistent://public/default/loop-stall"


def pinger(url: str, stop: threading.Event, latencies: list[float]) -> None:
    """PING / PONG round trips until *stop* is set (the PONG waited for, however long)."""
    with RawClient(url, timeout=120.0) as client:
        client.handshake()
        while not stop.is_set():
            started = time.perf_counter()
            client.send(C.encode_ping())
            while client.recv_command(skip_pings=False).type != T.PONG:
                pass
            latencies.append(time.perf_counter() - started)
            time.sleep(PING_INTERVAL_S)


def ping_phase(url: str, seconds: float, during: threading.Event | None = None) -> list[float]:
    """Round trips measured for *seconds*, or until *during* is set when given."""
    stop = threading.Event()
    latencies: list[float] = []
    thread = threading.Thread(target=pinger, args=(url, stop, latencies), daemon=True)
    thread.start()
    if during is None:
        time.sleep(seconds)
    else:
        during.wait(600.0)
    stop.set()
    thread.join(150.0)
    return latencies


def attack(url: str, frames: int, ids: int, started: threading.Event, done: threading.Event,
           result: dict[str, float]) -> None:
    with RawClient(url, timeout=300.0) as client:
        client.handshake()
        assert client.create_producer(TOPIC, 1).type == T.PRODUCER_SUCCESS
        receipt = None
        for seq in range(10):
            client.send(C.encode_send(1, seq, make_entry(b"x", sequence_id=seq)))
            receipt = client.recv_command().send_receipt
        assert receipt is not None
        ledger = receipt.message_id.ledgerId
        answer = client.request(C.encode_subscribe(TOPIC, "stall", 1, 1, 100))
        assert answer.type == T.SUCCESS, answer
        # ids of a lower ledger: each is below the last entry, so it is applied, not skipped
        frame = [C.encode_ack(1, [(max(0, ledger - 1), entry) for entry in range(ids)],
                              request_id=1000 + index) for index in range(frames)]
        started.set()
        time.sleep(0.2)  # the healthy client is pinging
        begin = time.perf_counter()
        client.send(b"".join(frame))
        answered = 0
        while answered < frames:
            if client.recv_command().type == T.ACK_RESPONSE:
                answered += 1
        result["acks_s"] = time.perf_counter() - begin
        result["frame_bytes"] = len(frame[0])
    done.set()


def summary(latencies: list[float]) -> str:
    if not latencies:
        return "no round trip"
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (f"worst {max(ordered) * 1e3:8.1f} ms  p99 {p99 * 1e3:7.1f} ms  "
            f"median {statistics.median(ordered) * 1e3:5.2f} ms  ({len(ordered)} pings)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--frames", type=int, default=3, help="ACK frames the attacker sends")
    parser.add_argument("--ids", type=int, default=400_000, help="message ids per ACK frame")
    parser.add_argument("--seconds", type=float, default=2.0, help="quiet pinging before")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, start_horae(pathlib.Path(tmp)) as broker:
        quiet = ping_phase(broker.url, args.seconds)
        started, done = threading.Event(), threading.Event()
        result: dict[str, float] = {}
        attacker = threading.Thread(target=attack, args=(broker.url, args.frames, args.ids,
                                                         started, done, result), daemon=True)
        attacker.start()
        started.wait(60.0)
        loud = ping_phase(broker.url, 0.0, during=done)
        attacker.join(60.0)
    print(f"attack: {args.frames} ACK frames x {args.ids:,} ids "
          f"({result.get('frame_bytes', 0) / 2**20:.1f} MiB each)")
    print(f"healthy PING, quiet:        {summary(quiet)}")
    print(f"healthy PING, under attack: {summary(loud)}")
    print(f"attacker's last ACK_RESPONSE after {result.get('acks_s', float('nan')):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
