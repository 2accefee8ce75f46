"""``horae-client``: pulsar-client and pulsar-perf commands on the official Python client."""
