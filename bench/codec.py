"""Codec throughput on one core: SEND frames decoded, MESSAGE and SEND_RECEIPT frames encoded.

Usage::

    .venv/bin/python bench/codec.py [--seconds 2.0] [--chunk 65536]

SEND frames carry a 1 KiB payload and a CRC32C that the decoder verifies; they are fed in
``--chunk``-byte slices, as a transport's ``data_received`` would. Targets: >= 300,000
SEND frames decoded per second and >= 300,000 SEND_RECEIPTs encoded per second. MESSAGE has no
target; it is printed with and without a precomputed ``entry_crc``, and so is
``metadata.parse_entry``, which the broker runs on every publish. Each figure is the best of
several rounds, measured with ``time.perf_counter``.

The second block compares the protobuf-free publish path of ``protocol/send_path.py`` with the
protobuf one: SEND decoded and its fields read (``FrameDecoder.receive_frames`` -> ``SendFrame``
vs ``next_frame`` -> ``pb.BaseCommand``), and a group commit's receipts encoded into one
``bytes`` (``encode_send_receipts`` vs one ``encode_send_receipt`` per receipt vs protobuf).

The third block compares the publish path's metadata check, ``check_publish_metadata`` (one upb
parse and the field reads) with ``metadata_scan.scan_publish_metadata`` (no protobuf), on the
layouts the official client writes (a batch of 100 carries a real batch payload of 100 messages
of 10 bytes).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crc32c import crc32c

from protocol import commands, hot_commands
from protocol import pulsar_pb as pb
from protocol.frames import NEED_DATA, FrameDecoder
from protocol.metadata import (
    check_publish_metadata,
    encode_batch_payload,
    encode_entry,
    parse_entry,
)
from protocol.metadata_scan import scan_publish_metadata
from protocol.send_path import SendFrame, encode_send_receipts

TARGET_PER_S = 300_000
PAYLOAD = bytes(range(256)) * 4  # 1 KiB
# Short rounds (a few ms): on a shared machine the best round is the one no other process
# interrupted, which is the figure of one core.
FRAMES_PER_ROUND = 2_000


def make_entry(sequence_id: int) -> bytes:
    md = pb.MessageMetadata(producer_name="standalone-0-1", sequence_id=sequence_id, publish_time=1_700_000_000_000)
    return encode_entry(md, PAYLOAD)


class Rate:
    """Best wall-clock rate of any round (perf_counter) and the mean CPU-time rate over all
    rounds (process_time, which excludes time spent descheduled)."""

    def __init__(self, best_wall: float, cpu_mean: float) -> None:
        self.best_wall = best_wall
        self.cpu_mean = cpu_mean


def best_rate(run_round: Callable[[], int], seconds: float) -> Rate:
    """Run rounds for ``seconds`` (at least 5 rounds)."""
    best = 0.0
    total_operations = 0
    cpu_start = time.process_time()
    deadline = time.perf_counter() + seconds
    rounds = 0
    while rounds < 5 or time.perf_counter() < deadline:
        start = time.perf_counter()
        operations = run_round()
        elapsed = time.perf_counter() - start
        best = max(best, operations / elapsed)
        total_operations += operations
        rounds += 1
    cpu = time.process_time() - cpu_start
    return Rate(best, total_operations / cpu if cpu > 0 else float("inf"))


def bench_send_decode(seconds: float, chunk: int) -> Rate:
    stream = b"".join(commands.encode_send(1, seq, make_entry(seq)) for seq in range(FRAMES_PER_ROUND))
    chunks = [stream[i : i + chunk] for i in range(0, len(stream), chunk)]

    def run_round() -> int:
        decoder = FrameDecoder()
        receive, next_frame = decoder.receive_data, decoder.next_frame
        decoded = valid = 0
        for piece in chunks:
            receive(piece)
            while (frame := next_frame()) is not NEED_DATA:
                decoded += 1
                valid += frame.checksum_valid is True
        assert decoded == valid == FRAMES_PER_ROUND, (decoded, valid)
        return decoded

    return best_rate(run_round, seconds)


def bench_send_receive_frames(seconds: float, chunk: int, *, send_frames: bool) -> Rate:
    """The same stream through ``receive_frames``: one call per chunk; with ``send_frames`` the
    SENDs come out as hand-parsed SendFrames (no protobuf object)."""
    stream = b"".join(commands.encode_send(1, seq, make_entry(seq)) for seq in range(FRAMES_PER_ROUND))
    chunks = [stream[i : i + chunk] for i in range(0, len(stream), chunk)]

    def run_round() -> int:
        decoder = FrameDecoder()
        receive = decoder.receive_frames
        decoded = valid = 0
        for piece in chunks:
            for frame in receive(piece, send_frames=send_frames):
                decoded += 1
                valid += frame.checksum_valid is True
        assert decoded == valid == FRAMES_PER_ROUND, (decoded, valid)
        return decoded

    return best_rate(run_round, seconds)


def bench_send_fields(seconds: float, chunk: int, *, fast: bool) -> Rate:
    """Decode and read what the broker reads of every SEND (producer id, sequence id,
    num_messages, highest sequence id, entry): pb path (next_frame) vs SendFrame."""
    stream = b"".join(commands.encode_send(1, seq, make_entry(seq)) for seq in range(FRAMES_PER_ROUND))
    chunks = [stream[i : i + chunk] for i in range(0, len(stream), chunk)]

    def run_pb() -> int:
        decoder = FrameDecoder()
        receive, next_frame = decoder.receive_data, decoder.next_frame
        total = 0
        for piece in chunks:
            receive(piece)
            while (frame := next_frame()) is not NEED_DATA:
                send = frame.command.send
                total += send.producer_id + send.num_messages + send.highest_sequence_id
                total += send.sequence_id >= 0 and frame.entry is not None
        return FRAMES_PER_ROUND

    def run_fast() -> int:
        decoder = FrameDecoder()
        receive = decoder.receive_frames
        total = 0
        for piece in chunks:
            for frame in receive(piece):
                assert type(frame) is SendFrame
                total += frame.producer_id + frame.num_messages + frame.highest_sequence_id
                total += frame.sequence_id >= 0 and frame.entry is not None
        return FRAMES_PER_ROUND

    return best_rate(run_fast if fast else run_pb, seconds)


def bench_receipts(seconds: float, how: str) -> Rate:
    """SEND_RECEIPTs of one group commit (FRAMES_PER_ROUND of one producer) into one bytes:
    ``bulk`` (encode_send_receipts), ``each`` (encode_send_receipt + join, today's broker) or
    ``pb`` (the protobuf-built reference + join)."""
    receipts = [(1_000_000 + i, 12, i, 1_000_000 + i) for i in range(FRAMES_PER_ROUND)]
    encode_one = hot_commands.reference_send_receipt if how == "pb" else commands.encode_send_receipt

    def run_bulk() -> int:
        encode_send_receipts(7, receipts)
        return FRAMES_PER_ROUND

    def run_each() -> int:
        b"".join([encode_one(7, s, ledger, e, h) for s, ledger, e, h in receipts])
        return FRAMES_PER_ROUND

    return best_rate(run_bulk if how == "bulk" else run_each, seconds)


def bench_ack_decode(seconds: float) -> Rate:
    """ACKs of 1,000 message ids (what grouped client acks look like), in acked ids per second."""
    ack = commands.encode_ack(3, [(12, i) for i in range(1000)])
    per_round = max(1, FRAMES_PER_ROUND // 1000)

    def run_round() -> int:
        decoder = FrameDecoder()
        for _ in range(per_round):
            decoder.receive_data(ack)
            decoder.next_frame()
        return per_round * 1000

    return best_rate(run_round, seconds)


def bench_send_receipt_encode(seconds: float) -> Rate:
    encode = commands.encode_send_receipt

    def run_round() -> int:
        # A long-lived producer: sequence ids past the 16384-entry varint table (3-4 bytes),
        # entry ids of a young ledger.
        for entry_id in range(FRAMES_PER_ROUND):
            seq = 1_000_000 + entry_id
            encode(7, seq, 12, entry_id, seq)
        return FRAMES_PER_ROUND

    return best_rate(run_round, seconds)


def bench_message_encode(seconds: float, *, known_crc: bool) -> Rate:
    entry = make_entry(1)
    crc = crc32c(entry) if known_crc else None
    encode = commands.encode_message

    def run_round() -> int:
        for entry_id in range(100_000, 100_000 + FRAMES_PER_ROUND):  # past the varint table
            encode(3, 12, entry_id, entry, entry_crc=crc)
        return FRAMES_PER_ROUND

    return best_rate(run_round, seconds)


def bench_parse_entry(seconds: float) -> Rate:
    entry = make_entry(1_000_000)

    def run_round() -> int:
        for _ in range(FRAMES_PER_ROUND):
            parse_entry(entry)
        return FRAMES_PER_ROUND

    return best_rate(run_round, seconds)


def batch_payload(count: int) -> bytes:
    """A batch payload as the C++ client writes it: per message ``[u32 size]``, a
    SingleMessageMetadata (payload_size, sequence_id) and 10 bytes of data."""
    singles = [(pb.SingleMessageMetadata(payload_size=10, sequence_id=1_000_000 + index), b"0123456789")
               for index in range(count)]
    return encode_batch_payload(singles)


METADATA_LAYOUTS: dict[str, dict[str, object]] = {
    "plain": {},
    "batch of 100": {"num_messages_in_batch": 100},
    "compressed batch": {"compression": pb.LZ4, "uncompressed_size": 65536,
                         "num_messages_in_batch": 100},
    "delayed": {"deliver_at_time": 1_700_000_060_000},
    "keyed": {"partition_key": "user-42"},
    "keyed batch": {"partition_key": "user-42", "num_messages_in_batch": 100},
    "2 properties": {"properties": [pb.KeyValue(key="k1", value="v1"),
                                    pb.KeyValue(key="trace", value="abcdef")]},
    "chunk": {"uuid": "standalone-0-1-1000000", "num_chunks_from_msg": 3,
              "total_chunk_msg_size": 12_000_000, "chunk_id": 1},
}


def bench_metadata_check(seconds: float, fields: dict[str, object], *, scan: bool) -> Rate:
    """The publish path's metadata check of one entry: upb (check_publish_metadata) or the
    protobuf-free scan (scan_publish_metadata), which must not decline."""
    md = pb.MessageMetadata(producer_name="standalone-0-1", sequence_id=1_000_000,
                            publish_time=1_700_000_000_000, **fields)  # type: ignore[arg-type]
    # a batch carries a real batch payload (uncompressed: the check may walk it)
    entry = encode_entry(md, batch_payload(md.num_messages_in_batch)
                         if md.HasField("num_messages_in_batch") and not md.compression else PAYLOAD)
    assert scan_publish_metadata(entry) is not None, fields
    check = scan_publish_metadata if scan else check_publish_metadata

    def run_round() -> int:
        for _ in range(FRAMES_PER_ROUND):
            check(entry)
        return FRAMES_PER_ROUND

    return best_rate(run_round, seconds)


def report(name: str, rate: Rate, target: int | None) -> None:
    ratio = f"  {rate.best_wall / target:5.2f}x target ({target:,}/s)" if target else ""
    print(f"{name:<46} {rate.best_wall:>11,.0f}/s{ratio}   [CPU-time mean {rate.cpu_mean:,.0f}/s]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=2.0, help="time per figure")
    parser.add_argument("--chunk", type=int, default=65536, help="bytes per receive_data call")
    args = parser.parse_args(argv)
    print(f"Python {sys.version.split()[0]}, protobuf upb, one core; best of rounds of {FRAMES_PER_ROUND:,}")
    decode = bench_send_decode(args.seconds, args.chunk)
    receipt = bench_send_receipt_encode(args.seconds)
    message = bench_message_encode(args.seconds, known_crc=False)
    message_crc = bench_message_encode(args.seconds, known_crc=True)
    report(f"SEND decode (1 KiB, CRC verified, {args.chunk} B chunks)", decode, TARGET_PER_S)
    report("SEND_RECEIPT encode", receipt, TARGET_PER_S)
    report("MESSAGE encode (1 KiB, CRC computed)", message, None)
    report("MESSAGE encode (1 KiB, entry_crc given)", message_crc, None)
    report("parse_entry (publish path, no target)", bench_parse_entry(args.seconds), None)
    report("ACK decode, 1,000 ids per ACK (ids/s)", bench_ack_decode(args.seconds), None)
    print("\nprotobuf-free publish path (protocol/send_path.py) vs the protobuf path:")
    pb_fields = bench_send_fields(args.seconds, args.chunk, fast=False)
    fast_fields = bench_send_fields(args.seconds, args.chunk, fast=True)
    all_pb = bench_send_receive_frames(args.seconds, args.chunk, send_frames=False)
    all_fast = bench_send_receive_frames(args.seconds, args.chunk, send_frames=True)
    report("SEND decode + field reads, next_frame (pb)", pb_fields, None)
    report("SEND decode + field reads, receive_frames", fast_fields, None)
    print(f"{'  ratio SendFrame / pb':<46} {fast_fields.best_wall / pb_fields.best_wall:11.2f}x")
    report("SEND decode, receive_frames(send_frames=False)", all_pb, None)
    report("SEND decode, receive_frames (SendFrame)", all_fast, None)
    print(f"{'  ratio vs next_frame loop (first line)':<46} {all_fast.best_wall / decode.best_wall:11.2f}x")
    rec_pb = bench_receipts(args.seconds, "pb")
    rec_each = bench_receipts(args.seconds, "each")
    rec_bulk = bench_receipts(args.seconds, "bulk")
    report("receipts of a group commit, pb-built + join", rec_pb, None)
    report("receipts of a group commit, per receipt + join", rec_each, None)
    report("receipts of a group commit, encode_send_receipts", rec_bulk, None)
    print(f"{'  ratio bulk / pb, bulk / per receipt':<46} {rec_bulk.best_wall / rec_pb.best_wall:11.2f}x"
          f" {rec_bulk.best_wall / rec_each.best_wall:6.2f}x")
    print("\npublish metadata check: check_publish_metadata (upb) vs scan_publish_metadata:")
    for layout, fields in METADATA_LAYOUTS.items():
        upb = bench_metadata_check(args.seconds / 4, fields, scan=False)
        scanned = bench_metadata_check(args.seconds / 4, fields, scan=True)
        print(f"  {layout:<20} upb {1e6 / upb.best_wall:5.2f} us  scan {1e6 / scanned.best_wall:5.2f} us"
              f"  ratio {scanned.best_wall / upb.best_wall:5.2f}x")
    return 0 if decode.best_wall >= TARGET_PER_S and receipt.best_wall >= TARGET_PER_S else 1


if __name__ == "__main__":
    sys.exit(main())
