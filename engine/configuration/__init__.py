"""How the engine is set up: `EngineConfig` (`config.py`, every field with its help), the page
of knobs made from it (`knob_table.py`) and the memory model (`memory.py`: weights, activations
and the KV cache's budget on a device)."""
