"""Horae's command-line clients, installed beside the broker but independent of it.

Each subpackage is one command (:mod:`cli.admin` is ``horae-admin``, :mod:`cli.client`
``horae-client``). They talk to a broker
over its public interfaces only (the admin REST API, the binary protocol) and import nothing
from :mod:`broker`: a client starts fast, without the server's dependencies, and the server's
internals can change without breaking it (``tests/cli`` walks the imports to keep it so). What
a client shares with the server lives in :mod:`protocol`, which both may import.
"""
