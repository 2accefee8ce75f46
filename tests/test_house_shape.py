"""The shape of the house: imports run one way, classes stay small, and the project's files
speak of the project alone.

- Imports run one way (DEVELOPERS.md, "Rooms"): no two files import each other, directly or
  through others, and no two rooms do either. A room is a package of the project
  (``protocol/``, ``storage/``, ``jobs/``, ``cli/``, ``bench/``), a sub-package of ``broker/``
  (``broker/topics/``, ...) or a module directly in ``broker/``. Every import counts, also
  those inside functions and under ``TYPE_CHECKING``.
- No class in ``broker/`` or ``storage/`` defines more than :data:`MAX_METHODS` functions in its
  body (methods, properties, class methods): a class past that owns more than one concept and
  is split by concept into collaborators (DEVELOPERS.md, "Rooms"). :data:`ALLOWED` names the
  classes that may still exceed it, each with why; an allowance must still be needed (a class
  back under the bound loses it), so the list only shrinks.
- No tracked file talks about how the project was developed (issue numbers, sessions,
  branches, commit ids, the people or the workplace behind it): history belongs in commit
  messages. Read from ``git ls-files``, so it runs in a checkout only.
"""

from __future__ import annotations

import ast
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: The project's own packages: imports of anything else are not followed.
PACKAGES = ("broker", "storage", "protocol", "jobs", "cli", "bench")


def _room(rel: str) -> str:
    parts = rel.split("/")
    if parts[0] == "broker":
        return f"broker/{parts[1]}/" if len(parts) > 2 else rel
    return parts[0] + "/"


def _module_file(module: str) -> str | None:
    """The file an imported dotted name lives in (a module, a C extension's type stub, or a
    package's __init__.py)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:n])
        for candidate in (base.with_suffix(".py"), base.with_suffix(".pyi"),
                          base / "__init__.py"):
            if candidate.is_file():
                return candidate.relative_to(ROOT).as_posix()
    return None


def _import_graph() -> dict[str, set[str]]:
    """file -> the project files it imports."""
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            targets = graph.setdefault(rel, set())
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    module = node.module or ""
                    if node.level:
                        module = ".".join(rel.split("/")[:-node.level] + ([module] if module else []))
                    names = [module] + [f"{module}.{alias.name}" for alias in node.names]
                for name in names:
                    if name.split(".")[0] in PACKAGES:
                        target = _module_file(name)
                        if target is not None and target != rel:
                            targets.add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_imports_run_one_way() -> None:
    graph = _import_graph()
    assert "broker/topics/topic.py" in graph["broker/topics/service.py"]  # imports were read
    assert _circles(graph) == [], "files that import each other"
    rooms: dict[str, set[str]] = {}
    for source, targets in graph.items():
        for target in targets:
            if _room(source) != _room(target):
                rooms.setdefault(_room(source), set()).add(_room(target))
    assert _circles(rooms) == [], "rooms that import each other: an import runs back up"


def test_a_circle_is_found() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


#: Functions defined in one class body, at most.
MAX_METHODS = 30

#: ``path:Class`` -> why it may still exceed MAX_METHODS.
ALLOWED: dict[str, str] = {}


def _method_counts() -> dict[str, int]:
    counts: dict[str, int] = {}
    for package in ("broker", "storage"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    counts[f"{rel}:{node.name}"] = sum(
                        isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                        for item in node.body)
    return counts


def test_no_class_in_broker_or_storage_has_more_than_30_methods() -> None:
    counts = _method_counts()
    assert len(counts) > 100  # the walk found the classes
    over = {name: n for name, n in counts.items() if n > MAX_METHODS and name not in ALLOWED}
    assert over == {}, f"split these by concept (at most {MAX_METHODS} methods): {over}"


def test_every_allowance_is_still_needed() -> None:
    counts = _method_counts()
    missing = [name for name in ALLOWED if name not in counts]
    assert missing == [], f"allowed classes that no longer exist: {missing}"
    unneeded = [name for name in ALLOWED if counts[name] <= MAX_METHODS]
    assert unneeded == [], f"back under {MAX_METHODS} methods, remove their allowance: {unneeded}"


#: What a file of the project never says (case-insensitive). This file holds the patterns
#: themselves and is not read.
PROCESS_TALK = [re.compile(p, re.IGNORECASE) for p in (
    r"\bissues?\s*#?\d+\b",                          # our issue numbers (Pulsar's: apache/pulsar#N)
    r"\bsteering\b",
    r"\bthe (?:lead|CEO)\b",
    r"\b(?:previous|earlier|next|helper|coding|agent|work|development) sessions?\b",
    r"\bworktrees?\b",
    r"/work/(?:wt|notes|shared|main)\b",
    r"\bshared/reference\b",
    r"\b(?:the|this|my|our|your|their|another|feature) branch\b",
    r"\bon (?:the |a |my )?branch\b",
    r"\bcommit [0-9a-f]{7,40}\b",
    r"\b(?:the brief|this pass|later commits?)\b",
)]


def _tracked_files() -> list[pathlib.Path]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the tracked files cannot be listed")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                            timeout=60, check=False)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout ({listed.stderr.decode(errors='replace').strip()})")
    return [ROOT / name for name in listed.stdout.decode().split("\0") if name]


def test_no_tracked_file_talks_about_the_development_process() -> None:
    me = pathlib.Path(__file__).resolve()
    files = [f for f in _tracked_files() if f.resolve() != me and f.is_file()]
    assert len(files) > 100   # the listing found the tree
    found = []
    for path in files:
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        for lineno, line in enumerate(data.decode(errors="replace").splitlines(), 1):
            for pattern in PROCESS_TALK:
                match = pattern.search(line)
                if match:
                    found.append(f"{path.relative_to(ROOT)}:{lineno}: {match.group(0)!r}")
    assert found == [], "history belongs in commit messages:\n" + "\n".join(found)


@pytest.mark.parametrize("line", [
    "Fixed for issue 27 of the tracker.", "see issue #12", "as the steering repo says",
    "the lead merges it", "found in the previous session", "in my worktree",
    "a path /work/notes/x.md", "see shared/reference/pulsar-wire.md", "on this branch",
    "measured at commit b4c15e8",
])
def test_the_process_patterns_catch_what_they_are_for(line: str) -> None:
    assert any(p.search(line) for p in PROCESS_TALK), line


@pytest.mark.parametrize("line", [
    "Pulsar issues apache/pulsar#15397 and #8703", "a WebSocket session idles out",
    "session-scoped fixture", "union branches of a schema", "the previous round's fdatasync",
])
def test_the_process_patterns_leave_the_project_words_alone(line: str) -> None:
    assert not any(p.search(line) for p in PROCESS_TALK), line
