"""Subscriptions: a cursor, the consumers attached to it and the dispatcher that feeds them
(:mod:`broker.subscriptions.dispatchers`), with the Key_Shared selectors.

A subscription is owned by its topic; it reaches consumers' connections through the narrow
interface the connection layer hands it, never a reference to the connection itself.
"""

from __future__ import annotations
