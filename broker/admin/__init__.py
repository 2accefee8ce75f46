"""Pulsar-compatible admin: the REST API (``/admin/v2``, HTTP lookup, health, ``/metrics``)
served by :mod:`broker.admin.app`. Its command-line client, ``horae-admin``, is the separate
:mod:`cli.admin` package.

This package's face imports nothing: import :func:`broker.admin.app.create_app` from its
module.
"""

from __future__ import annotations
