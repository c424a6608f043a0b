"""Performance scripts (not tests): `python -m bench.throughput`, `python -m bench.decode`."""
