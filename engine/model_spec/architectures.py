"""One place per model architecture: what the loaders, the tokenizer and the exporter need to know
about it. The decoder (engine/execution/model.py) implements a Llama shape and what these entries change in
it: Qwen2's q/k/v biases, Qwen3's RMSNorm over each query and key head, Mistral's window, Gemma 3's
text decoder. A new architecture is an entry in `ARCHITECTURES` (with its traits hooks where it
changes the Llama shape) and its tests; nothing else compares architecture names
(tests/test_architecture.py). docs/extending.md walks through adding one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from engine.errors import ModelLoadError
from engine.model_spec.model_config import ModelConfig, with_gemma3_traits

# A GGUF file's metadata key of this architecture ("attention.sliding_window" for
# "gemma3.attention.sliding_window"), with a default, or ModelLoadError naming it.
MetadataKey = Callable[..., object]

# GGUF's per-layer tensor names (blk.N.<part>) -> the Hugging Face module under model.layers.N.
LLAMA_LAYER_NAMES = MappingProxyType(
    {
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
)
_QK_NORM_NAMES = {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
# Gemma 3 names its norms differently: "ffn_norm" is the norm before the MLP, and the norms after
# attention and the MLP have names of their own.
_GEMMA3_LAYER_NAMES = {
    **LLAMA_LAYER_NAMES,
    **_QK_NORM_NAMES,
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
# Gemma 3's local layers in a GGUF file: all but every sixth (llama.cpp's swa pattern).
_GEMMA3_GLOBAL_EVERY = 6
_GEMMA3_LOCAL_ROPE_THETA = 10_000.0
_UNSCALED_HF_ROPE = "default"
# The turn format of Gemma 3's own template, for GGUF files that carry none (Gemma 3 270M's).
_GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)


def _unchanged(config: ModelConfig, *_) -> ModelConfig:
    return config


def _no_settings(config: ModelConfig) -> dict:
    return {}


@dataclass(frozen=True)
class Architecture:
    name: str  # ours, and a GGUF file's general.architecture
    hf_model_type: str  # config.json's model_type
    hf_class: str  # transformers' class, written into an exported config.json
    gguf_layer_names: Mapping[str, str] = field(default_factory=lambda: LLAMA_LAYER_NAMES)
    # llama.cpp's converter permuted the q/k rows to interleave rotary pairs: undone on load.
    permuted_qk: bool = False
    qk_norm: bool = False  # RMSNorm on each head's query and key
    always_attention_bias: bool = False  # q/k/v biases whatever config.json says (Qwen2)
    tied_by_default: bool = False  # tie_word_embeddings when config.json does not say
    rope_per_layer_type: bool = False  # config.json nests RoPE settings per layer type
    # A SentencePiece vocabulary that spells runs of spaces with real spaces, merges by token id
    # and adds no space in front of the text unless the file says so (Gemma's).
    spaces_spelled_out: bool = False
    chat_template: str | None = None  # for GGUF files that carry none
    # The traits hooks: what the architecture changes in a Llama-shaped config, from a GGUF file's
    # metadata or from config.json; and the keys an exported config.json adds.
    from_gguf: Callable[[ModelConfig, MetadataKey], ModelConfig] = field(default=_unchanged)
    from_hf: Callable[[ModelConfig, dict, Path], ModelConfig] = field(default=_unchanged)
    hf_settings: Callable[[ModelConfig], dict] = field(default=_no_settings)


def _gemma3_from_gguf(config: ModelConfig, key: MetadataKey) -> ModelConfig:
    layers = config.num_layers
    return with_gemma3_traits(
        config,
        # The file does not store query_pre_attn_scalar; llama.cpp's rule: head_dim, except for the
        # 27B model (62 layers), which scales by hidden / heads.
        query_pre_attn_scalar=config.hidden_size / config.num_heads if layers == 62 else config.head_dim,
        sliding_window=int(key("attention.sliding_window")),
        sliding_layers=tuple(layer for layer in range(layers) if (layer + 1) % _GEMMA3_GLOBAL_EVERY),
        local_rope_theta=_GEMMA3_LOCAL_ROPE_THETA,
    )


def _gemma3_from_hf(config: ModelConfig, raw: dict, config_file: Path) -> ModelConfig:
    activation = raw.get("hidden_activation", "gelu_pytorch_tanh")
    if activation != "gelu_pytorch_tanh":
        raise ModelLoadError(
            f"{config_file}: hidden_activation {activation!r} is not supported; expected gelu_pytorch_tanh"
        )
    local_rope = hf_rope_settings(raw).get("sliding_attention", {})
    local_scaling = local_rope.get("rope_type", local_rope.get("type", _UNSCALED_HF_ROPE))
    if local_scaling != _UNSCALED_HF_ROPE:
        raise ModelLoadError(
            f"{config_file}: rope sliding_attention.rope_type {local_scaling!r} is not supported; "
            "the sliding-window layers' RoPE must be unscaled"
        )
    pattern = raw.get("sliding_window_pattern", 6)
    layer_types = raw.get("layer_types") or [
        "full_attention" if (layer + 1) % pattern == 0 else "sliding_attention" for layer in range(config.num_layers)
    ]
    return with_gemma3_traits(
        config,
        query_pre_attn_scalar=float(raw.get("query_pre_attn_scalar", 256)),
        sliding_window=int(raw.get("sliding_window") or 4096),
        sliding_layers=tuple(layer for layer, kind in enumerate(layer_types) if kind == "sliding_attention"),
        local_rope_theta=float(local_rope.get("rope_theta", raw.get("rope_local_base_freq", 10_000.0))),
    )


def _gemma3_hf_settings(config: ModelConfig) -> dict:
    """Gemma 3's keys in the form transformers 4.5x and 5 both read."""
    return {
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": _integer_if_whole(config.attention_scale**-2),
        "sliding_window": config.sliding_window,
        "layer_types": [
            "sliding_attention" if config.is_sliding(layer) else "full_attention" for layer in range(config.num_layers)
        ],
        "rope_local_base_freq": config.local_rope_theta,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
    }


