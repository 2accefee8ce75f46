"""A lone send's receipt (the drain's shortcut) equals what a drain's Answers make of it."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.metrics.rates import PUBLISH_LATENCY_BUCKETS_MS
from broker.topics.dedup_state import SequenceState
from broker.topics.publish_answers import Answers, lone_receipt
from broker.topics.publish_records import PublishRun
from protocol.errors import RequestError


class _Producer:
    def __init__(self, producer_id: int) -> None:
        self.producer_id = producer_id
        self.seq_state = SequenceState("p")
        self.durable = 0

    @property
    def blocking(self) -> RequestError | None:
        return None

    def fail_behind(self, error: RequestError, *, reload_topic: bool) -> None:
        raise AssertionError("nothing fails here")

    def run_durable(self) -> None:
        self.durable += 1

    def run_failed(self, failure: Any, first_failure: bool) -> None:
        raise AssertionError("nothing fails here")


def _state(producer: _Producer) -> tuple[object, ...]:
    s = producer.seq_state
    return s.persisted, s.floor, list(s.window), list(s.stored.bounds)


@settings(max_examples=200, deadline=None)
@given(producer_id=st.integers(0, 2**40), seq=st.integers(0, 2**40), extra=st.integers(0, 3),
       chunk=st.booleans(), highest=st.integers(0, 2**40), ledger_id=st.integers(0, 2**40),
       entry_id=st.integers(0, 2**40), latency_s=st.floats(0, 100), earlier=st.integers(0, 3))
def test_the_lone_receipt_equals_the_drains_answer(
        producer_id: int, seq: int, extra: int, chunk: bool, highest: int, ledger_id: int,
        entry_id: int, latency_s: float, earlier: int) -> None:
    producers = (_Producer(producer_id), _Producer(producer_id))
    buckets = ([0] * (len(PUBLISH_LATENCY_BUCKETS_MS) + 1),
               [0] * (len(PUBLISH_LATENCY_BUCKETS_MS) + 1))
    runs = []
    for producer in producers:
        for i in range(earlier):   # keys recorded before, some above this send's
            producer.seq_state.record_one(seq - 2 + 2 * i, seq - 2 + 2 * i, 9, i)
        run = PublishRun(producer, 10.0)
        run.add(seq, highest, None if chunk else seq + extra, 1, 1024)
        run.entries_durable(ledger_id, entry_id, 1)
        runs.append(run)
    answers = Answers(producers[0], 10.0 + latency_s, buckets[0])
    assert answers.run(runs[0])
    data, latency_ms = lone_receipt(producers[1], runs[1], 10.0 + latency_s, buckets[1])
    assert data == answers.data()
    assert latency_ms == answers.latency_sum
    assert buckets[0] == buckets[1]
    assert _state(producers[0]) == _state(producers[1])
