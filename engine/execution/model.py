"""A decoder (Llama, Mistral, Qwen2, Qwen3, Gemma 3) over a flat batch of tokens and a paged KV cache.

Gemma 3 departs from the Llama shape in ways `ModelConfig` names: (1 + weight) norms, q/k norms,
norms after attention and the MLP as well as before, a GELU gate, scaled embeddings, and
sliding-window layers with their own RoPE base between the global ones.

Parameter names follow Hugging Face (`model.layers.N.self_attn.q_proj.weight`, ...), so both
loaders hand over one state dict. The batch is flat ([num_tokens, hidden]): decode tokens first,
one per sequence, then each prefill chunk's tokens; `AttentionMetadata` says which is which.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from engine.model_spec.kv_layout import KvLayout
from engine.model_spec.model_config import ModelConfig
from kernels.paged_attention import paged_decode_attention, paged_prefill_attention, write_kv_cache


@dataclass
class PrefillChunk:
    query_start: int  # first row of this chunk in the flat batch
    query_len: int
    context_len: int  # tokens of the sequence in the cache after this chunk
    block_tables: list[torch.Tensor]  # one per KV group (engine/model_spec/kv_layout.py)


@dataclass
class AttentionMetadata:
    # One entry per KV group (engine/model_spec/kv_layout.py); a layer reads its own group's.
    slot_mappings: list[torch.Tensor]  # [num_tokens]: cache slot each token's K/V is written to
    decode_block_tables: list[torch.Tensor]  # [num_decodes, max_blocks]
    decode_context_lens: torch.Tensor  # [num_decodes]
    decode_buckets: list | None  # kernels.paged_attention.length_buckets, shared by every layer; None: one masked group
    prefills: list[PrefillChunk]

    @property
    def num_decode_tokens(self) -> int:
        # A tensor's size rather than a stored int: a compiled graph keeps sizes symbolic, while
        # it would specialise (and recompile) on every distinct int.
        return self.decode_context_lens.shape[0]


class RMSNorm(nn.Module):
    """`offset` 0: Llama's norm (normalised in float32, cast, times the weight). `offset` 1: Gemma's
    (times 1 + weight, in float32, then cast), each as its reference implementation computes it."""

    def __init__(self, size: int, eps: float, offset: float = 0.0):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps, self.offset = eps, offset

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        as_float = hidden.float()
        normalised = as_float * torch.rsqrt(as_float.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.offset:
            return (normalised * (self.offset + self.weight.float())).to(hidden.dtype)
        return self.weight * normalised.to(hidden.dtype)

    def weight_dividing_output_by(self, factors: torch.Tensor) -> torch.Tensor:
        """The weight that makes this norm's output `factors` times smaller (activation smoothing)."""
        return (self.offset + self.weight) / factors - self.offset


