"""The entry-size meters of a topic (``pulsar_entry_size_le_*``, ``_count``, ``_sum``) count each
entry of a publish run in its own bucket, whether the run's entries share one bucket (counted at
once) or not, over the wire."""

from __future__ import annotations

import bisect
from typing import Any

from broker_rawclient import RawClient, make_entry

from broker.metrics.entry_size import ENTRY_SIZE_BUCKETS_BYTES
from protocol import commands as C
from protocol import pulsar_pb as pb

T = pb.BaseCommand
TOPIC = "persistent://public/default/entry-size-meters"


def test_runs_count_each_entry_in_its_bucket(broker: Any) -> None:
    payloads = [
        [100, 101, 102],                # one run, one bucket
        [10, 3000, 200, 70_000, 900],   # one run over several buckets
        [1500] * 40,                    # a long run of one size
        [5000],                         # a run of one
    ]
    expected = [0] * (len(ENTRY_SIZE_BUCKETS_BYTES) + 1)  # the last: overflow
    total = 0
    seq = 0
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        assert raw.create_producer(TOPIC, 1).type == T.PRODUCER_SUCCESS
        for sizes in payloads:
            frames = []
            for size in sizes:
                entry = make_entry(b"p" * size, sequence_id=seq)
                frames.append(C.encode_send(1, seq, entry))
                expected[bisect.bisect_left(ENTRY_SIZE_BUCKETS_BYTES, len(entry))] += 1
                total += len(entry)
                seq += 1
            raw.send(b"".join(frames))  # one write: the SENDs of one read form one run
            for sent in range(seq - len(sizes), seq):
                answer = raw.recv_command()
                assert answer.type == T.SEND_RECEIPT, answer
                assert answer.send_receipt.sequence_id == sent
    meters = broker.call(lambda: (lambda m: (list(m.entry_size_buckets), m.entry_size_sum_bytes,
                                             m.entries_added_counter))(
        broker.service.topics[TOPIC].meters))
    assert meters == (expected, total, seq)
    assert len([b for b in expected if b]) >= 4  # the runs did span several buckets
