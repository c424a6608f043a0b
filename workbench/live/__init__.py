"""The window's Qt-free models of a live run: the metrics store and its snapshots, rolling
percentiles, the per-step overview and the requests table's rows."""
