"""Disk full end to end with the official client: the store turns read-only at
diskUsageThreshold, the producer is told (ProducerBlockedQuotaExceededException), consumers
keep reading and acknowledging, nothing acknowledged is lost, no topic reload, and publishing
resumes by itself below diskUsageLwmThreshold. Disk usage comes from an injected measure."""

from __future__ import annotations

import pathlib
import threading
from typing import Any

import pulsar
import pytest
from conftest import make_client
from waiting import wait_until

from broker.embed import start_broker
from broker.topics.storage_errors import StorageOp, storage_failure
from broker.topics.topic_state import TopicState
from protocol.errors import ServerError
from storage import errors as storage
from storage.diskusage import DiskSpace

TOTAL = 1_000_000


class FakeDisk:
    """A disk whose usage the test sets (read from the store's executor thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._usage = 0.5

    def set(self, usage: float) -> None:
        with self._lock:
            self._usage = usage

    def __call__(self, _path: pathlib.Path) -> DiskSpace:
        with self._lock:
            return DiskSpace(TOTAL, int(TOTAL * (1 - self._usage)))


def _read_only(b: Any) -> bool:
    return bool(b.call(lambda: b.service.store.disk.read_only))


def test_disk_full_refuses_producer_and_resumes_below_low_watermark(
        tmp_path: pathlib.Path) -> None:
    disk = FakeDisk()
    topic = "persistent://public/default/disk-full"
    with start_broker(data_dir=tmp_path / "b", measure_space=disk,
                      config_overrides={"diskCheckInterval": 20}) as b:
        client = make_client(b.service_url)
        try:
            consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
            producer = client.create_producer(topic, batching_enabled=False,
                                              send_timeout_millis=20_000)
            acked = [producer.send(f"before-{i}".encode()) for i in range(10)]
            assert len(acked) == 10
            topic_obj = b.call(lambda: b.service.topics[topic])

            disk.set(0.97)
            wait_until(lambda: _read_only(b), message="store read-only")
            with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
                producer.send(b"refused")
            refused = b.call(lambda: b.service.publish_refusals.counts["disk"])
            assert refused >= 2  # the refused SEND and the refused re-creation
            # A new producer is refused at creation as well.
            with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
                client.create_producer(topic, producer_name="late")

            # Consumers read and acknowledge everything acknowledged to the producer.
            got = []
            for _ in range(10):
                msg = consumer.receive(timeout_millis=10_000)
                got.append(msg.data().decode())
                consumer.acknowledge(msg)
            assert got == [f"before-{i}" for i in range(10)]

            # Below the low watermark publishing resumes by itself, same producer object.
            disk.set(0.85)
            wait_until(lambda: not _read_only(b), message="store writable again")
            after = producer.send(b"after")
            msg = consumer.receive(timeout_millis=10_000)
            assert msg.data() == b"after"
            assert msg.message_id().ledger_id() == after.ledger_id()
            consumer.acknowledge(msg)
            # The topic was never unloaded and reloaded.
            assert b.call(lambda: b.service.topics[topic]) is topic_obj
            assert b.call(lambda: topic_obj.state) is TopicState.OPEN
        finally:
            client.close()


def test_read_only_store_blocks_the_producer_instead_of_reloading_the_topic() -> None:
    failure = storage_failure(storage.StorageReadOnlyError("disk full"), StorageOp.PUBLISH)
    assert failure.block_producer
    assert not failure.reload_topic
    assert failure.error.code is ServerError.ProducerBlockedQuotaExceededException
    elsewhere = storage_failure(storage.StorageReadOnlyError("disk full"), StorageOp.ADMIN)
    assert not elsewhere.block_producer
    assert not elsewhere.reload_topic


def test_health_check_reports_read_only_storage_with_500_and_reason(
        tmp_path: pathlib.Path) -> None:
    import urllib.error
    import urllib.request

    disk = FakeDisk()
    with start_broker(data_dir=tmp_path / "b", measure_space=disk,
                      config_overrides={"diskCheckInterval": 20}) as b:
        url = f"{b.web_url}/admin/v2/brokers/health"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.read() == b"ok"
        disk.set(0.97)
        wait_until(lambda: _read_only(b), message="store read-only")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(url, timeout=10)
        assert info.value.code == 500
        assert "read-only" in info.value.read().decode()
        with urllib.request.urlopen(f"{b.web_url}/admin/v2/brokers/ready", timeout=10) as resp:
            assert resp.read() == b"ok"
        disk.set(0.5)
        wait_until(lambda: not _read_only(b), message="store writable again")
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.read() == b"ok"
