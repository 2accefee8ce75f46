"""Pulsar's v3 transactions admin REST: coordinator, transaction, buffer and pending-ack stats.

Theory of operation
-------------------
Pulsar's ``Transactions`` resource (``/admin/v3/transactions``, what ``pulsar-admin
transactions`` and ``PulsarAdmin.transactions()`` call), answered from the figures the
transaction components build on demand (:class:`broker.admin.service.AdminTransactions`):

==========================================================================  =====================
``GET coordinators``                                                        ``[{id, brokerServiceUrl}]``
``GET coordinatorStats[?coordinatorId=N]``                                  ``{"0": stats}``, or the stats of N
``GET transactionMetadata/{mostSigBits}/{leastSigBits}``                    TransactionMetadata
``GET slowTransactions/{timeout}[?coordinatorId=N]``                        ``{txnId: TransactionMetadata}``
``GET transactionBufferStats/{t}/{ns}/{topic}[?lowWaterMarks=true]``         TransactionBufferStats
``GET pendingAckStats/{t}/{ns}/{topic}/{sub}[?lowWaterMarks=true]``          TransactionPendingAckStats
``GET transactionInBufferStats/{t}/{ns}/{topic}/{most}/{least}``             ``{startPosition?, aborted}``
``GET transactionInPendingAckStats/{t}/{ns}/{topic}/{sub}/{most}/{least}``   ``{cumulativeAckPosition?}``
``GET transactionBufferInternalStats/{t}/{ns}/{topic}``                      ``{snapshotType, singleSnapshotInternalStats}``
``GET pendingAckInternalStats/{t}/{ns}/{topic}/{sub}``                       ``{pendingAckLogStats}``
``GET coordinatorInternalStats/{coordinatorId}``                            ``{transactionLogStats}``
``GET positionStatsInPendingAck/{t}/{ns}/{topic}/{sub}/{ledger}/{entry}``    ``{state}``
``POST transactionCoordinator/replicas`` (body: a number)                   406 / 405
``POST abortTransaction/{mostSigBits}/{leastSigBits}`` (super-user)          204
==========================================================================  =====================

Bodies have Pulsar's keys (Pulsar 4.0's answers, checked against a running standalone):
coordinator stats ``{state, leastSigBits, lowWaterMark, ongoingTxnSize, recoverStartTime,
recoverEndTime}``; TransactionMetadata ``{txnId: "(most,least)", status, openTimestamp,
timeoutAt, [owner], producedPartitions: {topic: {startPosition?, aborted}}, ackedPartitions:
{topic: {sub: {}}}}`` where ``timeoutAt`` is, as in Pulsar, the transaction's timeout in ms (not an
instant); buffer stats ``{state, maxReadPosition: "ledger:entry", lastSnapshotTimestamps,
[lowWaterMarks], ongoingTxnSize, recoverStartTime, recoverEndTime, totalAbortedTransactions}``;
pending-ack stats ``{state ("None" until a transaction acknowledged on it), [lowWaterMarks],
ongoingTxnSize, recoverStartTime, recoverEndTime}``. A slow transaction is, as in Pulsar's
``MLTransactionMetadataStore.getSlowTransactions``, an ongoing one whose timeout is longer than
``{timeout}`` ms.

Errors, Pulsar's: 503 "This Broker is not configured with transactionCoordinatorEnabled=true."
without the coordinator; 404 for a coordinator id other than 0 ("Transaction coordinator not
found! coordinator id : N", "Transaction coordinator with id N not found!" for metadata), an
unknown transaction ("The transaction with this txdID `(m,l)`not found "), a topic the broker
does not have ("Topic not found persistent://..."). Where Pulsar fails with a 500 (a
non-numeric id or timeout, an unknown subscription: a NullPointerException there), Horae
answers 400 "Invalid ..." and 404 "Subscription not found".

Internal stats: the buffer's snapshot (``snapshotType`` "Single") is a metadata-store record,
not a system topic's ledger, so its ``managedLedgerInternalStats`` carry only
``numberOfEntries`` (1), ``lastConfirmedEntry`` (the position the snapshot covers),
``lastLedgerCreatedTimestamp`` (when it was taken); 404 "Transaction buffer Snapshot for the
topic does not exist" before the first one (and, as Pulsar, without the coordinator). Pending
acknowledgements live in the transaction log, so ``pendingAckLogStats`` is that ledger's
(``__transactions/coordinator-log-0``), for every subscription; 503 "Pending ack have not init
success!" for a subscription no transaction acknowledged on (Pulsar initialises its store at
the first one). Scaling the coordinators: 406 with Pulsar's text for no more than one, 405
for more (one coordinator per broker here).

Differences, by design: an ended transaction is still answered (``COMMITTED``/``ABORTED``) while
the coordinator remembers it, where Pulsar forgets it at once (404); ``lastSnapshotTimestamps`` is
when the buffer's last snapshot was taken (0 before the first), recovery times are 0.
"""

