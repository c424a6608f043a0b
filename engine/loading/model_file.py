"""What a model loader returns: a model file's shape, weights and tokenizer (`ModelSource`), and
the progress callback loaders report through. Kept apart from engine/loading/model_source.py, which picks
the loader, so that the loaders and the dispatch do not import each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.loading.tokenizer import Tokenizer
from engine.model_spec.model_config import ModelConfig

# Stage name and fraction done in [0, 1], for a progress bar.
ProgressCallback = Callable[[str, float], None]


@dataclass
class ModelSource:
    path: Path
    file_format: str  # "gguf" or "safetensors"
    config: ModelConfig
    # Hugging Face parameter names -> tensors on the CPU: float32 from a GGUF file (dequantized),
    # the stored dtype from safetensors.
    tensors: dict[str, torch.Tensor]
    tokenizer: Tokenizer | None
    # How the file stored its weights, e.g. {"Q4_1": 210, "F32": 61}.
    stored_tensor_types: dict[str, int]
    # GGUF only: the block format of most attention/MLP projections, and of the LM head (the
    # embedding table when they are tied), e.g. "Q4_1" and "Q8_0"; quantization "auto" reads them.
    projection_type: str | None = None
    head_type: str | None = None
    # The 16-bit float dtype most of the weights are stored in (bf16 or fp16 safetensors), which
    # dtype "auto" computes in on a CPU too; None: float32 or quantized blocks.
    weights_dtype: torch.dtype | None = None


def no_progress(stage: str, fraction: float) -> None:
    """The default progress callback."""
