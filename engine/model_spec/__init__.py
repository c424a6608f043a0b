"""What a model is, before any weight is read: its shape (`model_config.py`), the facts of each
architecture (`architectures.py`: norms, RoPE, sliding windows, GGUF names) and how its KV cache
is laid out in groups of layers (`kv_layout.py`)."""
