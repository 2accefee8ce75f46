"""Pulsar-compatible admin REST API (``/admin/v2``), HTTP lookup, health and ``/metrics``."""

from __future__ import annotations

from broker.admin.app import create_app

__all__ = ["create_app"]
