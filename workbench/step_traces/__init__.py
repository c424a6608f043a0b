"""Each engine step's causal record after the engine: `log.py` (trace lines in the run log, and
back), `text.py` (a step or a request's history as text, for `workbench trace` and the window),
`store.py` (the window's bounded copy of recent steps) and `block_replay.py` (the KV block map
at any step)."""
