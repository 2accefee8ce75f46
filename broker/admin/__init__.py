"""Pulsar-compatible admin: the REST API (``/admin/v2``, HTTP lookup, health, ``/metrics``)
served by :mod:`broker.admin.app`, and the ``horae-admin`` command line (:mod:`broker.admin.cli`).

This package's face imports nothing: the CLI is stdlib-only and must start fast, so it must
not pull aiohttp in. Import :func:`broker.admin.app.create_app` from its module.
"""

from __future__ import annotations
