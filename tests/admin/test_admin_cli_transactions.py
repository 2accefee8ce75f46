"""``horae-admin transactions`` (pulsar-admin's names and flags), end to end against a broker
with the coordinator: every command prints what its REST route answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from cli.admin.main import build_parser, main
from cli.admin.transactions import COMMANDS
from protocol import commands as C
from protocol import pulsar_pb as pb
from tests.admin.conftest import http
from tests.admin.test_admin_transactions import (
    TOPIC,
    TOPIC_PATH,
    TTL_MS,
    TX,
    Conn,
    receive,
    subscribe,
)

T = pb.BaseCommand


@pytest.fixture
def txn_broker(broker_factory: Any) -> Any:
    return broker_factory(config_overrides={"transactionCoordinatorEnabled": True})


@pytest.fixture
def conn(txn_broker: Any) -> Iterator[Conn]:
    c = Conn(txn_broker.service_url)
    yield c
    c.close()


def _run(capsys: pytest.CaptureFixture[str], broker: Any, *argv: str) -> tuple[int, Any, str]:
    code = main(["--admin-url", broker.web_url, "transactions", *argv])
    captured = capsys.readouterr()
    out = captured.out.strip()
    return code, (json.loads(out) if out else None), captured.err


def test_every_transaction_command_prints_its_routes_answer(
        txn_broker: Any, conn: Conn, capsys: pytest.CaptureFixture[str]) -> None:
    assert conn.raw.request(C.encode_producer(TOPIC, 1, 7, None, 0)).type == T.PRODUCER_SUCCESS
    subscribe(conn.cons, TOPIC, "s", 1, sub_type=pb.CommandSubscribe.Shared)
    conn.tc.send(1, 0, b"plain")
    _, plain = receive(conn.cons)
    txn = conn.tc.new_txn(TTL_MS)
    assert not conn.tc.add_partition(txn, TOPIC).HasField("error")
    assert not conn.tc.add_subscription(txn, TOPIC, "s").HasField("error")
    conn.tc.send(1, 1, b"in-txn", txn)
    assert not conn.acks.ack(1, [plain], txn).HasField("error")
    most, least = (str(v) for v in txn)
    short = "txn-admin"   # pulsar-admin's short topic names work too
    cases: list[tuple[list[str], str]] = [
        (["coordinator-stats"], "coordinatorStats"),
        (["coordinator-stats", "-c", "0"], "coordinatorStats?coordinatorId=0"),
        (["coordinator-internal-stats", "-c", "0"], "coordinatorInternalStats/0"),
        (["transaction-metadata", "-m", most, "-l", least], f"transactionMetadata/{most}/{least}"),
        (["slow-transactions", "-t", "1s"], "slowTransactions/1000"),
        (["slow-transactions", "--time", "1s", "-c", "0"],
         "slowTransactions/1000?coordinatorId=0"),
        (["transaction-buffer-stats", "-t", short], f"transactionBufferStats/{TOPIC_PATH}"),
        (["transaction-buffer-stats", "-t", TOPIC, "-l"],
         f"transactionBufferStats/{TOPIC_PATH}?lowWaterMarks=true"),
        (["transaction-buffer-internal-stats", "-t", TOPIC],
         f"transactionBufferInternalStats/{TOPIC_PATH}"),
        (["transaction-in-buffer-stats", "-t", TOPIC, "-m", most, "-l", least],
         f"transactionInBufferStats/{TOPIC_PATH}/{most}/{least}"),
        (["pending-ack-stats", "-t", TOPIC, "-s", "s"], f"pendingAckStats/{TOPIC_PATH}/s"),
        (["pending-ack-stats", "-t", TOPIC, "--sub-name", "s", "--low-water-mark"],
         f"pendingAckStats/{TOPIC_PATH}/s?lowWaterMarks=true"),
        (["pending-ack-internal-stats", "-t", TOPIC, "-s", "s"],
         f"pendingAckInternalStats/{TOPIC_PATH}/s"),
        (["transaction-in-pending-ack-stats", "-t", TOPIC, "-s", "s", "-m", most, "-l", least],
         f"transactionInPendingAckStats/{TOPIC_PATH}/s/{most}/{least}"),
        (["check-position-in-pending-ack-state", "-t", TOPIC, "-s", "s", "-l", str(plain[0]),
          "-e", str(plain[1])], f"positionStatsInPendingAck/{TOPIC_PATH}/s/{plain[0]}/{plain[1]}"),
        (["check-position-in-pending-ack-state", "-t", TOPIC, "-s", "s", "--ledgerId",
          str(plain[0]), "--entryId", str(plain[1]), "-b", "0"],
         f"positionStatsInPendingAck/{TOPIC_PATH}/s/{plain[0]}/{plain[1]}?batchIndex=0"),
    ]
    seen = set()
    for argv, path in cases:
        code, printed, err = _run(capsys, txn_broker, *argv)
        assert code == 0, (argv, err)
        assert printed == http(txn_broker.web_url, "GET", f"{TX}/{path}").body, argv
        seen.add(argv[0])
    code, _, err = _run(capsys, txn_broker, "scale-transactionCoordinators", "-r", "1")
    assert code == 1 and "Number of transaction coordinators should be more" in err
    seen.add("scale-transactionCoordinators")
    code, printed, err = _run(capsys, txn_broker, "abort-transaction", "-m", most, "-l", least)
    assert (code, printed) == (0, None), err
    assert http(txn_broker.web_url, "GET", f"{TX}/transactionMetadata/{most}/{least}").body[
        "status"] == "ABORTED"
    seen.add("abort-transaction")
    assert seen == {name for _, name in COMMANDS}
    code, _, err = _run(capsys, txn_broker, "transaction-metadata", "-m", "0", "-l", "99999")
    assert code == 1 and "not found" in err


def test_each_transaction_command_has_a_help_line_and_checks_its_flags(
        capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    group = next(a for a in parser._subparsers._group_actions   # type: ignore[union-attr]
                 ).choices["transactions"]
    commands = group._subparsers._group_actions[0]   # type: ignore[union-attr]
    helps = {c.dest: c.help for c in commands._choices_actions}
    assert set(helps) == {name for _, name in COMMANDS}
    assert all(helps.values()), helps
    with pytest.raises(SystemExit) as usage:   # argparse: -l is required
        main(["transactions", "transaction-metadata", "-m", "0"])
    assert usage.value.code == 2 and "least-sig-bits" in capsys.readouterr().err
    assert main(["transactions", "slow-transactions", "-t", "soon"]) == 2
    assert "invalid duration" in capsys.readouterr().err