def _integer_if_whole(value: float) -> int | float:
    """transformers' Gemma 3 config checks query_pre_attn_scalar is an int, as the models' are."""
    return round(value) if abs(value - round(value)) < 1e-6 else value


def _mistral_from_hf(config: ModelConfig, raw: dict, config_file: Path) -> ModelConfig:
    """Mistral's window, where config.json sets one, covers every layer."""
    if not raw.get("sliding_window"):
        return config
    return dataclasses.replace(
        config, sliding_window=int(raw["sliding_window"]), sliding_layers=tuple(range(config.num_layers))
    )


ARCHITECTURES: dict[str, Architecture] = {
    architecture.name: architecture
    for architecture in (
        Architecture("llama", "llama", "LlamaForCausalLM", permuted_qk=True),
        Architecture(
            "mistral",
            "mistral",
            "MistralForCausalLM",
            from_hf=_mistral_from_hf,
            hf_settings=lambda config: {"sliding_window": config.sliding_window},
        ),
        Architecture("qwen2", "qwen2", "Qwen2ForCausalLM", always_attention_bias=True),
        Architecture(
            "qwen3", "qwen3", "Qwen3ForCausalLM", gguf_layer_names={**LLAMA_LAYER_NAMES, **_QK_NORM_NAMES}, qk_norm=True
        ),
        Architecture(
            "gemma3",
            "gemma3_text",
            "Gemma3ForCausalLM",
            gguf_layer_names=_GEMMA3_LAYER_NAMES,
            tied_by_default=True,
            rope_per_layer_type=True,
            spaces_spelled_out=True,
            chat_template=_GEMMA3_CHAT_TEMPLATE,
            from_gguf=_gemma3_from_gguf,
            from_hf=_gemma3_from_hf,
            hf_settings=_gemma3_hf_settings,
        ),
    )
}
SUPPORTED_ARCHITECTURES = tuple(ARCHITECTURES)


def architecture_named(name: object, where: str) -> Architecture:
    """The entry for a GGUF file's general.architecture, or ModelLoadError naming what is there."""
    if name not in ARCHITECTURES:
        raise ModelLoadError(
            f"{where}: architecture {name!r} is not supported; expected one of {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    return ARCHITECTURES[name]


def architecture_of_model_type(model_type: object, where: str) -> Architecture:
    """The entry for a config.json's model_type, or ModelLoadError naming what is there."""
    for architecture in ARCHITECTURES.values():
        if architecture.hf_model_type == model_type:
            return architecture
    raise ModelLoadError(
        f"{where}: model_type {model_type!r} is not supported; expected one of "
        f"{', '.join(architecture.hf_model_type for architecture in ARCHITECTURES.values())}"
    )


def hf_rope_settings(raw: dict) -> dict:
    """transformers 5 nests rope settings under "rope_parameters" (per layer type for Gemma 3);
    older files use "rope_scaling" and top-level keys, which transformers folds into it."""
    return {**(raw.get("rope_parameters") or {}), **(raw.get("rope_scaling") or {})}
