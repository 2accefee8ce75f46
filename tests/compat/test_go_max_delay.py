"""The max-delay rejection as the Go client (pulsar-client-go v0.19.0) sees it.

``tests/compat/go_maxdelay`` is a small program on the official Go client: one client, a Shared
consumer, a producer whose message exceeds the max delay and a second producer. On
``NotAllowedError`` the Go client detaches that producer from the connection and keeps the
connection (``connection.handleSendError``); no SEND_ERROR code fails a single send in that
client, so the rejected send fails with the client's send timeout. What this pins: the
connection stays, the other producer and the consumer go on with no redelivery, the
rejection reaches the broker once, and the detached producer's later sends are not stored. Skips when ``go`` is missing.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
from typing import Any

import pytest

PROGRAM = pathlib.Path(__file__).resolve().parent / "go_maxdelay"
TOPIC = "persistent://public/default/go-max-delay"


@pytest.mark.skipif(shutil.which("go") is None, reason="the Go toolchain is not installed")
def test_go_client_rejection_disturbs_no_other_producer_or_consumer(
        broker_factory: Any, tmp_path: pathlib.Path) -> None:
    binary = tmp_path / "gomaxdelay"
    built = subprocess.run(["go", "build", "-o", str(binary), "."], cwd=PROGRAM,
                           capture_output=True, text=True, timeout=600, check=False)
    if built.returncode != 0 and "dial tcp" in built.stderr:
        pytest.skip(f"the Go module cache lacks the client and the proxy is unreachable: "
                    f"{built.stderr[-300:]}")
    assert built.returncode == 0, built.stderr
    handle = broker_factory(config_overrides={"delayedDeliveryMaxDelayInMillis": 1000})
    ran = subprocess.run([str(binary), handle.service_url, TOPIC], capture_output=True,
                         text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()

    async def read() -> tuple[int, int]:
        t = handle.service.topics[TOPIC]
        return int(t.meters.delayed_rejected_counter), int(t.ledger.number_of_entries)

    rejected, stored = handle.call(read)
    assert lines[0].startswith("rejected send: err=message send timeout"), lines
    assert lines[1] == "other producer after: err=<nil>", lines
    # The client stopped listening to that producer: its later sends fail on the client and
    # are refused by the broker (nothing the client reports as failed is stored).
    assert lines[2].startswith("rejected producer's next send: err=message send timeout"), lines
    assert sorted(lines[3:5]) == ['received "after" redelivery=0',
                                  'received "before" redelivery=0'], lines
    assert lines[5].startswith("receive: "), lines       # nothing else arrives
    assert (rejected, stored) == (1, 2)
