"""``python -m broker ...`` is the same as the ``horae`` command."""

from __future__ import annotations

from broker.cli import main

raise SystemExit(main())
