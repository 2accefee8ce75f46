"""Transactions (Pulsar's PIP-31 model): coordinator, durable log, topic buffers, pending acks.

:class:`broker.transactions.service.TransactionService` owns the others and is what the rest of
the broker talks to; it exists only with ``transactionCoordinatorEnabled``.
"""
