"""Loaded by a ``horae serve`` process started with this directory on ``PYTHONPATH``: starts the
loop-turn probe of ``bench/loop_turns.py`` when ``HORAE_LOOP_TURNS`` names its output file (the
probe is loaded from its file, so nothing is added to the process's import path)."""

import os
import sys

if os.environ.get("HORAE_LOOP_TURNS") and "serve" in sys.argv:
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        "horae_loop_turns", os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))), "loop_turns.py"))
    assert _spec is not None and _spec.loader is not None
    _probe = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_probe)
    _probe.install(os.environ["HORAE_LOOP_TURNS"])
