"""A roofline cost model of one engine step, for the simulated executor and for calibration.

step time = PP x stage time + communication + step_overhead + sequence_overhead x sequences
stage time = max(weight bytes / GPUs / (bandwidth x bandwidth_efficiency)
                   + K/V bytes on one GPU / (bandwidth x kv_bandwidth_efficiency),
                 FLOPs / GPUs / (peak x compute_efficiency))
(on one GPU: PP = GPUs = 1 and no communication; several: engine/simulation/parallel.py)
bytes moved: every weight once per step (streamed), plus the K/V of each sequence's context
             (gathered through its block table);
FLOPs:       2 x (non-embedding parameters) per token, attention's QK^T and PV (4 x layers x
             heads x head_dim x new tokens x context), and the LM head for the rows that sample.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.batch import ScheduledBatch
from engine.model_config import ModelConfig
from engine.simulation.catalogue import HardwareProfile
from engine.simulation.parallel import Parallelism


@dataclass(frozen=True)
class StepShape:
    """What a step costs depends on: per sequence, (new tokens, context after the step, samples)."""

    sequences: tuple[tuple[int, int, bool], ...]

    @classmethod
    def of(cls, batch: ScheduledBatch) -> StepShape:
        return cls(tuple((len(entry.token_ids), entry.context_len, entry.samples) for entry in batch.sequences))


class CostModel:
    def __init__(
        self,
        model: ModelConfig,
        hardware: HardwareProfile,
        weight_bytes: int,
        kv_bytes_per_token: int,
        parallelism: Parallelism = Parallelism(),
    ):
        self.model, self.hardware, self.parallelism = model, hardware, parallelism
        self.weight_bytes, self.kv_bytes_per_token = weight_bytes, kv_bytes_per_token
        # The share of the model's K/V one GPU reads (more than 1/GPUs where KV heads are replicated).
        self.kv_share = parallelism.kv_bytes_per_token_per_gpu(model, 2) / model.kv_bytes_per_token(2)
        embeddings = model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)
        self.dense_params = model.num_parameters - embeddings

    def kv_bytes(self, shape: StepShape) -> float:
        """K/V the step's attention reads: a sliding-window layer reads at most its window."""
        layer_token_bytes = self.kv_bytes_per_token / self.model.num_layers
        return sum(self.model.attended_positions(context) for _, context, _ in shape.sequences) * layer_token_bytes

    def flops(self, shape: StepShape) -> float:
        model = self.model
        tokens = sum(new for new, _, _ in shape.sequences)
        attention = sum(
            4 * model.num_heads * model.head_dim * new * model.attended_positions(context)
            for new, context, _ in shape.sequences
        )
        head = sum(2 * model.vocab_size * model.hidden_size for _, _, samples in shape.sequences if samples)
        return 2 * self.dense_params * tokens + attention + head

    def step_time(self, shape: StepShape) -> float:
        hardware, parallelism = self.hardware, self.parallelism
        gpus = parallelism.gpus
        memory_time = self.weight_bytes / gpus / (hardware.bandwidth_bytes_s * hardware.bandwidth_efficiency) + (
            self.kv_bytes(shape) * self.kv_share
        ) / (hardware.bandwidth_bytes_s * hardware.kv_bandwidth_efficiency)
        compute_time = self.flops(shape) / gpus / (hardware.peak_flops * hardware.compute_efficiency)
        tokens = sum(new for new, _, _ in shape.sequences)
        communication = parallelism.communication_s(tokens, self.model, hardware.link_bytes_s, hardware.link_latency_s)
        host_time = hardware.step_overhead_s + hardware.sequence_overhead_s * len(shape.sequences)
        return parallelism.pipeline * max(memory_time, compute_time) + communication + host_time
