"""``horae-admin``: pulsar-admin's command names over Horae's admin REST API.

Modules: :mod:`cli.admin.main` (the parser, the command table and :func:`cli.admin.main.main`),
:mod:`cli.admin.args` (argument values), :mod:`cli.admin.policies` and
:mod:`cli.admin.brokers` (command groups), :mod:`cli.admin.rest` (the one HTTP exchange) and
:mod:`cli.admin.auth` (credentials and TLS). Standard library only, plus :mod:`protocol` for
the message-id encoding; run as ``horae-admin`` or ``python -m cli.admin``.
"""
