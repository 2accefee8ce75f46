"""brokerDeduplicationMaxNumberOfProducers bounds the producer names deduplication keeps per
topic, in memory and in the pulsar.dedup cursor: a peer cycling through producer names evicts
the least recently active idle ones (counted in a metric), never a connected producer's."""

from __future__ import annotations

import pathlib
import urllib.request
from typing import Any

import pytest
from broker_rawclient import RawClient, make_entry
from conftest import find_free_port, make_client

from broker.topics.dedup import DEDUP_CURSOR
from protocol import commands as C
from protocol import pulsar_pb as pb

T = pb.BaseCommand
CAP = 20
PEER_NAMES = 200
EVICTED_METRIC = "pulsar_broker_topic_deduplication_producers_evicted_total"


def _evicted_in_metrics(web_url: str, topic: str) -> float:
    with urllib.request.urlopen(web_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(EVICTED_METRIC) and f'topic="{topic}"' in line]
    assert len(values) == 1, f"{EVICTED_METRIC} of {topic} not exported once"
    return values[0]


@pytest.mark.timeout(120)
def test_a_peer_cycling_producer_names_is_capped_and_a_connected_producer_keeps_its_state(
        broker_factory: Any, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "cap"
    port = find_free_port()
    config = {"brokerDeduplicationMaxNumberOfProducers": CAP}
    topic = "persistent://public/default/dedup-cap"
    handle = broker_factory(data_dir=data, broker_port=port, config_overrides=config)
    c = make_client(handle.service_url)
    healthy = c.create_producer(topic, producer_name="healthy", batching_enabled=False)
    healthy_ids = [healthy.send(b"healthy-0")]

    def dedup_figures() -> tuple[int, int, bool, int]:
        dedup = handle.service.topics[topic].dedup
        assert dedup.cursor is not None
        return (len(dedup.states), len(dedup.cursor.properties), "healthy" in dedup.states,
                dedup.evicted_producers)

    def snapshot_now() -> None:
        dedup = handle.service.topics[topic].dedup
        dedup.snapshot(dedup.topic.loop.time())

    most_states = most_properties = 0
    with RawClient(handle.service_url) as raw:
        raw.handshake()
        for i in range(PEER_NAMES):
            name = f"peer-{i}"
            created = raw.request(C.encode_producer(topic, 1, next(raw.request_ids), name, 0))
            assert created.type == T.PRODUCER_SUCCESS, created
            sent = raw.request(C.encode_send(1, 0, make_entry(b"p", producer_name=name)))
            assert sent.type == T.SEND_RECEIPT
            if i == PEER_NAMES - 15:
                # the periodic snapshot while this name is attached and the few before it
                # have gone idle since the last one (any snapshot may fall there): the order
                # of activity it keeps is still the order the names were used in
                handle.call(snapshot_now)
            closed = raw.request(C.encode_close_producer(1, next(raw.request_ids)))
            assert closed.type == T.SUCCESS
            if i % 10 == 0:
                healthy_ids.append(healthy.send(b"healthy-%d" % (i // 10 + 1)))
                states, properties, kept, _ = handle.call(dedup_figures)
                assert kept
                most_states = max(most_states, states)
                most_properties = max(most_properties, properties)
    states, properties, kept, evicted = handle.call(dedup_figures)
    assert kept and states <= CAP and most_states <= CAP and most_properties <= CAP
    assert evicted == PEER_NAMES + 1 - CAP   # the healthy name was never a victim
    # The most recently active names are the ones kept.
    kept_names = handle.call(lambda: set(handle.service.topics[topic].dedup.states))
    assert kept_names == {"healthy"} | {f"peer-{i}" for i in range(PEER_NAMES - CAP + 1,
                                                                    PEER_NAMES)}
    assert _evicted_in_metrics(handle.web_url, topic) == evicted
    last = len(healthy_ids) - 1
    healthy.close()
    c.close()
    handle.stop()   # the last snapshot goes to disk

    again = broker_factory(data_dir=data, broker_port=port, config_overrides=config)
    with RawClient(again.service_url) as raw:
        raw.handshake()
        created = raw.request(C.encode_producer(topic, 1, next(raw.request_ids), "healthy", 0))
        assert created.producer_success.last_sequence_id == last
        resent = raw.request(C.encode_send(1, last, make_entry(
            b"healthy-%d" % last, sequence_id=last, producer_name="healthy")))
    persisted = again.call(
        lambda: dict(again.service.topics[topic].ledger.cursors[DEDUP_CURSOR].properties))
    assert len(persisted) <= CAP and "healthy" in persisted
    receipt = resent.send_receipt.message_id
    assert (receipt.ledgerId, receipt.entryId) == (healthy_ids[-1].ledger_id(),
                                                   healthy_ids[-1].entry_id())


def test_a_refused_producer_does_not_hold_its_names_sequence_state(broker: Any) -> None:
    topic = "persistent://public/default/dedup-refused"
    with RawClient(broker.service_url) as owner, RawClient(broker.service_url) as peer:
        owner.handshake()
        peer.handshake()
        assert owner.create_producer(topic, 1, name="taken").type == T.PRODUCER_SUCCESS
        refused = [peer.create_producer(topic, i, name="taken") for i in range(1, 51)]
        incarnations = broker.call(
            lambda: len(broker.service.topics[topic].dedup.states["taken"].producers))
    assert all(r.type == T.ERROR and r.error.error == pb.ProducerBusy for r in refused)
    assert incarnations == 1
