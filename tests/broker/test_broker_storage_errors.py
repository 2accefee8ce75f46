"""storage.errors -> Pulsar's ServerError: the one mapping at the storage/broker seam."""

from __future__ import annotations

import pytest

from broker.topics.storage_errors import StorageOp, storage_failure
from protocol.errors import ServerError
from storage import errors as storage


def test_write_failure_while_publishing_is_a_persistence_error_that_reloads_the_topic() -> None:
    failure = storage_failure(storage.PersistenceError("fsync failed"), StorageOp.PUBLISH)
    assert failure.error.code is ServerError.PersistenceError
    assert failure.error.message == "Failed to persist the message: fsync failed"
    assert failure.reload_topic


def test_any_exception_on_the_publish_path_answers_send_error_and_reloads() -> None:
    failure = storage_failure(RuntimeError("boom"), StorageOp.PUBLISH)
    assert failure.error.code is ServerError.PersistenceError
    assert failure.reload_topic


def test_missing_cursor_and_ledger_answer_not_found_without_reload() -> None:
    sub = storage_failure(storage.CursorNotFoundError("c"), StorageOp.ADMIN)
    topic = storage_failure(storage.LedgerNotFoundError("l"), StorageOp.LOAD_TOPIC)
    assert (sub.error.code, sub.error.message) == (
        ServerError.SubscriptionNotFound, "Subscription not found")
    assert (topic.error.code, topic.error.message) == (ServerError.TopicNotFound, "Topic not found")
    assert not sub.reload_topic
    assert not topic.reload_topic


def test_corrupt_record_read_is_a_persistence_error_that_keeps_the_topic() -> None:
    failure = storage_failure(storage.CorruptRecordError("crc mismatch"), StorageOp.SUBSCRIBE)
    assert failure.error.code is ServerError.PersistenceError
    assert failure.error.message == "Failed to open the subscription: crc mismatch"
    assert not failure.reload_topic


@pytest.mark.parametrize(("op", "prefix"), [
    (StorageOp.SEEK_MESSAGE_ID, "Reset subscription to message id error: "),
    (StorageOp.SEEK_PUBLISH_TIME, "Reset subscription to publish time error: "),
])
def test_seek_failures_answer_unknown_error_as_pulsar_does(op: StorageOp, prefix: str) -> None:
    failure = storage_failure(storage.CorruptRecordError("bad record"), op)
    assert failure.error.code is ServerError.UnknownError
    assert failure.error.message == prefix + "bad record"


def test_an_error_without_text_is_named_by_its_type() -> None:
    failure = storage_failure(storage.StorageError(), StorageOp.ADMIN)
    assert failure.error.message == "Storage operation failed: StorageError"


@pytest.mark.parametrize("op", [StorageOp.PUBLISH, StorageOp.ADMIN, StorageOp.SUBSCRIBE])
def test_too_many_open_files_is_a_persistence_error_that_never_reloads(op: StorageOp) -> None:
    failure = storage_failure(storage.TooManyOpenFilesError("EMFILE"), op)
    assert failure.error.code is ServerError.PersistenceError
    assert failure.error.message == f"{op.value}: EMFILE"
    assert not failure.reload_topic
    assert not failure.block_producer


@pytest.mark.parametrize("op", [StorageOp.PUBLISH, StorageOp.ADMIN])
def test_entry_too_large_is_not_allowed_and_never_reloads(op: StorageOp) -> None:
    failure = storage_failure(storage.EntryTooLargeError("entry of 9 bytes > 8"), op)
    assert failure.error.code is ServerError.NotAllowedError
    assert failure.error.message == f"{op.value}: entry of 9 bytes > 8"
    assert not failure.reload_topic