from __future__ import annotations

import json
from typing import Any, Final

from aiohttp import web

from broker.admin import errors as E
from broker.admin.responses import admin_of, json_response, no_content
from broker.admin.service import PERSISTENT, AdminService, topic_name, txn_id_of
from broker.metrics.rates import iso_ms
from broker.topics.names import TopicName
from broker.transactions.buffer_snapshot import SNAPSHOT_KIND
from broker.transactions.ids import InvalidTxnStatusError, TransactionNotFoundError, TxnId
from broker.transactions.stats import TransactionStats
from storage.positions import Position

PREFIX: Final = "/admin/v3/transactions"
NOT_ENABLED: Final = "This Broker is not configured with transactionCoordinatorEnabled=true."
TOPIC: Final = "{tenant}/{namespace}/{topic}"
#: where Horae keeps buffer snapshots (the metadata store), named in the internal stats
SNAPSHOT_STORE: Final = f"metadata/{SNAPSHOT_KIND}"

__all__ = ["add_routes"]


def _enabled(request: web.Request) -> AdminService:
    admin = admin_of(request)
    if not admin.transactions.enabled:
        raise E.RestError(503, NOT_ENABLED)
    return admin


def _long(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise E.bad_request(f"Invalid {what}: {text[:100]}") from None
    if not -(2**63) <= value < 2**63:
        raise E.bad_request(f"Invalid {what}: {text[:100]}")
    return value


def _txn_id(request: web.Request) -> TxnId:
    return TxnId(_long(request.match_info["most"], "mostSigBits"),
                 _long(request.match_info["least"], "leastSigBits"))


def _coordinator_param(request: web.Request) -> int | None:
    text = request.query.get("coordinatorId")
    return None if text is None else _long(text, "coordinatorId")


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


def _coordinator_not_found(tc_id: int) -> E.RestError:
    return E.not_found(f"Transaction coordinator not found! coordinator id : {tc_id}")


async def _existing_topic(admin: AdminService, request: web.Request) -> TopicName:
    tn = topic_name(request.match_info["tenant"], request.match_info["namespace"],
                    request.match_info["topic"], PERSISTENT)
    if not await admin.topics.exists(tn):
        raise E.not_found(f"Topic not found {tn}")
    return tn


def _metadata(admin: AdminService, txn: TransactionStats) -> dict[str, Any]:
    """Pulsar's TransactionMetadata of *txn*."""
    tid = txn_id_of(txn)
    # Keyed by the names the client gave (as Pulsar's); looked up by the full ones.
    produced: dict[str, Any] = {}
    for given, topic in zip(txn.partitions, txn.partition_topics, strict=True):
        produced[given] = _in_buffer(admin, topic, tid)
    acked: dict[str, dict[str, Any]] = {}
    for (given, sub), topic in zip(txn.subscriptions, txn.subscription_topics, strict=True):
        acked.setdefault(given, {})[sub] = _in_pending_ack(admin, topic, sub, tid)
    body: dict[str, Any] = {
        "txnId": txn.txn_id, "status": txn.status, "openTimestamp": txn.opened_at_ms,
        "timeoutAt": txn.timeout_at_ms - txn.opened_at_ms,
        "producedPartitions": produced, "ackedPartitions": acked}
    if txn.owner:   # Pulsar leaves it out when no role opened the transaction
        body["owner"] = txn.owner
    return body


def _in_buffer(admin: AdminService, topic: str, txn: TxnId) -> dict[str, Any]:
    start, aborted = admin.transactions.in_buffer(topic, txn)
    body: dict[str, Any] = {} if start is None else {"startPosition": str(start)}
    body["aborted"] = aborted
    return body


def _in_pending_ack(admin: AdminService, topic: str, sub: str, txn: TxnId) -> dict[str, Any]:
    upto = admin.transactions.in_pending_ack(topic, sub, txn)
    return {} if upto is None else {"cumulativeAckPosition": str(upto)}


async def coordinators(request: web.Request) -> web.Response:
    admin = _enabled(request)
    url = admin.broker.lookup_answer(None, None)["brokerUrl"]   # the advertised address
    return json_response([{"id": tc_id, "brokerServiceUrl": url}
                          for tc_id in admin.transactions.coordinator_ids()])


def _coordinator_body(admin: AdminService) -> dict[str, Any]:
    stats = admin.transactions.coordinator()
    return {"state": stats.state, "leastSigBits": stats.least_sig_bits,
            "lowWaterMark": admin.transactions.low_water_mark(),
            "ongoingTxnSize": stats.ongoing, "recoverStartTime": 0, "recoverEndTime": 0}


async def coordinator_stats(request: web.Request) -> web.Response:
    admin = _enabled(request)
    tc_id = _coordinator_param(request)
    if tc_id is None:
        return json_response({str(i): _coordinator_body(admin)
                              for i in admin.transactions.coordinator_ids()})
    if tc_id not in admin.transactions.coordinator_ids():
        raise _coordinator_not_found(tc_id)
    return json_response(_coordinator_body(admin))


async def transaction_metadata(request: web.Request) -> web.Response:
    admin = _enabled(request)
    txn = _txn_id(request)
    if txn.most not in admin.transactions.coordinator_ids():
        raise E.not_found(f"Transaction coordinator with id {txn.most} not found!")
    found = admin.transactions.transaction(txn)
    if found is None:
        raise E.not_found(f"The transaction with this txdID `{txn}`not found ")
    return json_response(_metadata(admin, found))


async def slow_transactions(request: web.Request) -> web.Response:
    admin = _enabled(request)
    timeout = _long(request.match_info["timeout"], "timeout")
    tc_id = _coordinator_param(request)
    if tc_id is not None and tc_id not in admin.transactions.coordinator_ids():
        raise _coordinator_not_found(tc_id)
    slow = [t for t in admin.transactions.ongoing() if t.timeout_at_ms - t.opened_at_ms > timeout]
    return json_response({t.txn_id: _metadata(admin, t) for t in slow})


async def buffer_stats(request: web.Request) -> web.Response:
    admin = _enabled(request)
    tn = await _existing_topic(admin, request)
    stats = admin.transactions.buffer(str(tn))
    body: dict[str, Any]
    if stats is None:   # no transaction touched the topic: everything stored is readable
        topic = await admin.topics.get(tn)
        last = admin.entries.last_position(topic)
        body = {"state": "Ready", "maxReadPosition": str(last), "lastSnapshotTimestamps": 0}
        ongoing, aborted = 0, 0
    else:
        body = {"state": stats.state, "maxReadPosition": stats.max_read_position,
                "lastSnapshotTimestamps": stats.last_snapshot_ms}
        ongoing, aborted = stats.ongoing_txns, stats.aborted_txns
    if _flag(request, "lowWaterMarks"):
        body["lowWaterMarks"] = {str(i): admin.transactions.low_water_mark()
                                 for i in admin.transactions.coordinator_ids()}
    body.update({"ongoingTxnSize": ongoing, "recoverStartTime": 0, "recoverEndTime": 0,
                 "totalAbortedTransactions": aborted})
    return json_response(body)


async def pending_ack_stats(request: web.Request) -> web.Response:
    admin = _enabled(request)
    tn = await _existing_topic(admin, request)
    sub = request.match_info["sub"]
    if not await admin.topics.subscriptions_of(tn, sub):
        raise E.not_found(E.SUBSCRIPTION_NOT_FOUND)
    stats = admin.transactions.pending_ack(str(tn), sub)
    body: dict[str, Any] = {"state": "None" if stats is None else stats.state}
    if _flag(request, "lowWaterMarks"):
        body["lowWaterMarks"] = ({} if stats is None else
                                 {str(i): admin.transactions.low_water_mark()
                                  for i in admin.transactions.coordinator_ids()})
    body.update({"ongoingTxnSize": 0 if stats is None else stats.ongoing_txns,
                 "recoverStartTime": 0, "recoverEndTime": 0})
    return json_response(body)


async def transaction_in_buffer(request: web.Request) -> web.Response:
    admin = _enabled(request)
    tn = await _existing_topic(admin, request)
    return json_response(_in_buffer(admin, str(tn), _txn_id(request)))


async def transaction_in_pending_ack(request: web.Request) -> web.Response:
    admin = _enabled(request)
    tn = await _existing_topic(admin, request)
    return json_response(_in_pending_ack(admin, str(tn), request.match_info["sub"],
                                         _txn_id(request)))


SNAPSHOT_MISSING: Final = "Transaction buffer Snapshot for the topic does not exist"
PENDING_ACK_NOT_READY: Final = "Pending ack have not init success!"
SCALE_DOWN: Final = ("Number of transaction coordinators should be more than the current "
                     "number of transaction coordinator")
#: Pulsar's PositionInPendingAckStats states
PENDING_ACK, NOT_IN_PENDING_ACK, MARK_DELETE, NOT_READY, INVALID_POSITION = (
    "PendingAck", "NotInPendingAck", "MarkDelete", "PendingAckNotReady", "InvalidPosition")


async def buffer_internal_stats(request: web.Request) -> web.Response:
    """Pulsar checks no coordinator here: without one the buffer has no snapshot (404)."""
    admin = admin_of(request)
    tn = await _existing_topic(admin, request)
    stats = admin.transactions.buffer(str(tn)) if admin.transactions.enabled else None
    if stats is None or not stats.last_snapshot_ms:
        raise E.not_found(SNAPSHOT_MISSING)
    return json_response({"snapshotType": "Single", "singleSnapshotInternalStats": {
        "managedLedgerName": f"{SNAPSHOT_STORE}/{tn}",
        "managedLedgerInternalStats": {
            "numberOfEntries": 1, "lastConfirmedEntry": stats.snapshot_upto,
            "lastLedgerCreatedTimestamp": iso_ms(stats.last_snapshot_ms),
            "state": "LedgerOpened", "ledgers": [], "cursors": {}}}})


async def coordinator_internal_stats(request: web.Request) -> web.Response:
    admin = _enabled(request)
    tc_id = _long(request.match_info["tc"], "coordinatorId")
    if tc_id not in admin.transactions.coordinator_ids():
        raise _coordinator_not_found(tc_id)
    log = admin.transactions.log_internal_stats()
    return json_response({"transactionLogStats": {"managedLedgerName": log["name"],
                                                  "managedLedgerInternalStats": log["stats"]}})


async def pending_ack_internal_stats(request: web.Request) -> web.Response:
    admin = _enabled(request)
    tn = await _existing_topic(admin, request)
    sub = request.match_info["sub"]
    await admin.topics.subscriptions_of(tn, sub)   # 404 "Subscription not found"
    if admin.transactions.pending_ack(str(tn), sub) is None:
        raise E.RestError(503, PENDING_ACK_NOT_READY)
    log = admin.transactions.log_internal_stats()
    return json_response({"pendingAckLogStats": {"managedLedgerName": log["name"],
                                                 "managedLedgerInternalStats": log["stats"]}})


async def position_stats_in_pending_ack(request: web.Request) -> web.Response:
    """Pulsar's checkPositionInPendingAckState: at or before the mark-delete position, pending
    individually in an open transaction (a batch index: unless that index is not in the
    acknowledged part), or not."""
    admin = _enabled(request)
    tn = await _existing_topic(admin, request)
    sub = request.match_info["sub"]
    pos = Position(_long(request.match_info["ledger"], "ledgerId"),
                   _long(request.match_info["entry"], "entryId"))
    text = request.query.get("batchIndex")
    batch_index = None if text is None else _long(text, "batchIndex")
    await admin.topics.subscriptions_of(tn, sub)   # 404 "Subscription not found"
    held = admin.transactions.position_in_pending_ack(str(tn), sub, pos)
    if held is None:
        return json_response({"state": NOT_READY})
    deleted, pending, words = held
    if deleted:
        return json_response({"state": MARK_DELETE})
    if not pending:
        return json_response({"state": NOT_IN_PENDING_ACK})
    if batch_index is None:
        return json_response({"state": PENDING_ACK})
    if words is None or not 0 <= batch_index < 64 * len(words):
        return json_response({"state": INVALID_POSITION})
    # an ack set bit set: that message is still to acknowledge (not in this pending ack)
    still = (words[batch_index // 64] >> (batch_index % 64)) & 1
    return json_response({"state": NOT_IN_PENDING_ACK if still else PENDING_ACK})


async def scale_coordinators(request: web.Request) -> web.Response:
    """One node, one coordinator: asking for no more than there are is Pulsar's 406; asking for
    more cannot be done here (405)."""
    admin = _enabled(request)
    try:
        replicas = json.loads(await request.read())
    except ValueError:
        raise E.bad_request("Invalid replicas: the body must be a number") from None
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        raise E.bad_request("Invalid replicas: the body must be a number")
    if replicas <= len(admin.transactions.coordinator_ids()):
        raise E.RestError(406, SCALE_DOWN)
    raise E.RestError(405, "This broker runs one transaction coordinator: it cannot be scaled "
                           "to more")


async def abort_transaction(request: web.Request) -> web.Response:
    """Pulsar's ``internalAbortTransaction``: the coordinator ends the transaction as aborted.
    Pulsar fails an unknown or already ended one with a 500; Horae answers 404, and 409 for
    one already committing."""
    admin = _enabled(request)
    txn = _txn_id(request)
    if txn.most not in admin.transactions.coordinator_ids():
        raise _coordinator_not_found(txn.most)
    try:
        await admin.transactions.abort(txn)
    except TransactionNotFoundError as exc:
        raise E.not_found(exc.message) from None
    except InvalidTxnStatusError as exc:
        raise E.conflict(exc.message) from None
    return no_content()


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(f"{PREFIX}/coordinators", coordinators)
    r.add_get(f"{PREFIX}/coordinatorStats", coordinator_stats)
    r.add_get(PREFIX + "/transactionMetadata/{most}/{least}", transaction_metadata)
    r.add_get(PREFIX + "/slowTransactions/{timeout}", slow_transactions)
    r.add_get(f"{PREFIX}/transactionBufferStats/{TOPIC}", buffer_stats)
    r.add_get(PREFIX + f"/pendingAckStats/{TOPIC}" + "/{sub}", pending_ack_stats)
    r.add_get(PREFIX + f"/transactionInBufferStats/{TOPIC}" + "/{most}/{least}",
              transaction_in_buffer)
    r.add_get(PREFIX + f"/transactionInPendingAckStats/{TOPIC}" + "/{sub}/{most}/{least}",
              transaction_in_pending_ack)
    r.add_get(f"{PREFIX}/transactionBufferInternalStats/{TOPIC}", buffer_internal_stats)
    r.add_get(PREFIX + "/coordinatorInternalStats/{tc}", coordinator_internal_stats)
    r.add_get(PREFIX + f"/pendingAckInternalStats/{TOPIC}" + "/{sub}", pending_ack_internal_stats)
    r.add_get(PREFIX + f"/positionStatsInPendingAck/{TOPIC}" + "/{sub}/{ledger}/{entry}",
              position_stats_in_pending_ack)
    r.add_post(f"{PREFIX}/transactionCoordinator/replicas", scale_coordinators)
    r.add_post(PREFIX + "/abortTransaction/{most}/{least}", abort_transaction)
