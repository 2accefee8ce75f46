"""A fault inside one connection's handling: that connection is closed (as Pulsar's channel is
on an unexpected exception), nothing is answered for it, the client's reconnect re-sends, and
every other connection goes on as if nothing happened."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pulsar
import pytest
from conftest import make_client

from broker.topics.producer import Producer


def test_a_fault_while_handling_sends_closes_that_connection_only(
        broker_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    broker = broker_factory()
    faulty_topic = "persistent://public/default/handler-fault"
    calm_topic = "persistent://public/default/handler-calm"
    original = Producer.on_sends
    planted = threading.Event()   # set once the planted faults are used up
    faults_left = [2]

    def on_sends(self: Any, sends: list[Any]) -> None:
        if str(self.topic.name) == faulty_topic and faults_left[0] > 0:
            faults_left[0] -= 1
            if faults_left[0] == 0:
                planted.set()
            raise RuntimeError("planted fault")
        original(self, sends)

    calm_client = make_client(broker.service_url)
    faulty_client = make_client(broker.service_url)
    try:
        calm = calm_client.create_producer(calm_topic, batching_enabled=False)
        calm_reader = calm_client.subscribe(calm_topic, "s")
        faulty = faulty_client.create_producer(faulty_topic, batching_enabled=False,
                                               send_timeout_millis=30_000)
        monkeypatch.setattr(Producer, "on_sends", on_sends)

        ids = faulty.send(b"after-faults")   # two connections closed under it, then answered
        assert planted.is_set()
        assert ids.entry_id() == 0
        # the other client's connection never noticed
        for i in range(5):
            calm.send(b"calm-%d" % i)
        got = [calm_reader.receive(10_000).data() for _ in range(5)]
        assert got == [b"calm-%d" % i for i in range(5)]

        reader = faulty_client.subscribe(faulty_topic, "check",
                                         initial_position=pulsar.InitialPosition.Earliest)
        message = reader.receive(10_000)
        assert message.data() == b"after-faults"   # stored once, whatever the retries
        with pytest.raises(Exception, match=r"(?i)timeout"):
            reader.receive(300)
    finally:
        faulty_client.close()
        calm_client.close()

