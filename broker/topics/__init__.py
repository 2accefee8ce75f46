"""Topics: the registry (:mod:`broker.topics.service`), each topic's publish path, its
producers, re-send de-duplication, ledger trimming and its stats documents.

A topic owns its managed ledger and its subscriptions (:mod:`broker.subscriptions`); it is
called by the connection layer (:mod:`broker.net`) and the admin API, never the other way.
"""

from __future__ import annotations
