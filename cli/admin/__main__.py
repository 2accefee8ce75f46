"""``python -m cli.admin``: the same as the ``horae-admin`` command."""

from __future__ import annotations

import sys

from cli.admin.main import main

sys.exit(main())
