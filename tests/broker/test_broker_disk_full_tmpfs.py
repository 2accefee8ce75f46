"""Disk full on a real, small file system: a 20 MiB tmpfs filled by the official client.

The store measures the real statvfs figures. Filling it past diskUsageThreshold must refuse the
producer (ProducerBlockedQuotaExceededException) without losing anything acknowledged;
consumers read and acknowledge everything; the broker's trimming frees the space; below
diskUsageLwmThreshold publishing resumes by itself. Skipped, with the reason, where tmpfs
cannot be mounted (not root, no CAP_SYS_ADMIN, a container without mount rights).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from conftest import make_client
from waiting import wait_until

from broker.embed import start_broker

PAYLOAD = 64 * 1024
MAX_SENDS = 400  # 25 MiB: more than the file system holds, so the watermark must stop it


@pytest.fixture
def small_tmpfs(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    mountpoint = tmp_path / "tmpfs"
    mountpoint.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (mount -t tmpfs -o size=20m)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mountpoint)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def _read_only(b: Any) -> bool:
    return bool(b.call(lambda: b.service.store.disk.read_only))


def test_full_tmpfs_refuses_publishing_keeps_consumers_and_resumes_after_trim(
        small_tmpfs: pathlib.Path) -> None:
    topic = "persistent://public/default/tmpfs-full"
    overrides = {"diskUsageThreshold": 0.6, "diskUsageLwmThreshold": 0.4,
                 "diskCheckInterval": 20, "managedLedgerMaxEntriesPerLedger": 20}
    with start_broker(data_dir=small_tmpfs / "data", config_overrides=overrides) as b:
        client = make_client(b.service_url)
        try:
            consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
            producer = client.create_producer(topic, batching_enabled=False,
                                              send_timeout_millis=20_000)
            acked: list[bytes] = []
            refused: Exception | None = None
            for i in range(MAX_SENDS):
                payload = i.to_bytes(4, "big") + bytes(PAYLOAD - 4)
                try:
                    producer.send(payload)
                except pulsar.ProducerBlockedQuotaExceededException as exc:
                    refused = exc
                    break
                acked.append(payload)
            assert refused is not None, "the producer was never told the disk is full"
            assert _read_only(b)
            assert len(acked) > 20  # several ledgers were written first
            assert b.call(lambda: b.service.publish_refusals.counts["disk"]) >= 1

            # Everything acknowledged is there and readable; acknowledging it lets the
            # trimmer delete the sealed ledgers, which frees the space.
            received: list[bytes] = []
            while len(received) < len(acked):
                msg = consumer.receive(timeout_millis=10_000)
                received.append(msg.data())
                consumer.acknowledge(msg)
            assert received == acked

            wait_until(lambda: not _read_only(b), timeout_s=30,
                       message="trimming brought usage below diskUsageLwmThreshold")
            producer.send(b"after")
            msg = consumer.receive(timeout_millis=10_000)
            assert msg.data() == b"after"
            consumer.acknowledge(msg)
        finally:
            client.close()
