"""The built wheel installs cleanly beside proto-plus (no top-level ``proto`` package).

proto-plus, a dependency of every google-cloud library, owns the top-level ``proto`` package.
A wheel with a ``proto`` package too would overwrite proto-plus's ``proto/__init__.py`` on
install and remove that file on uninstall: the wheel's top-level packages are exactly
broker, cli, protocol, storage and jobs. This module builds the wheel from a
copy of the sources, reads its file list, then installs it into a fresh venv (no system site
packages, PYTHONPATH cleared, isolated mode) after proto-plus and imports both side by side,
and again after uninstalling Horae.

Slow (a venv and two pip installs, ~15-40 s): marked ``slow``, which the CI run includes. It
skips, naming pip's error, only when pip cannot download proto-plus (no index, no cache).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from broker import __version__

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "broker", "cli", "protocol", "storage", "jobs", "proto")
PACKAGES = {"broker", "cli", "protocol", "storage", "jobs"}
PIP_TIMEOUT_S = 180
# What pip prints when it cannot reach an index or find proto-plus in any configured source.
UNREACHABLE = (
    "No matching distribution found",
    "Could not find a version that satisfies",
    "NewConnectionError",
    "Network is unreachable",
    "Temporary failure in name resolution",
)
IMPORT_BOTH = """
import sys, proto
assert proto.Message.__module__ == "proto.message", proto.Message
import broker, cli.admin.main, protocol
from protocol import pulsar_pb
from protocol.generated import delayed_index_pb2
assert pulsar_pb.BaseCommand.CONNECT == 2
assert delayed_index_pb2.DelayedIndex.DESCRIPTOR.full_name == "pulsar.delay.DelayedIndex"
for module in (proto, protocol, broker, cli):
    assert module.__file__.startswith(sys.prefix), (module.__name__, module.__file__)
print(broker.__version__)
"""
IMPORT_PROTO_PLUS = """
import importlib.util, proto
assert proto.Message.__module__ == "proto.message", proto.Message
assert importlib.util.find_spec("protocol") is None
"""

pytestmark = pytest.mark.slow


def _run(args: Sequence[str], cwd: Path, timeout: float = PIP_TIMEOUT_S,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items()
              if k != "PYTHONPATH" and not k.startswith("VIRTUAL_ENV")}, **(env or {})}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _check(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"{proc.args}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _build_wheel(base: Path, env: dict[str, str] | None = None) -> Path:
    """The wheel built (no build isolation: the test extra's grpcio-tools needs setuptools>=77)
    from a copy of the sources under *base*, so the build leaves nothing in the checkout."""
    src = base / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "*.so")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, src / name)
    out = base / "dist"
    _check(
        _run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "--wheel-dir", str(out), str(src)],
            cwd=base, env=env,
        )
    )
    (built,) = out.glob("horae-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


def _accelerators(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return [name for name in archive.namelist()
                if name.startswith(("protocol/_send_accel.", "storage/_scan_accel.",
                                    "storage/_handoff.", "broker/delayed/_packed_accel."))
                and not name.endswith((".c", ".pyi"))]


def test_wheel_carries_the_accelerators_when_a_compiler_is_there(wheel: Path) -> None:
    if sysconfig.get_config_var("CC") is None or shutil.which(
            str(sysconfig.get_config_var("CC")).split()[0]) is None:
        pytest.skip("no C compiler: the wheel is built without the optional extension")
    accelerators = _accelerators(wheel)
    assert len(accelerators) == 4 and all(name.endswith(".so") for name in accelerators)


def test_wheel_builds_without_a_compiler_and_leaves_the_accelerators_out(
        wheel: Path, tmp_path: Path) -> None:
    built = _build_wheel(tmp_path, env={"CC": "false"})  # every compile fails
    assert _accelerators(built) == []
    with zipfile.ZipFile(built) as bare, zipfile.ZipFile(wheel) as full:
        accelerators = set(_accelerators(wheel))
        assert {n for n in full.namelist() if n not in accelerators
                and ".dist-info/" not in n} == {
            n for n in bare.namelist() if ".dist-info/" not in n}


def test_wheel_has_no_top_level_proto_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top_level = {name.split("/", 1)[0] for name in names if "/" in name}
    packages = {name for name in top_level if not name.endswith(".dist-info")}
    assert packages == PACKAGES
    assert "protocol/generated/pulsar_api_pb2.py" in names
    assert "protocol/generated/delayed_index_pb2.py" in names
    assert "protocol/pulsar_pb.pyi" in names
    assert not [name for name in names if name.endswith(".proto")]


def test_wheel_version_is_broker_version(wheel: Path) -> None:
    assert wheel.name.startswith(f"horae-{__version__}-")


def test_wheel_installs_beside_proto_plus_and_both_import(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _check(_run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path, timeout=60))
    python = str(venv / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--python", python]

    # proto-plus first, then Horae: the order in which a top-level `proto` would overwrite it.
    proc = _run([*pip, "install", "proto-plus", "protobuf>=7.35.1,<8"], cwd=tmp_path)
    if proc.returncode != 0 and any(marker in proc.stderr for marker in UNREACHABLE):
        pytest.skip(f"pip cannot download proto-plus: {proc.stderr.strip().splitlines()[-1]}")
    _check(proc)
    _check(_run([*pip, "install", "--no-deps", str(wheel)], cwd=tmp_path))

    printed = _check(_run([python, "-I", "-c", IMPORT_BOTH], cwd=tmp_path, timeout=60))
    assert printed.strip() == __version__

    _check(_run([*pip, "uninstall", "--yes", "horae"], cwd=tmp_path))
    _check(_run([python, "-I", "-c", IMPORT_PROTO_PLUS], cwd=tmp_path, timeout=60))
