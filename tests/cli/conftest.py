"""Fixtures of the CLI tests: the test PKI of the security tests (a CA, server and client
certificates) for the TLS cases."""

from __future__ import annotations

from tests.security.conftest import pki

__all__ = ["pki"]
