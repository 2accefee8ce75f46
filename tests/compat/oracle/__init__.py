"""Differential tests against Apache Pulsar standalone (a package, so its conftest does not
shadow the suite's top-level ``conftest`` module that other tests import from)."""
