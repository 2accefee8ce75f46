"""Batch jobs over Horae's exported files. Imports nothing from the broker: the only contract
between the two is the metric snapshot schema in ``jobs/SCHEMA.md``."""
