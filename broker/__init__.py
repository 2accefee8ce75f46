"""Horae's broker node: the server speaking Pulsar's binary protocol, topics, subscriptions,
the admin REST API and metrics.

Entry points: ``horae serve`` (broker.cli), ``python -m broker serve`` and, for tests and
embedding, :func:`broker.embed.start_broker`.
"""

from __future__ import annotations

__version__ = "0.1.0"

#: What CONNECTED carries as server_version (Pulsar sends "Pulsar Server<version>").
SERVER_VERSION = f"Horae-{__version__}"

__all__ = ["SERVER_VERSION", "__version__"]
