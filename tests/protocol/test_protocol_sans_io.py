"""protocol/ is sans-IO: no module of it imports anything that does IO or keeps time."""

from __future__ import annotations

import ast
from pathlib import Path

PROTOCOL_DIR = Path(__file__).resolve().parents[2] / "protocol"
FORBIDDEN = frozenset(
    {
        "asyncio", "uvloop", "socket", "ssl", "selectors", "select", "os", "io", "time",
        "threading", "multiprocessing", "subprocess", "concurrent", "signal", "shutil",
        "pathlib", "tempfile", "sqlite3", "logging", "datetime", "random", "http", "urllib",
        "aiohttp", "broker", "storage",
    }
)


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_protocol_modules_import_nothing_that_does_io() -> None:
    modules = sorted(PROTOCOL_DIR.glob("**/*.py")) + sorted(PROTOCOL_DIR.glob("**/*.pyi"))
    assert len(modules) >= 6
    offenders = {
        str(path.relative_to(PROTOCOL_DIR)): sorted(imported_roots(path) & FORBIDDEN)
        for path in modules
    }
    offenders = {name: bad for name, bad in offenders.items() if bad}
    assert offenders == {}


def test_import_walker_sees_nested_and_from_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os.path\nfrom asyncio import sleep\ndef f():\n    import socket\n")
    assert imported_roots(sample) == {"os", "asyncio", "socket"}
