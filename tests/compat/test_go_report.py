"""go_report folds test2json events into one result per top-level Go test."""

from __future__ import annotations

import json
import pathlib

import pytest
from go_report import add_missing, counts, fold, load, main, read_events

PKG = "github.com/apache/pulsar-client-go/pulsar"


def ev(action: str, test: str | None = None, **kw: object) -> dict[str, object]:
    e: dict[str, object] = {"Action": action, "Package": PKG, **kw}
    if test is not None:
        e["Test"] = test
    return e


def test_outcomes_elapsed_and_failed_subtests() -> None:
    events = [
        ev("run", "TestA"), ev("output", "TestA", Output="ok\n"), ev("pass", "TestA", Elapsed=1.5),
        ev("run", "TestB"), ev("run", "TestB/sub1"), ev("fail", "TestB/sub1"),
        ev("run", "TestB/sub2"), ev("pass", "TestB/sub2"), ev("fail", "TestB", Elapsed=2),
        ev("run", "TestC"), ev("skip", "TestC"),
        ev("fail"),  # the package's own event names no test
    ]
    a, b, c = fold(events)
    assert (a.name, a.status, a.ended, a.elapsed_s, list(a.output)) == ("TestA", "passed", True, 1.5, ["ok"])
    assert (b.status, b.failed_subtests) == ("failed", ["TestB/sub1"])
    assert c.status == "skipped"


def test_a_test_without_its_end_event_failed_unended() -> None:
    # a -test.timeout panic kills the process before the test's own fail event
    (r,) = fold([ev("run", "TestHang"), ev("output", "TestHang", Output="panic: test timed out\n")])
    assert (r.status, r.ended) == ("failed", False)


def test_a_run_test_with_no_event_at_all_fails() -> None:
    results = fold([ev("pass", "TestA")])
    add_missing(results, [(PKG, "TestA"), (PKG, "TestNeverStarted")])
    assert [(r.name, r.status, r.ended) for r in results] == [
        ("TestA", "passed", True), ("TestNeverStarted", "failed", False)]


def test_output_is_bounded() -> None:
    (r,) = fold([ev("output", "TestLoud", Output=f"{i}\n") for i in range(10_000)])
    assert list(r.output)[-1] == "9999"
    assert len(r.output) < 100


def test_transaction_tests_are_counted_apart() -> None:
    results = fold([ev("fail", "TestTxn_AckAndSend"), ev("fail", "TestTransactionDisabled"),
                    ev("pass", "TestReader"), ev("fail", "TestSeek")])
    assert counts(results) == {"passed": 1, "failed": 1, "skipped": 0,
                               "txn_passed": 0, "txn_failed": 2, "txn_skipped": 0}


def test_non_json_lines_are_skipped() -> None:
    events = list(read_events(["=== RUN TestA\n", json.dumps(ev("pass", "TestA")) + "\n", "{bad\n"]))
    assert events == [ev("pass", "TestA")]


def test_command_line_report_json_and_exit_status(tmp_path: pathlib.Path) -> None:
    events = tmp_path / "pulsar.jsonl"
    events.write_text("\n".join(json.dumps(e) for e in [
        ev("pass", "TestA", Elapsed=0.1), ev("fail", "TestTxn_X"), ev("fail", "TestB")]))
    out = tmp_path / "results.json"
    assert main([str(events), "--json", str(out)]) == 1
    assert [r["name"] for r in json.loads(out.read_text())] == ["TestA", "TestTxn_X", "TestB"]
    assert [r.name for r in load([events])] == ["TestA", "TestTxn_X", "TestB"]
    events.write_text(json.dumps(ev("fail", "TestTxn_X")))
    assert main([str(events)]) == 0  # transaction failures alone do not fail the run


def test_with_txn_a_failed_transaction_test_fails_the_run(tmp_path: pathlib.Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    events = tmp_path / "pulsar.jsonl"
    events.write_text("\n".join(json.dumps(e) for e in [
        ev("pass", "TestTxn_A"), ev("fail", "TestTxn_B")]))
    assert main([str(events)]) == 0
    assert "transactions (counted apart: not failing the run): 1 passed, 1 failed" in capsys.readouterr().out
    assert main([str(events), "--txn"]) == 1
    assert "transactions: 1 passed, 1 failed, 0 skipped" in capsys.readouterr().out
    events.write_text(json.dumps(ev("pass", "TestTxn_A")))
    assert main([str(events), "--txn"]) == 0
