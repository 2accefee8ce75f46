"""Results of a Go test run, read from ``go tool test2json`` event streams.

Theory of operation
-------------------
``run_go_suite.sh`` runs each top-level Go test of the client's suite in its own test-binary
process under ``go tool test2json`` and appends the events to one JSON-lines file per package.
This module folds those events into one :class:`TestResult` per top-level test: ``passed``,
``failed`` or ``skipped`` as the test reported it, or ``failed`` with ``ended=False`` when the
process died first (a ``-test.timeout`` panic, a crash). Subtests are kept only as the names of
those that failed, for the report. Output is kept per test but bounded (the last
:data:`OUTPUT_TAIL_LINES` lines), since a hanging test can log for minutes.

Tests of transactions are counted apart (``txn``): a broker without a transaction coordinator
fails them, which says nothing about the rest, so by default they do not fail the run. With
``--txn`` (the broker runs a coordinator, as the suite's CI configures Pulsar) they count like
any other test.

Command line: ``python go_report.py EVENTS.jsonl... [--tests TSV]`` prints one line per test, the failures
with their last output lines, and a closing ``N passed, N failed, N skipped`` line; with
``--json FILE`` it also writes the results as JSON. It exits 1 if a test failed (a transaction
test only with ``--txn``).
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TextIO

#: Lines of a test's output kept for the report (the end is where the cause usually is).
OUTPUT_TAIL_LINES = 40

#: Names of the suite's transaction tests.
_TXN_NAME = re.compile(r"Transaction|Txn", re.IGNORECASE)

_STATUS = {"pass": "passed", "fail": "failed", "skip": "skipped"}


@dataclass(slots=True)
class TestResult:
    """One top-level Go test: its outcome, time and the tail of its output."""

    package: str
    name: str
    status: str = "failed"
    ended: bool = False
    elapsed_s: float = 0.0
    failed_subtests: list[str] = field(default_factory=list)
    output: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=OUTPUT_TAIL_LINES))

    @property
    def txn(self) -> bool:
        return bool(_TXN_NAME.search(self.name))

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["output"] = list(self.output)
        d["txn"] = self.txn
        return d


def read_events(lines: Iterable[str]) -> Iterator[dict[str, object]]:
    """The JSON events of a test2json stream; lines that are not JSON objects are skipped."""
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            yield event


def fold(events: Iterable[dict[str, object]]) -> list[TestResult]:
    """One result per top-level test seen, in the order the tests started."""
    results: dict[tuple[str, str], TestResult] = {}
    for event in events:
        test = event.get("Test")
        if not isinstance(test, str):
            continue
        package = str(event.get("Package", ""))
        top, _, sub = test.partition("/")
        result = results.get((package, top))
        if result is None:
            result = results[(package, top)] = TestResult(package, top)
        action = event.get("Action")
        if action == "output":
            result.output.append(str(event.get("Output", "")).rstrip("\n"))
        elif action in _STATUS:
            if sub:
                if action == "fail":
                    result.failed_subtests.append(test)
            else:
                result.status = _STATUS[str(action)]
                result.ended = True
                elapsed = event.get("Elapsed")
                if isinstance(elapsed, (int, float)):
                    result.elapsed_s = float(elapsed)
    return list(results.values())


def load(paths: Iterable[pathlib.Path]) -> list[TestResult]:
    """Results of every test in the given event files."""
    results: list[TestResult] = []
    for path in paths:
        with path.open(encoding="utf-8", errors="replace") as f:
            results.extend(fold(read_events(f)))
    return results


def add_missing(results: list[TestResult], ran: Iterable[tuple[str, str]]) -> None:
    """Tests that were run but left no event at all (the process could not start) fail."""
    seen = {(r.package, r.name) for r in results}
    for package, name in ran:
        if (package, name) not in seen:
            results.append(TestResult(package, name))


def counts(results: Iterable[TestResult]) -> dict[str, int]:
    """passed/failed/skipped outside transactions, and the transaction tests' own counts."""
    c = {"passed": 0, "failed": 0, "skipped": 0,
         "txn_passed": 0, "txn_failed": 0, "txn_skipped": 0}
    for r in results:
        c[("txn_" if r.txn else "") + r.status] += 1
    return c


def report(results: list[TestResult], out: TextIO, *, txn_counts: bool = False) -> None:
    """The per-test table, the failures' output tails and the closing counts line."""
    for r in results:
        mark = r.status if r.ended else "failed (no result: timed out or crashed)"
        txn = "  [txn]" if r.txn else ""
        print(f"{mark:8} {r.elapsed_s:7.1f}s  {r.package.rsplit('/', 1)[-1]}.{r.name}{txn}",
              file=out)
    failed = [r for r in results if r.status == "failed"]
    for r in failed:
        print(f"\n---- {r.name}" + (f" (subtests: {', '.join(r.failed_subtests)})"
                                    if r.failed_subtests else ""), file=out)
        for line in list(r.output)[-15:]:
            print(f"    {line}", file=out)
    c = counts(results)
    apart = "" if txn_counts else " (counted apart: not failing the run)"
    print(f"\ntransactions{apart}: {c['txn_passed']} passed, "
          f"{c['txn_failed']} failed, {c['txn_skipped']} skipped", file=out)
    print(f"{c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("events", nargs="+", type=pathlib.Path, help="test2json output files")
    parser.add_argument("--json", type=pathlib.Path, help="also write the results here")
    parser.add_argument("--tests", type=pathlib.Path,
                        help="the tests that were run, one 'PACKAGE<TAB>NAME' a line")
    parser.add_argument("--txn", action="store_true",
                        help="a failed transaction test fails the run (the broker has a coordinator)")
    args = parser.parse_args(argv)
    results = load(args.events)
    if args.tests:
        ran = [line.split("\t", 1) for line in args.tests.read_text().splitlines() if "\t" in line]
        add_missing(results, ((p, n) for p, n in ran))
    report(results, sys.stdout, txn_counts=args.txn)
    if args.json:
        args.json.write_text(json.dumps([r.as_dict() for r in results], indent=1))
    return 1 if any(r.status == "failed" and (args.txn or not r.txn) for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