class RotaryEmbedding(nn.Module):
    """Rotate-half RoPE with cos/sin tables precomputed for every position; `divisors` (one per
    pair of dimensions) scale the frequencies for long contexts (ModelConfig.rope_frequency_divisors)."""

    def __init__(self, head_dim: int, max_positions: int, theta: float, divisors: tuple[float, ...] = ()):
        super().__init__()
        inverse_frequency = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        if divisors:
            inverse_frequency = inverse_frequency / torch.tensor(divisors, dtype=torch.float32)
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inverse_frequency)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def tables(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for these positions, [num_tokens, 1, head_dim]: looked up once per step and
        shared by every layer."""
        return self.cos[positions].unsqueeze(1).to(dtype), self.sin[positions].unsqueeze(1).to(dtype)


def apply_rotary(heads: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on [num_tokens, heads, head_dim]: query and key heads together, one set of operators."""
    return heads * cos + _rotate_half(heads) * sin


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.num_heads, self.kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.scale = config.attention_scale or self.head_dim**-0.5
        self.window = config.sliding_window if config.is_sliding(layer) else None
        self.kv_group, _ = KvLayout.of(config).place(layer)
        if config.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps, config.norm_weight_offset)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps, config.norm_weight_offset)
        self.qk_norm = config.qk_norm
        hidden, bias = config.hidden_size, config.attention_bias
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=False)
        # An int8 cache's matrices for keys and queries (kernels/quantized_kv.py, key_transforms).
        self.key_transform: torch.Tensor | None = None
        self.query_transform: torch.Tensor | None = None

    def fuse(self) -> None:
        """One matmul for q, k and v instead of three (fewer, larger calls; same numbers)."""
        self.qkv_proj = _concatenated(self.q_proj, self.k_proj, self.v_proj)
        del self.q_proj, self.k_proj, self.v_proj

    def key_gains(self) -> torch.Tensor | None:
        """The gain per channel this layer's key norm applies (qk-norm models), else None."""
        return self.k_norm.offset + self.k_norm.weight.detach().float() if self.qk_norm else None

    def project(self, hidden, rotary_tables) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Query, key and value heads [num_tokens, heads, head_dim] of the normed hidden states,
        q/k-normed and rotated."""
        num_tokens = hidden.shape[0]
        heads = self.qkv_proj(hidden).view(num_tokens, self.num_heads + 2 * self.kv_heads, self.head_dim)
        value = heads[:, self.num_heads + self.kv_heads :]
        if self.qk_norm:
            query = apply_rotary(self.q_norm(heads[:, : self.num_heads]), *rotary_tables)
            key = apply_rotary(self.k_norm(heads[:, self.num_heads : self.num_heads + self.kv_heads]), *rotary_tables)
        else:
            rotated = apply_rotary(heads[:, : self.num_heads + self.kv_heads], *rotary_tables)
            query, key = rotated[:, : self.num_heads], rotated[:, self.num_heads :]
        return query, key, value

    def attend(self, query, key, value, kv_cache, metadata: AttentionMetadata) -> torch.Tensor:
        """Writes the new keys and values into the cache, then attends: the attention output
        [num_tokens, heads, head_dim], before the output projection."""
        key_cache, value_cache = kv_cache
        if self.key_transform is not None:  # matched transforms: every score kept
            query, key = query @ self.query_transform.to(query.dtype), key @ self.key_transform.to(key.dtype)
        write_kv_cache(key, value, key_cache, value_cache, metadata.slot_mappings[self.kv_group])

        decodes = metadata.num_decode_tokens
        decode_attention = functools.partial(
            paged_decode_attention,
            key_cache=key_cache,
            value_cache=value_cache,
            block_tables=metadata.decode_block_tables[self.kv_group],
            context_lens=metadata.decode_context_lens,
            scale=self.scale,
            buckets=metadata.decode_buckets,
            window=self.window,
        )
        if not metadata.prefills:  # decode only: no slicing, so no size for a compiled graph to specialise on
            return decode_attention(query)
        out = torch.empty_like(query)
        if decodes:
            out[:decodes] = decode_attention(query[:decodes])
        for chunk in metadata.prefills:
            rows = slice(chunk.query_start, chunk.query_start + chunk.query_len)
            out[rows] = paged_prefill_attention(
                query[rows],
                key[rows],
                value[rows],
                key_cache,
                value_cache,
                chunk.block_tables[self.kv_group],
                chunk.context_len,
                self.scale,
                self.window,
            )
        return out


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        if config.hidden_activation not in _ACTIVATIONS:
            raise ValueError(
                f"hidden_activation {config.hidden_activation!r}: expected one of {', '.join(_ACTIVATIONS)}"
            )
        self.activation = _ACTIVATIONS[config.hidden_activation]
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def fuse(self) -> None:
        self.gate_up_proj = _concatenated(self.gate_proj, self.up_proj)
        del self.gate_proj, self.up_proj

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(hidden).chunk(2, dim=-1)
        return self.down_proj(self.activation(gate) * up)


_ACTIVATIONS = {"silu": F.silu, "gelu_tanh": functools.partial(F.gelu, approximate="tanh")}


def _concatenated(*linears: nn.Linear) -> nn.Linear:
    """A Linear computing the given ones side by side (their outputs concatenated)."""
    has_bias = linears[0].bias is not None
    fused = nn.Linear(
        linears[0].in_features,
        sum(linear.out_features for linear in linears),
        bias=has_bias,
        device=linears[0].weight.device,
        dtype=linears[0].weight.dtype,
    )
    with torch.no_grad():
        fused.weight.copy_(torch.cat([linear.weight for linear in linears]))
        if has_bias:
            fused.bias.copy_(torch.cat([linear.bias for linear in linears]))
    return fused.requires_grad_(False)


class DecoderLayer(nn.Module):
    """Llama: x + attn(norm(x)), then x + mlp(post_attention_layernorm(x)). With sandwich norms
    (Gemma): x + post_attention_layernorm(attn(norm(x))), then
    x + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))."""

    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        size, eps, offset = config.hidden_size, config.rms_norm_eps, config.norm_weight_offset
        self.is_sliding = config.is_sliding(layer)
        self.input_layernorm = RMSNorm(size, eps, offset)
        self.self_attn = Attention(config, layer)
        self.post_attention_layernorm = RMSNorm(size, eps, offset)
        self.mlp = MLP(config)
        self.sandwich_norms = config.sandwich_norms
        if config.sandwich_norms:
            self.pre_feedforward_layernorm = RMSNorm(size, eps, offset)
            self.post_feedforward_layernorm = RMSNorm(size, eps, offset)

    @property
    def mlp_input_norm(self) -> RMSNorm:
        """The norm whose output the MLP reads (activation smoothing folds into it)."""
        return self.pre_feedforward_layernorm if self.sandwich_norms else self.post_attention_layernorm

    def forward(self, hidden, rotary_tables, kv_cache, metadata, halves: LayerHalves | None = None):
        """`halves`: how to run the parts either side of attention (eager when None)."""
        halves = halves or EAGER_HALVES
        query, key, value = halves.before_attention(self, hidden, rotary_tables)
        attended = self.self_attn.attend(query, key, value, kv_cache, metadata)
        return halves.after_attention(self, hidden, attended)


def before_attention(layer: DecoderLayer, hidden, rotary_tables) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A layer up to attention: its input norm, the q/k/v product, q/k norms and RoPE."""
    return layer.self_attn.project(layer.input_layernorm(hidden), rotary_tables)


