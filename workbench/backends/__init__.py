"""What serves the requests, behind one protocol: `protocol.py` (the Backend protocol, its
capabilities and updates), `local.py` (the in-process engine, real or simulated), `remote.py`
(any OpenAI-compatible server) with `server_state.py` (what its /metrics says), and `loader.py`
(what the window connects to for a configuration)."""
