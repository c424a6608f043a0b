"""What one engine step asks of one GPU, operator by operator: the bytes each moves through memory
and the FLOPs each does (engine/simulation/cost_model.py turns them into time, each at its own
roofline). The formulas and what they leave out: docs/memory.md, "The step cost, per operator".

Every function takes the step's shape (per sequence: new tokens, context after the step, whether
it samples) and returns one GPU's share under `tensor` GPUs of tensor parallelism; pipeline
stages split the layers, which engine/simulation/cost_model.py accounts for."""

from __future__ import annotations

from dataclasses import dataclass

from engine.model_spec.model_config import ModelConfig

LOGIT_BYTES = 4  # logits are float32, whatever the weights
# Reads of the logits per sampling row: the softmax, the top-k/top-p selection, the draw.
SAMPLING_PASSES = 3


@dataclass(frozen=True)
class OperatorCost:
    name: str
    streamed_bytes: float  # read or written in long runs (weights, logits, embedding rows)
    gathered_bytes: float  # read through block tables (paged K/V): its own bandwidth efficiency
    flops: float


def tokens_of(sequences) -> int:
    return sum(new for new, _, _ in sequences)


def samples_of(sequences) -> int:
    return sum(1 for _, _, samples in sequences if samples)


def causal_pairs(model: ModelConfig, new: int, context: int) -> int:
    """(query, key) pairs of `new` queries ending at position `context`, summed over layers: query
    at position p attends to p keys in a full-attention layer, min(window, p) in a sliding one."""

    def up_to(last: int, window: int) -> int:  # sum over p = 1..last of min(window, p)
        if last <= window:
            return last * (last + 1) // 2
        return window * (window + 1) // 2 + (last - window) * window

    start = context - new
    full = context * (context + 1) // 2 - start * (start + 1) // 2
    sliding = model.num_sliding_layers
    windowed = up_to(context, model.sliding_window) - up_to(start, model.sliding_window) if sliding else 0
    return (model.num_layers - sliding) * full + sliding * windowed


def attended_kv_bytes(sequences, model: ModelConfig, kv_bytes_per_token: float) -> float:
    """The whole model's K/V the sequences attend to: each one's attended positions (a sliding
    layer at most its window) x one token's K/V in one layer."""
    return sum(model.attended_positions(context) for _, context, _ in sequences) * kv_bytes_per_token / model.num_layers


def dense_products(sequences, model: ModelConfig, dense_weight_bytes: float, tensor: int) -> OperatorCost:
    """The layers' projections (Q, K, V, O, gate, up, down): each GPU streams its 1/tensor of their
    weights once, whatever the batch, and multiplies them by every new token:
    bytes = dense weight bytes / tensor; FLOPs = 2 x projection parameters x tokens / tensor."""
    return OperatorCost(
        "dense products",
        streamed_bytes=dense_weight_bytes / tensor,
        gathered_bytes=0.0,
        flops=2 * model.num_projection_parameters * tokens_of(sequences) / tensor,
    )


def attention(sequences, model: ModelConfig, kv_bytes_per_token: float, kv_share: float, tensor: int) -> OperatorCost:
    """Each sequence reads the K/V of the positions it attends to (its context; a sliding-window
    layer at most its window) once per layer, through its block table, and each query multiplies
    Q.K^T and P.V over the keys before it (causal, not the whole square):
    bytes = sum of attended positions x K/V bytes of one token in one layer x this GPU's share of
    the KV heads; FLOPs = 4 x heads x head_dim x causal (query, key) pairs / tensor."""
    pairs = sum(causal_pairs(model, new, context) for new, context, _ in sequences)
    return OperatorCost(
        "attention",
        streamed_bytes=0.0,
        gathered_bytes=attended_kv_bytes(sequences, model, kv_bytes_per_token) * kv_share,
        flops=4 * model.num_heads * model.head_dim * pairs / tensor,
    )


def lm_head(sequences, model: ModelConfig, bytes_per_weight: float, tensor: int) -> OperatorCost:
    """The rows that sample (a prefill's last token, every decode) times the output embedding:
    its vocab/tensor slice streamed once, float32 logits written:
    bytes = vocab x hidden x bytes per weight / tensor + samples x vocab x 4 / tensor;
    FLOPs = 2 x vocab x hidden x samples / tensor. No row samples: no head at all."""
    samples = samples_of(sequences)
    if not samples:
        return OperatorCost("LM head", 0.0, 0.0, 0.0)
    table = model.vocab_size * model.hidden_size
    return OperatorCost(
        "LM head",
        streamed_bytes=(table * bytes_per_weight + samples * model.vocab_size * LOGIT_BYTES) / tensor,
        gathered_bytes=0.0,
        flops=2 * table * samples / tensor,
    )


def embedding(sequences, model: ModelConfig, bytes_per_weight: float) -> OperatorCost:
    """The new tokens' rows of the embedding table, gathered (not the table streamed):
    bytes = tokens x hidden x bytes per weight."""
    return OperatorCost(
        "embedding", tokens_of(sequences) * model.hidden_size * bytes_per_weight, gathered_bytes=0.0, flops=0.0
    )


def sampling(sequences, model: ModelConfig) -> OperatorCost:
    """Softmax, top-k/top-p and the draw over each sampling row's logits (on one GPU, after the
    logits are gathered): bytes = samples x vocab x 4 x SAMPLING_PASSES."""
    return OperatorCost(
        "sampling",
        samples_of(sequences) * model.vocab_size * LOGIT_BYTES * SAMPLING_PASSES,
        gathered_bytes=0.0,
        flops=0.0,
    )
