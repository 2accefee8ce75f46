"""Security building blocks: TLS contexts, authentication, authorization, token tooling.

A low layer: modules here import only :mod:`broker.config`, the standard library and the
third-party crypto libraries (PyJWT, cryptography, bcrypt, libpass). The connection, the
server and the admin API call into them; nothing here calls back up.
"""
