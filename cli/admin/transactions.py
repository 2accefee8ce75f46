"""``horae-admin transactions ...``: pulsar-admin's transaction commands (on /admin/v3/transactions).

Theory of operation: :func:`add_parsers` declares the commands, with pulsar-admin's names and
flags, on the ``transactions`` group of :mod:`cli.admin.main`; :data:`COMMANDS` builds each
one's request, which the CLI sends and prints like any other command. Kept apart from
``main.py`` so the group grows without touching the others.

==============================================================  ===================================
``coordinator-stats [-c ID]``                                   ``GET coordinatorStats[?coordinatorId]``
``coordinator-internal-stats -c ID [-m]``                       ``GET coordinatorInternalStats/{id}``
``transaction-metadata -m MOST -l LEAST``                       ``GET transactionMetadata/{m}/{l}``
``slow-transactions -t TIME [-c ID]``                           ``GET slowTransactions/{ms}``
``transaction-buffer-stats -t TOPIC [-l]``                      ``GET transactionBufferStats/...``
``transaction-buffer-internal-stats -t TOPIC [-m]``             ``GET transactionBufferInternalStats/...``
``transaction-in-buffer-stats -t TOPIC -m MOST -l LEAST``       ``GET transactionInBufferStats/...``
``pending-ack-stats -t TOPIC -s SUB [-l]``                      ``GET pendingAckStats/...``
``pending-ack-internal-stats -t TOPIC -s SUB [-m]``             ``GET pendingAckInternalStats/...``
``transaction-in-pending-ack-stats -t TOPIC -s SUB -m -l``      ``GET transactionInPendingAckStats/...``
``check-position-in-pending-ack-state -t TOPIC -s SUB           ``GET positionStatsInPendingAck/...``
-l LEDGER -e ENTRY [-b INDEX]``
``scale-transactionCoordinators -r N``                          ``POST transactionCoordinator/replicas``
``abort-transaction -m MOST -l LEAST``                          ``POST abortTransaction/{m}/{l}``
==============================================================  ===================================

``slow-transactions -t`` takes a duration as pulsar-admin does (``1s``, ``10m``, ``5h``; a
bare number is seconds).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from cli.admin.args import parse_duration_ms, q, topic_path
from cli.admin.rest import Request

__all__ = ["COMMANDS", "add_parsers"]

TX = "/admin/v3/transactions"
GROUP = "transactions"


def _get(path: str, **query: object) -> Request:
    given = "&".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                     for k, v in query.items() if v is not None and v is not False)
    return Request("GET", f"{TX}/{path}" + (f"?{given}" if given else ""))


def _topic_sub(a: argparse.Namespace) -> str:
    return f"{topic_path(a.topic)}/{q(a.sub_name)}"


def _coordinator_stats(a: argparse.Namespace) -> Request:
    return _get("coordinatorStats", coordinatorId=a.coordinator_id)


def _slow(a: argparse.Namespace) -> Request:
    return _get(f"slowTransactions/{parse_duration_ms(a.time)}", coordinatorId=a.coordinator_id)


def _position(a: argparse.Namespace) -> Request:
    return _get(f"positionStatsInPendingAck/{_topic_sub(a)}/{a.ledger_id}/{a.entry_id}",
                batchIndex=a.batch_index)


COMMANDS: dict[tuple[str, str], Callable[[argparse.Namespace], Request]] = {
    (GROUP, "coordinator-stats"): _coordinator_stats,
    (GROUP, "coordinator-internal-stats"): lambda a: _get(
        f"coordinatorInternalStats/{a.coordinator_id}", metadata=a.metadata),
    (GROUP, "transaction-metadata"): lambda a: _get(
        f"transactionMetadata/{a.most_sig_bits}/{a.least_sig_bits}"),
    (GROUP, "slow-transactions"): _slow,
    (GROUP, "transaction-buffer-stats"): lambda a: _get(
        f"transactionBufferStats/{topic_path(a.topic)}", lowWaterMarks=a.low_water_mark),
    (GROUP, "transaction-buffer-internal-stats"): lambda a: _get(
        f"transactionBufferInternalStats/{topic_path(a.topic)}", metadata=a.metadata),
    (GROUP, "transaction-in-buffer-stats"): lambda a: _get(
        f"transactionInBufferStats/{topic_path(a.topic)}/{a.most_sig_bits}/{a.least_sig_bits}"),
    (GROUP, "pending-ack-stats"): lambda a: _get(
        f"pendingAckStats/{_topic_sub(a)}", lowWaterMarks=a.low_water_mark),
    (GROUP, "pending-ack-internal-stats"): lambda a: _get(
        f"pendingAckInternalStats/{_topic_sub(a)}", metadata=a.metadata),
    (GROUP, "transaction-in-pending-ack-stats"): lambda a: _get(
        f"transactionInPendingAckStats/{_topic_sub(a)}/{a.most_sig_bits}/{a.least_sig_bits}"),
    (GROUP, "check-position-in-pending-ack-state"): _position,
    (GROUP, "scale-transactionCoordinators"): lambda a: Request(
        "POST", f"{TX}/transactionCoordinator/replicas", a.replicas, has_body=True),
    (GROUP, "abort-transaction"): lambda a: Request(
        "POST", f"{TX}/abortTransaction/{a.most_sig_bits}/{a.least_sig_bits}"),
}


def add_parsers(group: Any) -> None:
    """Declare the commands on the ``transactions`` sub-parsers (argparse's _SubParsersAction)."""

    def command(name: str, help_: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = group.add_parser(name, help=help_)
        return parser

    def txn_id(p: argparse.ArgumentParser) -> None:
        p.add_argument("-m", "--most-sig-bits", type=int, required=True, help="the most sig bits")
        p.add_argument("-l", "--least-sig-bits", type=int, required=True,
                       help="the least sig bits")

    def topic(p: argparse.ArgumentParser, sub: bool = False) -> None:
        p.add_argument("-t", "--topic", required=True, help="the topic")
        if sub:
            p.add_argument("-s", "--sub-name", required=True, help="the subscription name")

    def metadata(p: argparse.ArgumentParser) -> None:
        p.add_argument("-m", "--metadata", action="store_true",
                       help="flag to include ledger metadata")

    p = command("coordinator-stats", "transaction coordinator stats")
    p.add_argument("-c", "--coordinator-id", type=int, help="the coordinator id")
    p = command("coordinator-internal-stats", "the coordinator's transaction log ledger")
    p.add_argument("-c", "--coordinator-id", type=int, required=True, help="the coordinator id")
    metadata(p)
    txn_id(command("transaction-metadata", "a transaction's status, partitions, subscriptions"))
    p = command("slow-transactions", "open transactions with a timeout longer than --time")
    p.add_argument("-c", "--coordinator-id", type=int, help="the coordinator id")
    p.add_argument("-t", "--time", required=True,
                   help="the transaction timeout time (eg: 1s, 10s, 1m, 5h, 3d)")
    p = command("transaction-buffer-stats", "a topic's transaction buffer stats")
    topic(p)
    p.add_argument("-l", "--low-water-mark", action="store_true",
                   help="include the lowWaterMarks the transaction buffer keeps")
    p = command("transaction-buffer-internal-stats", "a topic's transaction buffer snapshot")
    topic(p)
    metadata(p)
    p = command("transaction-in-buffer-stats", "a transaction on a topic's buffer")
    topic(p)
    txn_id(p)
    p = command("pending-ack-stats", "a subscription's transaction pending-ack stats")
    topic(p, sub=True)
    p.add_argument("-l", "--low-water-mark", action="store_true",
                   help="include the lowWaterMarks the pending-ack store keeps")
    p = command("pending-ack-internal-stats", "the ledger holding a subscription's pending acks")
    topic(p, sub=True)
    metadata(p)
    p = command("transaction-in-pending-ack-stats", "a transaction on a subscription's pending acks")
    topic(p, sub=True)
    txn_id(p)
    p = command("check-position-in-pending-ack-state",
                "whether a position is pending-acked in a transaction")
    topic(p, sub=True)
    p.add_argument("-l", "--ledgerId", dest="ledger_id", type=int, required=True,
                   help="the ledger ID of the position")
    p.add_argument("-e", "--entryId", dest="entry_id", type=int, required=True,
                   help="the entry ID of the position")
    p.add_argument("-b", "--bacthIndex", "--batchIndex", dest="batch_index", type=int,
                   help="the batch index of the position")
    txn_id(command("abort-transaction", "abort a transaction"))
    p = command("scale-transactionCoordinators", "set the number of transaction coordinators")
    p.add_argument("-r", "--replicas", type=int, required=True,
                   help="the scale of the transaction coordinators")
