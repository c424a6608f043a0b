"""A request's life as data: what it asks for (`sampling_params.py`, checked by
`request_checks.py`), its state in the engine (`sequence.py`, text by `detokenizer.py`), what
comes back (`outputs.py`), and what it measured (`metrics.py`, `step_trace.py` for each step)."""
