"""The shape of the house: classes stay small, and the project's files speak of the project alone.

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

#: Functions defined in one class body, at most.
MAX_METHODS = 30

#: ``path:Class`` -> why it may still exceed MAX_METHODS.
ALLOWED: dict[str, str] = {
    "broker/topics/policies.py:PolicyStore":
        "every namespace and topic policy field has its get, set and resolution here, one "
        "family of fields each",
    "broker/delayed/bucket.py:BucketDelayedDeliveryTracker":
        "the bucket index and the metric and introspection properties the metrics read of it "
        "by name",
}


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