def after_attention(layer: DecoderLayer, hidden, attended) -> torch.Tensor:
    """A layer from attention on: the output product, the residual adds, the norms and the MLP.
    `attended` is attention's output [num_tokens, heads, head_dim]."""
    attended = layer.self_attn.o_proj(attended.reshape(attended.shape[0], -1))
    if not layer.sandwich_norms:
        hidden = hidden + attended
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    hidden = hidden + layer.post_attention_layernorm(attended)
    return hidden + layer.post_feedforward_layernorm(layer.mlp(layer.pre_feedforward_layernorm(hidden)))


@dataclass(frozen=True)
class LayerHalves:
    """The two parts of a decoder layer either side of attention, as functions of (layer, ...).
    Attention itself loops over a step's prefill chunks in Python, so it stays eager; these two
    hold the products and every element-wise operator around them, and the executor swaps in
    compiled copies of them for steps that prefill (engine/execution/compiled_prefill.py)."""

    before_attention: Callable = before_attention
    after_attention: Callable = after_attention


EAGER_HALVES = LayerHalves()


class DecoderBody(nn.Module):
    """The `model.` prefix of Hugging Face's parameter names."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, layer) for layer in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, config.norm_weight_offset)


class CausalLM(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = DecoderBody(config)
        self.build_rotary()
        # The embedding scale as a buffer, so that it takes the compute dtype with the weights, as
        # the reference's does (in bf16, sqrt(640) is 25.25, not 25.298).
        self.register_buffer("embedding_scale", torch.tensor(config.embedding_scale), persistent=False)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.quantized_head: nn.Module | None = None  # set by quantize_model(quantize_lm_head=True)

    def build_rotary(self) -> None:
        """The RoPE tables (computed, never loaded): one set, or a second for the sliding-window
        layers where their base differs or the global layers' is scaled (Gemma 3 scales only those)."""
        config = self.config
        self.rotary = RotaryEmbedding(
            config.head_dim, config.max_position_embeddings, config.rope_theta, config.rope_frequency_divisors
        )
        self.local_rotary = None
        if config.local_rope_theta and (config.local_rope_theta != config.rope_theta or config.rope_frequency_divisors):
            self.local_rotary = RotaryEmbedding(
                config.head_dim, config.max_position_embeddings, config.local_rope_theta
            )

    def forward(
        self, token_ids, positions, kv_caches, metadata: AttentionMetadata, halves: LayerHalves | None = None
    ) -> torch.Tensor:
        """Hidden states [num_tokens, hidden] before the final norm; `halves` as DecoderLayer.forward."""
        hidden = self.model.embed_tokens(token_ids)
        if self.config.embedding_scale != 1.0:
            hidden = hidden * self.embedding_scale
        rotary_tables = self.rotary.tables(positions, hidden.dtype)
        local_tables = rotary_tables if self.local_rotary is None else self.local_rotary.tables(positions, hidden.dtype)
        for layer, kv_cache in zip(self.model.layers, kv_caches):
            hidden = layer(hidden, local_tables if layer.is_sliding else rotary_tables, kv_cache, metadata, halves)
        return hidden

    def forward_logits(self, token_ids, positions, kv_caches, metadata: AttentionMetadata) -> torch.Tensor:
        """Float32 logits for every row (a decode-only batch, where every row samples)."""
        return self.compute_logits(self(token_ids, positions, kv_caches, metadata))

    def fuse_projections(self) -> None:
        """Merge q/k/v and gate/up once the weights are loaded (the file's names are per projection)."""
        for layer in self.model.layers:
            layer.self_attn.fuse()
            layer.mlp.fuse()

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Float32 logits for the given rows (only the rows that sample, to save the vocab matmul)."""
        normed = self.model.norm(hidden)
        if self.quantized_head is not None:
            return self.quantized_head(normed).float()
        head = self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight
        return F.linear(normed, head).float()
