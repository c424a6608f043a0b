"""`workbench serve`: our engine behind an OpenAI-compatible HTTP API with vLLM's metrics."""

# A request body larger than this is refused (413) before it is read: a 32k-token prompt is about
# 130 KB of text, so the default leaves room for long contexts while a 10 MB body cannot stall
# the server while it is tokenized. `serve --max-request-bytes` sets it.
DEFAULT_MAX_REQUEST_BYTES = 8 << 20
# At shutdown, how long the engine core has to stop (its background compile too) before it is
# killed: a stuck or stopped core must not keep the server up. `serve --core-stop-timeout` sets it.
CORE_STOP_WAIT_S = 30.0
