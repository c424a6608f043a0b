"""`workbench serve`: our engine behind an OpenAI-compatible HTTP API with vLLM's metrics."""
