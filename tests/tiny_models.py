"""Tiny random Llama (plain, with Llama 3's and with linear RoPE scaling), Qwen2, Qwen3, Mistral (sliding
window) and Gemma 3 checkpoints written as
safetensors, and engines on them: the real engine and loaders at a size that runs in milliseconds
(the fixtures in conftest.py use these)."""

from __future__ import annotations

import torch

from engine import EngineConfig, LLMEngine, SamplingParams

TINY_SHAPE = dict(
    vocab_size=96,
    hidden_size=48,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=6,
    max_position_embeddings=512,
    rms_norm_eps=1e-5,
)


def save_tiny_model(directory, architecture: str, num_kv_heads: int, tie: bool = False):
    """A randomly initialised transformers model saved as safetensors; returns the model."""
    import transformers

    torch.manual_seed(0)
    if architecture == "mistral":  # a window shorter than the test prompts
        config = transformers.MistralConfig(
            **TINY_SHAPE, num_key_value_heads=num_kv_heads, tie_word_embeddings=tie, sliding_window=5
        )
        model = transformers.MistralForCausalLM(config)
    elif architecture in ("gemma3", "gemma3-linear-rope"):
        # Local layers with a 5-token window and their own RoPE base around a global one; a query
        # scale that is not head_dim's. The larger Gemma 3 models scale the global layers' RoPE
        # linearly (by 8) and only those.
        global_scaling = {"rope_type": "linear", "factor": 8.0} if architecture.endswith("rope") else {}
        config = transformers.Gemma3TextConfig(
            **TINY_SHAPE,
            num_key_value_heads=num_kv_heads,
            head_dim=16,
            tie_word_embeddings=tie,
            sliding_window=5,
            layer_types=["sliding_attention", "full_attention"],
            query_pre_attn_scalar=20,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0, **global_scaling},
            },
            pad_token_id=0,
        )
        model = transformers.Gemma3ForCausalLM(config)
    elif architecture == "qwen3":
        config = transformers.Qwen3Config(
            **TINY_SHAPE, num_key_value_heads=num_kv_heads, head_dim=16, tie_word_embeddings=tie, rope_theta=10000.0
        )
        model = transformers.Qwen3ForCausalLM(config)
    elif architecture == "llama3-rope":
        # Llama 3.1's scaling with an original context short enough that the tiny head's four
        # frequencies fall in each of its three bands (kept, interpolated, divided by the factor).
        rope = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=128)
        config = transformers.LlamaConfig(
            **TINY_SHAPE,
            num_key_value_heads=num_kv_heads,
            tie_word_embeddings=tie,
            rope_parameters={"rope_type": "llama3", "rope_theta": 50000.0, **rope},
        )
        model = transformers.LlamaForCausalLM(config)
    elif architecture == "llama-linear-rope":
        config = transformers.LlamaConfig(
            **TINY_SHAPE,
            num_key_value_heads=num_kv_heads,
            tie_word_embeddings=tie,
            rope_parameters={"rope_type": "linear", "rope_theta": 50000.0, "factor": 4.0},
        )
        model = transformers.LlamaForCausalLM(config)
    elif architecture == "qwen2":
        config = transformers.Qwen2Config(
            **TINY_SHAPE, num_key_value_heads=num_kv_heads, tie_word_embeddings=tie, rope_theta=10000.0
        )
        model = transformers.Qwen2ForCausalLM(config)
    else:
        config = transformers.LlamaConfig(
            **TINY_SHAPE, num_key_value_heads=num_kv_heads, tie_word_embeddings=tie, rope_theta=50000.0
        )
        model = transformers.LlamaForCausalLM(config)
    # Random init leaves Qwen2's q/k/v biases and Gemma's norms at zero; give them values so the
    # bias and (1 + weight) paths are tested. Its small query and key weights would leave attention
    # near uniform, blind to positions: larger ones make a wrong rotation show in the logits.
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(("bias", "norm.weight")):
                parameter.normal_(0, 0.5)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                parameter.normal_(0, 0.3)
    model.eval()
    model.save_pretrained(directory, safe_serialization=True)
    return model


def tiny_engine(directory, **overrides) -> LLMEngine:
    settings = dict(model=str(directory), device="cpu", dtype="float32", num_kv_blocks=256, block_size=4)
    settings.update(overrides)
    return LLMEngine(EngineConfig(**settings))


PROMPT = [5, 17, 33, 2, 8, 91, 44, 12, 7, 60, 3, 29, 71]  # 13 tokens: not a multiple of the block size
NEW_TOKENS = 6


def record_logits(engine) -> list[torch.Tensor]:
    """A list that each step's logits are appended to from now on."""
    recorded = []
    compute_logits = engine.executor.compute_logits

    def recording(batch):
        logits = compute_logits(batch)
        recorded.append(logits)
        return logits

    engine.executor.compute_logits = recording
    return recorded


def engine_logits(engine, prompt):
    """Greedy-generate and record the logits of every sampling step."""
    recorded = record_logits(engine)
    output = engine.generate([prompt], SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True))[0]
    return torch.cat(recorded), output.token_ids
