"""The horae command: help, version, serve with graceful SIGTERM shutdown, config errors."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import pulsar
from conftest import ROOT, make_client


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=env)


def test_help_lists_the_commands() -> None:
    result = _run("--help")
    assert result.returncode == 0
    assert "serve" in result.stdout and "rollup" in result.stdout


def test_serve_help_lists_the_flags() -> None:
    result = _run("serve", "--help")
    assert result.returncode == 0
    for flag in ("--config", "--data-dir", "--broker-port", "--web-port", "--advertised-address"):
        assert flag in result.stdout


def test_version_flag_prints_the_package_version() -> None:
    from broker import __version__

    result = _run("--version")
    assert result.returncode == 0
    assert result.stdout == f"horae {__version__}\n"


def test_console_script_help() -> None:
    script = pathlib.Path(sys.executable).parent / "horae"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "serve" in result.stdout


def test_bad_config_key_exits_2_naming_the_key(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "broker.toml"
    conf.write_text("brokerServicePorts = 1\n")
    result = _run("serve", "--config", str(conf), "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2
    assert "brokerServicePorts" in result.stderr


def test_misspelt_upper_snake_variable_exits_2_naming_the_variable_meant(
        tmp_path: pathlib.Path) -> None:
    env = {**os.environ, "HORAE_BROKER_SERVICE_PRT": "6655"}
    result = _run("serve", "--data-dir", str(tmp_path / "d"), "--broker-port", "0",
                  "--web-port", "0", env=env)
    assert result.returncode == 2
    assert "environment variable HORAE_BROKER_SERVICE_PRT names no config key (did you mean " \
        "HORAE_BROKER_SERVICE_PORT?)" in result.stderr
    assert not (tmp_path / "d").exists()   # refused before anything started


def test_serve_works_and_sigterm_exits_0(run_broker_process: Any, tmp_path: pathlib.Path) -> None:
    proc = run_broker_process(tmp_path / "data", config_overrides={"clusterName": "c9"})
    c = make_client(proc.service_url)
    try:
        producer = c.create_producer("persistent://public/default/cli")
        assert producer.producer_name().startswith("c9-")  # the TOML config was applied
        consumer = c.subscribe("persistent://public/default/cli", "s",
                               initial_position=pulsar.InitialPosition.Earliest)
        producer.send(b"hello")
        assert consumer.receive(5000).data() == b"hello"
    finally:
        c.close()
    assert proc.stop() == 0
    log = proc.log()
    assert "started: service pulsar://127.0.0.1:" in log
    assert "stopped" in log


def test_rollup_delegates_to_the_jobs_module() -> None:
    result = _run("rollup", "--help")
    assert result.returncode == 0
    assert "--input" in result.stdout and "--output" in result.stdout


def test_a_second_broker_on_a_held_data_dir_exits_1_with_one_line(
        broker_factory: Any, tmp_path: pathlib.Path) -> None:
    data_dir = tmp_path / "held"
    broker_factory(data_dir=data_dir)
    result = _run("serve", "--data-dir", str(data_dir), "--broker-port", "0", "--web-port", "0",
                  "--bind-address", "127.0.0.1")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "cannot start" in line]
    assert len(errors) == 1
    assert "is in use by another process" in errors[0]
