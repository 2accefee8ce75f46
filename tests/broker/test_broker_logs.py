"""broker/logs.py: JSON log lines, one horae.* tree, and `horae serve` run from broker.conf + env."""

from __future__ import annotations

import io
import json
import logging
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from conftest import ROOT

from broker.logs import JsonFormatter, configure_logging

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
STARTED = re.compile(r"service (pulsar://\S+) web (http://[^\s\"]+)")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    horae_level = logging.getLogger("horae").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("horae").setLevel(horae_level)


def test_json_lines_carry_time_level_logger_message_extras_and_exception(
        restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("INFO", "json", stream)
    log = logging.getLogger("horae.test")
    log.info("hello %s", "world", extra={"status": 200})
    log.debug("not shown at INFO")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["msg"] == "hello world"
    assert first["level"] == "INFO"
    assert first["logger"] == "horae.test"
    assert first["status"] == 200
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["ts"])
    assert second["level"] == "ERROR"
    assert "RuntimeError: boom" in second["exc"]


def test_text_format_and_third_party_loggers_at_warning(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("DEBUG", "text", stream)
    logging.getLogger("horae.x").debug("mine")
    logging.getLogger("aiohttp.server").info("theirs")
    logging.getLogger("aiohttp.server").warning("theirs, loud")
    lines = stream.getvalue().splitlines()
    assert [line.split(" ", 3)[2:] for line in lines] == [
        ["DEBUG", "horae.x: mine"], ["WARNING", "aiohttp.server: theirs, loud"]]


def test_json_formatter_is_usable_on_its_own() -> None:
    record = logging.LogRecord("horae.a", logging.WARNING, __file__, 1, "x=%d", (3,), None)
    assert json.loads(JsonFormatter().format(record))["msg"] == "x=3"


def test_every_broker_logger_is_under_horae() -> None:
    names = []
    for package in ("broker", "storage", "protocol", "jobs"):
        for path in (ROOT / package).rglob("*.py"):
            names += re.findall(r"getLogger\(([^)]*)\)", path.read_text())
    assert names
    # getLogger() is the root (configure_logging); ROOT_LOGGER and ACCESS_LOGGER are horae.* constants.
    assert [n for n in names if n not in ("", "ROOT_LOGGER", "ACCESS_LOGGER") and not n.startswith('"horae')] == []


def test_serve_from_broker_conf_env_and_flags_with_json_logs(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("# an operator's broker.conf\nclusterName=file-cluster\n"
                    "brokerServicePort=65001\nwebServicePort=65002\n"
                    "loadBalancerEnabled=false\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HORAE_clusterName": "env-cluster",
           "PULSAR_PREFIX_metadataStoreUrl": "zk:localhost:2181"}
    log_path = tmp_path / "broker.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "broker", "serve", "--config", str(conf),
             "--data-dir", str(tmp_path / "data"), "--broker-port", "0", "--web-port", "0",
             "--bind-address", "127.0.0.1", "--advertised-address", "127.0.0.1",
             "--log-format", "json"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        match = None
        while match is None and proc.poll() is None and time.monotonic() < deadline:
            match = STARTED.search(log_path.read_text())
            time.sleep(0.05)   # polling a subprocess's log file: there is no event to wait on
        assert match, log_path.read_text()
        web_url = match.group(2)
        with urllib.request.urlopen(f"{web_url}/admin/v2/clusters", timeout=10) as resp:
            clusters = json.loads(resp.read())
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(STOP_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    records = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    assert clusters == ["env-cluster"]                          # env beats the file
    assert not match.group(1).endswith(":65001")                # flags beat the file
    assert code == 0
    assert {r["logger"].split(".")[0] for r in records} == {"horae"}
    skipped = [r["msg"] for r in records if r["level"] == "WARNING" and "ignoring" in r["msg"]]
    assert len(skipped) == 2
    assert "loadBalancerEnabled" in skipped[0] and str(conf) in skipped[0]
    assert "metadataStoreUrl" in skipped[1] and "PULSAR_PREFIX_" in skipped[1]
    assert records[-1]["msg"] == "stopped"
    [access] = [r for r in records if r["logger"] == "horae.http.access"]
    assert (access["method"], access["path"], access["status"]) == ("GET", "/admin/v2/clusters", 200)
    assert access["remote"] == "127.0.0.1"
    assert access["duration_ms"] >= 0
    assert '"GET /admin/v2/clusters HTTP/1.1" 200' in access["msg"]
