"""Run the Java client's transaction tests (``TransactionsTest``) against Horae or Apache Pulsar.

Theory of operation
-------------------
``TransactionsTest`` (tests/compat/java/client) needs two brokers: one with the transaction
coordinator (``transactionCoordinatorEnabled=true``, named by ``HORAE_TXN_SERVICE_URL``) and one
without it (Pulsar's default, ``HORAE_SERVICE_URL``), for its test of a transactional client
refused by a broker that has no coordinator (JUnit tag ``coordinatorDisabled``).

``--broker horae`` starts both as Horae processes (:func:`bench.brokers.start_horae`, free
loopback ports) and runs the class once. ``--broker pulsar`` is the oracle: Apache Pulsar 4.0
standalone (:mod:`bench.pulsar_peer`), one JVM at a time, so twice: first with the coordinator for
every test but the tagged one, then without it for that one. ``--pulsar URL,WEBURL`` uses a Pulsar
already running with the coordinator instead of starting one (the tagged test is then not run).

Maven runs ``mvn -o -q -B test -pl client -Dtest=TransactionsTest`` in tests/compat/java; the
results come from Surefire's XML reports, one line per test, and the exit status is 1 if one
failed. Needs Java 17+ and Maven with the dependencies in ~/.m2 (``tests/compat/test_java_client.py``
resolves them on its first run).

Usage: ``.venv/bin/python tests/compat/run_java_txn.py --broker horae|pulsar [--pulsar URL,WEBURL]
[--json FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

REPO = pathlib.Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.brokers import start_horae  # noqa: E402
from bench.processes import Broker  # noqa: E402
from bench.pulsar_peer import start_pulsar_standalone  # noqa: E402

JAVA_PROJECT = REPO / "tests" / "compat" / "java"
REPORTS = JAVA_PROJECT / "client" / "target" / "surefire-reports"
TEST_CLASS = "TransactionsTest"
DISABLED_TAG = "coordinatorDisabled"
TXN_ON = {"transactionCoordinatorEnabled": "true"}
HORAE_TICK_MS = 100  # delayedDeliveryTickTimeMillis of the Horae brokers (Pulsar keeps 1 s)
MAVEN_TIMEOUT_S = 900


def surefire_results() -> dict[str, str | None]:
    """``method -> None`` (passed) or the failure, from the reports of :data:`TEST_CLASS`."""
    results: dict[str, str | None] = {}
    for report in sorted(REPORTS.glob(f"TEST-*{TEST_CLASS}.xml")):
        for case in ET.parse(report).getroot().iter("testcase"):
            failure = None
            for outcome in ("failure", "error", "skipped"):  # a skipped check counts as failed
                problem = case.find(outcome)
                if problem is not None:
                    detail = problem.get("message") or problem.get("type") or ""
                    failure = f"{outcome}: {detail.strip()[:500]}"
                    break
            results[case.get("name", "?")] = failure
    return results


def urls(broker: Broker) -> tuple[str, str]:
    return f"pulsar://{broker.host}:{broker.port}", f"http://{broker.host}:{broker.web_port}"


def run_maven(*, txn: tuple[str, str], plain: tuple[str, str], tick_ms: int | None,
              groups: str | None = None, excluded: str | None = None,
              log: pathlib.Path) -> dict[str, str | None]:
    """One Maven run of :data:`TEST_CLASS` against *txn* (coordinator) and *plain* (none),
    each given as (service URL, web URL)."""
    env = {**os.environ, "HORAE_TXN_SERVICE_URL": txn[0], "HORAE_TXN_WEB_URL": txn[1],
           "HORAE_SERVICE_URL": plain[0], "HORAE_WEB_URL": plain[1]}
    if tick_ms is not None:
        env["HORAE_TICK_TIME_MILLIS"] = str(tick_ms)
    args = ["mvn", "-o", "-q", "-B", "test", "-pl", "client", f"-Dtest={TEST_CLASS}",
            "-Dsurefire.failIfNoSpecifiedTests=false"]
    if groups:
        args.append(f"-Dgroups={groups}")
    if excluded:
        args.append(f"-DexcludedGroups={excluded}")
    shutil.rmtree(REPORTS, ignore_errors=True)
    with log.open("ab") as out:
        subprocess.run(args, cwd=JAVA_PROJECT, env=env, stdout=out, stderr=subprocess.STDOUT,
                       timeout=MAVEN_TIMEOUT_S, check=False)
    return surefire_results()


def run(broker: str, pulsar: str | None, tmp: pathlib.Path) -> dict[str, str | None]:
    log = tmp / "maven.log"
    results: dict[str, str | None] = {}
    if broker == "horae":
        with start_horae(tmp, name="horae-txn",
                         config=f"transactionCoordinatorEnabled = true\n"
                                f"delayedDeliveryTickTimeMillis = {HORAE_TICK_MS}\n") as txn, \
                start_horae(tmp, name="horae-plain") as plain:
            results.update(run_maven(txn=urls(txn), plain=urls(plain), tick_ms=HORAE_TICK_MS,
                                     log=log))
    elif pulsar:
        service, web = pulsar.split(",", 1)
        results.update(run_maven(txn=(service, web), plain=(service, web), tick_ms=None,
                                 excluded=DISABLED_TAG, log=log))
    else:
        with start_pulsar_standalone(tmp, sync=False, name="pulsar-txn", extra=TXN_ON) as txn:
            results.update(run_maven(txn=urls(txn), plain=urls(txn), tick_ms=None,
                                     excluded=DISABLED_TAG, log=log))
        with start_pulsar_standalone(tmp, sync=False, name="pulsar-plain") as plain:
            results.update(run_maven(txn=urls(plain), plain=urls(plain), tick_ms=None,
                                     groups=DISABLED_TAG, log=log))
    if not results:
        sys.stderr.write(log.read_text(errors="replace")[-5000:])
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--broker", choices=("horae", "pulsar"), required=True)
    parser.add_argument("--pulsar", help="a running Pulsar with the coordinator: URL,WEBURL")
    parser.add_argument("--json", type=pathlib.Path, help="also write the results here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="java-txn-") as tmp:
        results = run(args.broker, args.pulsar, pathlib.Path(tmp))
    for name, failure in sorted(results.items()):
        print(f"{'passed' if failure is None else 'FAILED':7} {TEST_CLASS}.{name}"
              + ("" if failure is None else f"\n        {failure}"))
    failed = sum(1 for f in results.values() if f is not None)
    print(f"{args.broker}: {len(results) - failed} passed, {failed} failed")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
