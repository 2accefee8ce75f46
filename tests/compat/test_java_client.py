"""The Pulsar Java client, its admin client and a Spring Boot application, as judges of Horae.

Theory of operation
-------------------
``tests/compat/java/`` is a Maven project with two modules: ``client/`` (JUnit 5 tests of
``pulsar-client`` and ``pulsar-client-admin`` 4.0.x: subscription types, batching, chunking,
compression, readers, TableView, pattern subscriptions, dead-letter and retry topics, acks,
delayed delivery, schemas, exclusive producers, de-duplication, termination, TLS, tokens and
the admin REST routes) and ``spring/`` (``spring-boot-starter-pulsar``: PulsarTemplate and
@PulsarListener). The modules never start a broker: this test starts four in-process brokers
on free loopback ports (plain with a TLS listener beside it, one with token authentication
and authorization, one stamping and exposing broker entry metadata) and a fifth with
transactions enabled, runs
``mvn -q -B -fae test`` there with their addresses in ``HORAE_*`` environment variables, then reads Surefire's XML reports and fails with every failed Java test
and its message. It skips when ``mvn`` or ``java`` is missing.

The first run downloads the Maven dependencies into ~/.m2 (minutes, once); later runs take the
time of the Java tests themselves.
"""

from __future__ import annotations

import base64
import os
import pathlib
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt
import pytest

from tests.security.conftest import Pki

JAVA_PROJECT = pathlib.Path(__file__).resolve().parent / "java"
MODULES = ("client", "spring")
SECRET = b"j" * 32
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
ENTRY_METADATA_INTERCEPTORS = ("org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor,"
                               "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor")
TICK_MS = 100  # delayedDeliveryTickTimeMillis of the brokers: the delayed tests wait less
MAVEN_TIMEOUT_S = 840  # the first run resolves the dependencies; later runs take ~2 minutes


@dataclass(frozen=True)
class JavaTestResult:
    name: str
    failure: str | None  # None: passed


def _surefire_results(project: pathlib.Path) -> list[JavaTestResult]:
    results: list[JavaTestResult] = []
    for module in MODULES:
        for report in sorted((project / module / "target" / "surefire-reports").glob("TEST-*.xml")):
            for case in ET.parse(report).getroot().iter("testcase"):
                name = f"{case.get('classname', '?').rsplit('.', 1)[-1]}.{case.get('name', '?')}"
                failure = None
                for outcome in ("failure", "error", "skipped"):  # a skipped check counts as failed
                    problem = case.find(outcome)
                    if problem is not None:
                        detail = problem.get("message") or problem.get("type") or ""
                        failure = f"{outcome}: {detail.strip()}"
                        break
                results.append(JavaTestResult(name, failure))
    return results


@pytest.mark.timeout(MAVEN_TIMEOUT_S + 60)
def test_java_client_and_spring_boot_against_horae(
        broker_factory: Callable[..., Any], tmp_path: pathlib.Path) -> None:
    missing = [tool for tool in ("mvn", "java") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed: the Java client suite needs a JDK 17+ and Maven")
    pki = Pki(tmp_path)
    broker = broker_factory(config_overrides={
        "delayedDeliveryTickTimeMillis": TICK_MS,
        "brokerServicePortTls": 0, "webServicePortTls": 0,
        "tlsCertificateFilePath": str(pki.server.cert), "tlsKeyFilePath": str(pki.server.key),
        "tlsTrustCertsFilePath": str(pki.ca.path)})
    secured = broker_factory(config_overrides={
        "authenticationEnabled": True, "authenticationProviders": TOKEN_PROVIDER,
        "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
        "authorizationEnabled": True, "superUserRoles": "admin"})
    entry_metadata = broker_factory(config_overrides={
        "brokerEntryMetadataInterceptors": ENTRY_METADATA_INTERCEPTORS,
        "exposingBrokerEntryMetadataToClientEnabled": True})
    transactions = broker_factory(config_overrides={"transactionCoordinatorEnabled": True,
                                                    "delayedDeliveryTickTimeMillis": TICK_MS})
    env = {
        **os.environ,
        "HORAE_TXN_SERVICE_URL": transactions.service_url,
        "HORAE_TXN_WEB_URL": transactions.web_url,
        "HORAE_ENTRY_METADATA_SERVICE_URL": entry_metadata.service_url,
        "HORAE_ENTRY_METADATA_WEB_URL": entry_metadata.web_url,
        "HORAE_SERVICE_URL": broker.service_url,
        "HORAE_WEB_URL": broker.web_url,
        "HORAE_TICK_TIME_MILLIS": str(TICK_MS),
        "HORAE_TLS_SERVICE_URL": f"pulsar+ssl://127.0.0.1:{broker.server.broker_port_tls}",
        "HORAE_TLS_WEB_URL": f"https://127.0.0.1:{broker.server.web_port_tls}",
        "HORAE_TLS_TRUST_CERTS": str(pki.ca.path),
        "HORAE_TOKEN_SERVICE_URL": secured.service_url,
        "HORAE_TOKEN_WEB_URL": secured.web_url,
        "HORAE_ADMIN_TOKEN": jwt.encode({"sub": "admin"}, SECRET, algorithm="HS256"),
        "HORAE_FOREIGN_TOKEN": jwt.encode({"sub": "admin"}, b"x" * 32, algorithm="HS256"),
    }
    for module in MODULES:  # reports of an earlier run must not count
        shutil.rmtree(JAVA_PROJECT / module / "target" / "surefire-reports", ignore_errors=True)
    log_path = tmp_path / "maven.log"
    with log_path.open("wb") as log:
        run = subprocess.run(["mvn", "-q", "-B", "-fae", "test"], cwd=JAVA_PROJECT, env=env,
                             stdout=log, stderr=subprocess.STDOUT, timeout=MAVEN_TIMEOUT_S,
                             check=False)
    results = _surefire_results(JAVA_PROJECT)
    failed = [r for r in results if r.failure is not None]
    log_tail = log_path.read_text(errors="replace")[-6000:]
    assert not failed, f"{len(failed)} of {len(results)} Java tests failed:\n" + "\n".join(
        f"  {r.name}: {r.failure}" for r in failed)
    assert results, f"Maven ran no Java test (exit {run.returncode}):\n{log_tail}"
    assert run.returncode == 0, f"Maven failed (exit {run.returncode}) with no failed test:\n{log_tail}"
    ran = {r.name.split(".", 1)[0] for r in results}
    assert "SpringPulsarTest" in ran and "AdminTest" in ran, sorted(ran)
