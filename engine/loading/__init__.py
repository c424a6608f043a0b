"""Files into what the engine runs: model files into tensors and a tokenizer (`model_source.py`:
an alias, a .gguf file or a Hugging Face folder, read once; `model_file.py`: what a read file
holds; `gguf.py` and `huggingface.py`: the two formats, never pickle; `tokenizer.py`), and the
ShareGPT conversations that calibration and traffic read (`sharegpt.py`)."""
