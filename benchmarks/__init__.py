"""Performance scripts (not tests): `python -m benchmarks.throughput`, `python -m benchmarks.decode`."""
