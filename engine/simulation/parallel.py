"""Several GPUs on paper: how a model splits under tensor parallelism (TP) and pipeline
parallelism (PP), vLLM's `tensor_parallel_size` and `pipeline_parallel_size`, and what that costs.

- Hardware with a count: "4xh100-80gb" is four of the catalogue's h100-80gb, joined by that GPU's
  interconnect (its `link_bytes_s` per direction and `link_latency_s` per hop, with their source).
- Memory per GPU: weights / (TP x PP); each GPU holds the K/V of its layers (num_layers / PP) for
  its share of the KV heads (num_kv_heads / TP, or one replicated head when there are fewer KV
  heads than GPUs, as vLLM does).
- Time: under TP each layer ends its attention and its MLP with an all-reduce of the step's
  activations (tokens x hidden x 2 bytes), and the faster of two algorithms carries it, as NCCL's
  tuner and vLLM's custom all-reduce pick by message size: one-shot (each GPU reads the n-1 other
  buffers and sums them itself: one hop, (n-1) x the message over its link), fastest for the small
  messages of decode steps; or a ring (2(n-1)/n of the message over each link, in 2(n-1) hops),
  fastest for the large ones of prefills. Under PP a step's batch passes the stages one after
  another: without micro-batches each GPU is busy 1/PP of the step, idle the rest (the bubble).

Assumptions, not measurements: activations at 16 bits; no overlap of communication with compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.configuration.memory import (
    MOST_OF_MEMORY,
    MemoryLine,
    activation_bytes_estimate,
    kv_budget_bytes,
    kv_request_bytes,
    runtime_overhead_line,
    weight_bytes_estimate,
)
from engine.errors import ConfigError
from engine.model_spec.model_config import ModelConfig

ACTIVATION_BYTES = 2  # 16-bit activations between GPUs


# Each simulated instance is an engine in this process (64 instances of Llama-3-8B: 2.7 s to build
# and 0.4 GB on the 2-core VM): a bound keeps a typo such as 1000000xh100-80gb from filling the
# memory (past 4.5 GB in 46 s).
MAX_SIMULATED_GPUS = 256


def parse_gpu_count(hardware: str) -> tuple[int, str]:
    """(count, the catalogue's name for one GPU): "4xh100-80gb" -> (4, "h100-80gb"), "l4" -> (1, "l4")."""
    count, separator, single = hardware.partition("x")
    if separator and count.isdigit() and single:
        if not 1 <= int(count) <= MAX_SIMULATED_GPUS:
            raise ConfigError(
                f"hardware {hardware!r}: expected 1 to {MAX_SIMULATED_GPUS} GPUs, as in 4xh100-80gb, got {int(count):,}"
            )
        return int(count), single
    return 1, hardware


@dataclass(frozen=True)
class Parallelism:
    tensor: int = 1  # tensor_parallel_size
    pipeline: int = 1  # pipeline_parallel_size

    @property
    def gpus(self) -> int:
        return self.tensor * self.pipeline

    def check(self, model: ModelConfig, model_name: str, gpu_count: int, hardware: str) -> None:
        """ConfigError, in one line naming the value and what was expected, for a split the model
        or the hardware cannot take."""
        tp, pp = self.tensor, self.pipeline
        if tp < 1 or pp < 1:
            raise ConfigError(f"tensor_parallel_size, pipeline_parallel_size: expected at least 1, got {tp} and {pp}")
        if self.gpus != gpu_count:
            raise ConfigError(  # the reason first: a status line cut at 800 px still says it
                f"{hardware} has {gpu_count} GPUs, not the {self.gpus} these settings split the model over "
                f"(tensor_parallel_size x pipeline_parallel_size = {tp} x {pp}); expected {gpu_count}"
                + (f" (or name the hardware {self.gpus}x...)" if self.gpus > 1 else "")
            )
        if model.num_heads % tp:
            raise ConfigError(
                f"tensor_parallel_size: {model_name}'s {model.num_heads} attention heads do not divide by {tp}; "
                f"expected a divisor of {model.num_heads}"
            )
        kv = model.num_kv_heads
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            raise ConfigError(
                f"tensor_parallel_size: {model_name}'s {kv} KV heads neither divide by {tp} nor divide it; "
                "expected a divisor or a multiple of the KV heads"
            )
        if model.num_layers % pp:
            raise ConfigError(
                f"pipeline_parallel_size: {model_name}'s {model.num_layers} layers do not divide by {pp}; "
                f"expected a divisor of {model.num_layers}"
            )

    def kv_heads_per_gpu(self, model: ModelConfig) -> int:
        """Each GPU's KV heads: its share, or one replicated head when there are fewer than GPUs."""
        return max(model.num_kv_heads // self.tensor, 1)

    def kv_bytes_per_token_per_gpu(self, model: ModelConfig, bytes_per_value: int) -> int:
        """One token's K and V on one GPU: its layers, its KV heads (an 8-bit row with its scale)."""
        layers = model.num_layers // self.pipeline
        return 2 * layers * self.kv_heads_per_gpu(model) * model.kv_row_bytes(bytes_per_value)

    def weight_bytes_per_gpu(self, weight_bytes: int) -> int:
        return math.ceil(weight_bytes / self.gpus)

    def all_reduce_buffer_bytes(self, model: ModelConfig, step_tokens: int) -> int:
        """The activations one all-reduce carries (none without TP)."""
        return step_tokens * model.hidden_size * ACTIVATION_BYTES if self.tensor > 1 else 0

    def all_reduce_s(self, tokens: int, model: ModelConfig, link_bytes_s: float, link_latency_s: float) -> float:
        """One all-reduce of `tokens` tokens' activations across the TP group, by the faster of
        one-shot and ring for its size."""
        if self.tensor == 1 or tokens == 0:
            return 0.0
        message = tokens * model.hidden_size * ACTIVATION_BYTES
        return all_reduce_s(message, self.tensor, link_bytes_s, link_latency_s)

    def communication_s(self, tokens: int, model: ModelConfig, link_bytes_s: float, link_latency_s: float) -> float:
        """A step's time on the links: two all-reduces per layer (TP), and a hand-over of the
        activations between consecutive stages (PP)."""
        all_reduces = 2 * model.num_layers * self.all_reduce_s(tokens, model, link_bytes_s, link_latency_s)
        if self.pipeline == 1 or tokens == 0:  # one GPU's profile may have no link at all
            return all_reduces
        hand_over = tokens * model.hidden_size * ACTIVATION_BYTES / link_bytes_s + link_latency_s
        return all_reduces + (self.pipeline - 1) * hand_over

    def kv_transfer_s(
        self, tokens: int, model: ModelConfig, bytes_per_value: int, link_bytes_s: float, link_latency_s: float
    ) -> float:
        """Sending `tokens` tokens' K/V from a prefill instance to a decode instance of the same
        split: each GPU sends its own share (its layers, its KV heads) to its counterpart, all at
        once, over its link: one GPU's bytes / the link's bandwidth each way + one hop."""
        return tokens * self.kv_bytes_per_token_per_gpu(model, bytes_per_value) / link_bytes_s + link_latency_s

    @property
    def bubble(self) -> float:
        """The share of a step each GPU waits for the other stages (no micro-batches)."""
        return (self.pipeline - 1) / self.pipeline


def one_shot_all_reduce_s(message_bytes: float, gpus: int, link_bytes_s: float, link_latency_s: float) -> float:
    """Every GPU reads the other n-1 buffers and sums them: one hop, (n-1) x message over its link."""
    return (gpus - 1) * message_bytes / link_bytes_s + link_latency_s


def ring_all_reduce_s(message_bytes: float, gpus: int, link_bytes_s: float, link_latency_s: float) -> float:
    """Reduce-scatter then all-gather around a ring: 2(n-1)/n x message over each link, 2(n-1) hops."""
    return 2 * (gpus - 1) / gpus * message_bytes / link_bytes_s + 2 * (gpus - 1) * link_latency_s


def all_reduce_s(message_bytes: float, gpus: int, link_bytes_s: float, link_latency_s: float) -> float:
    """The faster of the two for this message: one-shot below a size of about
    (2n - 3) x latency x bandwidth / ((n - 1)(1 - 2/n)) (7.5 MB for 4 H100s), ring above."""
    return min(
        one_shot_all_reduce_s(message_bytes, gpus, link_bytes_s, link_latency_s),
        ring_all_reduce_s(message_bytes, gpus, link_bytes_s, link_latency_s),
    )


def per_gpu_lines(
    model: ModelConfig,
    parallelism: Parallelism,
    memory_bytes: float,
    bits: int,
    kv_bytes: int,
    context: int,
    step_tokens: int,
    max_seqs: int,
    group_size: int | None = None,
) -> tuple[list[MemoryLine], int]:
    """One GPU's memory under the split, and how many `context`-token requests the group holds
    (every GPU holds its share of each request's K/V, so what fits on one fits on all). Activations
    are counted whole on every GPU: an upper bound."""
    tp, pp = parallelism.tensor, parallelism.pipeline
    all_weights = weight_bytes_estimate(model, bits, group_size)
    weights = parallelism.weight_bytes_per_gpu(all_weights)
    activations = activation_bytes_estimate(model, step_tokens, max(bits, 16) // 8, max_seqs)
    buffer = parallelism.all_reduce_buffer_bytes(model, step_tokens)
    free = kv_budget_bytes(memory_bytes, MOST_OF_MEMORY, weights, activations, buffer)
    whole_request, _ = kv_request_bytes(model, kv_bytes, context, "")
    per_token = parallelism.kv_bytes_per_token_per_gpu(model, kv_bytes)
    per_request = math.ceil(whole_request * per_token / model.kv_bytes_per_token(kv_bytes))
    fits = max(0, free // per_request)
    heads = parallelism.kv_heads_per_gpu(model)
    replicated = " (replicated: fewer KV heads than GPUs)" if model.num_kv_heads < tp else ""
    lines = [
        MemoryLine(
            "weights",
            weights,
            f"{all_weights / 1e9:.2f} GB at {bits} bits / ({tp} x {pp} GPUs) = {weights / 1e9:.2f} GB",
            measured=False,
        ),
        MemoryLine("activations", activations, f"{step_tokens} tokens/step, counted whole on each GPU", False),
        MemoryLine(
            "all-reduce buffer",
            buffer,
            f"{step_tokens} tokens x {model.hidden_size} x {ACTIVATION_BYTES} B" if buffer else "none without TP",
            measured=False,
        ),
        runtime_overhead_line(memory_bytes),
        MemoryLine(
            "KV cache",
            max(free, 0),
            f"{memory_bytes / 1e9:.1f} GB - the lines above = {free / 1e9:.2f} GB; a token's K/V here: 2 x "
            f"{model.num_layers // pp} layers x {heads} KV heads{replicated} x {model.head_dim} dims x {kv_bytes} B "
            f"= {per_token / 1024:,.0f} KiB; {per_request / 1e9:.3f} GB per {context:,}-token request",
            measured=False,
        ),
    ]
    return lines, fits
