"""Continuous batching over a paged KV cache: which requests run in a step and with how many
tokens (`scheduler.py`, with its queues in `wait_queue.py`), the KV blocks they hold
(`block_manager.py`), and the step's batch as the executor receives it (`batch.py`)."""
