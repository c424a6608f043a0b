"""Running a step's batch on a device: the executor (`executor.py`) and the model it calls
(`model.py`, loaded and prepared by `torch_model.py` and `prepared_model.py`), sampling
(`sampler.py`), the compiled decode and prefill graphs (`compile_cache.py`,
`compiled_prefill.py`, `background_compile.py`), activation smoothing for W8A8 (`smoothing.py`)
and the KV cache's size from the memory left after loading (`kv_sizing.py`)."""
