"""`ModelConfig`: the shape of a Llama-family decoder, whichever file format it came from."""

from __future__ import annotations

from dataclasses import dataclass

# Architectures the decoder in engine/model.py implements: all are Llama-shaped (RMSNorm, RoPE,
# grouped-query attention, SwiGLU); Qwen2 adds a bias to the q/k/v projections.
SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2")


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
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

    @property
    def num_parameters(self) -> int:
        """Parameter count from the shapes (embeddings counted once when tied)."""
        hidden = self.hidden_size
        biases = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim if self.attention_bias else 0
        norms = 2 * hidden
        embeddings = self.vocab_size * hidden * (1 if self.tie_word_embeddings else 2)
        return self.num_projection_parameters + self.num_layers * (biases + norms) + embeddings + hidden

    @property
    def num_projection_parameters(self) -> int:
        """The attention and MLP projections' weights: what quantization replaces."""
        q_width, kv_width = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return self.num_layers * self.hidden_size * (2 * q_width + 2 * kv_width + 3 * self.intermediate_size)

    def kv_bytes_per_token(self, bytes_per_element: int) -> int:
        """K and V for one token across all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * bytes_per_element
