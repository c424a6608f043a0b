"""A tiny transformers model written as a llama.cpp GGUF file (float32 tensors, a small
SentencePiece vocabulary), laid out as llama.cpp's converter lays it out: GGUF tensor names, Llama's
q/k rows permuted for interleaved RoPE, Llama 3's scaling as the rope_freqs tensor. The GGUF loader
reads it back and must give transformers' logits (tests/engine/loading/test_gguf_architectures.py)."""

from __future__ import annotations

import gguf
import numpy as np
import torch

_LAYER_TENSORS = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def save_tiny_gguf(path, model, architecture: str, rope_scaling: str = "none") -> None:
    """`model`: a Llama or Qwen3 transformers model (tests/tiny_models.save_tiny_model).
    `rope_scaling`: the rope.scaling.type to declare; "linear" takes the model's factor; Llama 3's
    scaling is written as llama.cpp writes it, as a rope_freqs tensor."""
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    if rope_scaling != "none":
        writer.add_rope_scaling_type(gguf.RopeScalingType(rope_scaling))
    if rope_scaling == "linear":
        writer.add_rope_scaling_factor(config.rope_parameters["factor"])
    # Single characters only (no merges to learn); ids 0-2 are <unk>, <s>, </s> as in Llama 2.
    tokens = ["<unk>", "<s>", "</s>"] + [chr(ord("!") + index) for index in range(config.vocab_size - 3)]
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types([2, 3, 3] + [1] * (len(tokens) - 3))  # unknown, control, control, normal
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    state = {name: tensor.detach().float().numpy() for name, tensor in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])
    if not config.tie_word_embeddings:
        writer.add_tensor("output.weight", state["lm_head.weight"])
    inverse_frequency = model.model.rotary_emb.inv_freq.float()
    unscaled = 1.0 / (config.rope_parameters["rope_theta"] ** (torch.arange(0, head_dim, 2).float() / head_dim))
    if config.rope_parameters["rope_type"] == "llama3":
        writer.add_tensor("rope_freqs.weight", (unscaled / inverse_frequency).numpy())
    for layer in range(config.num_hidden_layers):
        for hf_part, gguf_part in _LAYER_TENSORS.items():
            name = f"model.layers.{layer}.{hf_part}.weight"
            if name not in state:
                continue
            values = state[name]
            if architecture == "llama" and gguf_part in ("attn_q", "attn_k"):
                values = _permute_rotary_rows(values, heads if gguf_part == "attn_q" else kv_heads)
            writer.add_tensor(f"blk.{layer}.{gguf_part}.weight", np.ascontiguousarray(values))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _permute_rotary_rows(weights: np.ndarray, num_heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's `permute`: per head, rotate-half rows -> interleaved pairs."""
    return (
        weights.reshape(num_heads, 2, weights.shape[0] // num_heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )
