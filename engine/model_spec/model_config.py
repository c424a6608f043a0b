"""`ModelConfig`: the shape of a decoder, whichever file format it came from.

The defaults describe the Llama family (RMSNorm, RoPE, grouped-query attention, SwiGLU); the fields
after `eos_token_ids` describe how Gemma 3 departs from it (docs/models.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

QUANTIZED_KV_SCALE_BYTES = 2  # an 8-bit cache's float16 scale per row (kernels/quantized_kv.py)


@dataclass(frozen=True)
class ModelConfig:
    architecture: str  # an entry of engine/model_spec/architectures.py
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    # RMSNorms multiply by (offset + weight), in float32 before the cast back: Gemma's 1.0.
    norm_weight_offset: float = 0.0
    qk_norm: bool = False  # an RMSNorm over each query and key head before RoPE
    sandwich_norms: bool = False  # norms after attention and after the MLP too, before the residual add
    hidden_activation: str = "silu"  # the MLP gate's: "silu" or "gelu_tanh"
    embedding_scale: float = 1.0  # token embeddings are multiplied by it (Gemma: sqrt(hidden_size))
    attention_scale: float | None = None  # the query scaling; None: head_dim ** -0.5
    sliding_window: int | None = None  # tokens a sliding-window layer attends to, its own included
    sliding_layers: tuple[int, ...] = ()  # the layers that attend through the window
    local_rope_theta: float | None = None  # the sliding-window layers' RoPE base, where it differs
    # Long-context RoPE scaling: the global layers' rotary frequencies are divided by these, one
    # per pair of head dimensions (Llama 3's "llama3" and "linear" scaling; llama.cpp stores them as
    # the rope_freqs tensor). Empty: unscaled.
    rope_frequency_divisors: tuple[float, ...] = ()

    def is_sliding(self, layer: int) -> bool:
        return self.sliding_window is not None and layer in self.sliding_layers

    @property
    def num_parameters(self) -> int:
        """Parameter count from the shapes (embeddings counted once when tied)."""
        hidden = self.hidden_size
        biases = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim if self.attention_bias else 0
        norms = (4 if self.sandwich_norms else 2) * hidden + (2 * self.head_dim if self.qk_norm else 0)
        embeddings = self.vocab_size * hidden * (1 if self.tie_word_embeddings else 2)
        return self.num_projection_parameters + self.num_layers * (biases + norms) + embeddings + hidden

    @property
    def num_projection_parameters(self) -> int:
        """The attention and MLP projections' weights: what quantization replaces."""
        q_width, kv_width = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return self.num_layers * self.hidden_size * (2 * q_width + 2 * kv_width + 3 * self.intermediate_size)

    @property
    def num_sliding_layers(self) -> int:
        return len(self.sliding_layers) if self.sliding_window is not None else 0

    def attended_positions(self, context: int) -> int:
        """Keys the last of `context` tokens attends to, summed over layers: the whole context in a
        full-attention layer, at most the window in a sliding-window one. Also the positions whose
        K/V a computed sequence of that length still needs."""
        sliding = self.num_sliding_layers
        window = min(context, self.sliding_window) if sliding else 0
        return (self.num_layers - sliding) * context + sliding * window

    def kv_row_bytes(self, bytes_per_element: int) -> int:
        """One token's key (or value) in one KV head: head_dim numbers, and in an 8-bit cache
        their float16 scale (kernels/quantized_kv.py)."""
        return self.head_dim * bytes_per_element + (QUANTIZED_KV_SCALE_BYTES if bytes_per_element == 1 else 0)

    def kv_row_text(self, bytes_per_element: int) -> str:
        """kv_row_bytes written out: "64 dims × 2 B", "(64 dims × 1 B + 2 B scale)"."""
        text = f"{self.head_dim} dims × {bytes_per_element} B"
        return f"({text} + {QUANTIZED_KV_SCALE_BYTES} B scale)" if bytes_per_element == 1 else text

    def kv_bytes_per_token(self, bytes_per_element: int) -> int:
        """K and V for one token across all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.kv_row_bytes(bytes_per_element)


def with_gemma3_traits(
    config: ModelConfig,
    *,
    query_pre_attn_scalar: float,
    sliding_window: int,
    sliding_layers: tuple[int, ...],
    local_rope_theta: float,
) -> ModelConfig:
    """A Llama-shaped config with what every Gemma 3 text decoder changes, whichever file it came
    from; the arguments are what files state (or loaders derive) per model."""
    return dataclasses.replace(
        config,
        norm_weight_offset=1.0,
        qk_norm=True,
        sandwich_norms=True,
        hidden_activation="gelu_tanh",
        embedding_scale=config.hidden_size**0.5,
        attention_scale=query_pre_attn_scalar**-0.5,
        sliding_window=sliding_window,
        sliding_layers=sliding_layers,
        local_rope_theta=local_rope_theta,
    )
