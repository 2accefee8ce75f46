"""Shared helpers for tests/deploy: where deploy/ is, and finding the real validation tools.

Each artefact under deploy/ is checked by the tool that consumes it (systemd-analyze, promtool,
hadolint, a Kubernetes schema validator, a Compose parser, a real Prometheus). A tool is looked up
on PATH and beside the running interpreter (pip installs console scripts into the venv's bin/,
which is not on PATH when tests run as ``.venv/bin/python -m pytest``). A test whose tool is
missing skips with the reason, and only that test.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
from typing import Any

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
TOOL_TIMEOUT_S = 120.0


def find_tool(name: str) -> str | None:
    """The path of executable *name* on PATH or in the interpreter's bin/ directory."""
    found = shutil.which(name)
    if found is not None:
        return found
    return shutil.which(name, path=str(pathlib.Path(sys.executable).parent))


def require_tool(name: str, install_hint: str) -> str:
    """The path of *name*, or skip the calling test saying how to get it."""
    path = find_tool(name)
    if path is None:
        pytest.skip(f"{name} is not installed ({install_hint}; .ci/run installs it)")
    return path


def run_tool(args: list[str], *, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, cwd=cwd,
                          check=False)


def load_yaml(path: pathlib.Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_yaml_documents(path: pathlib.Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
