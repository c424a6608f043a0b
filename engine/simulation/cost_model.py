"""The time of one engine step on simulated GPUs, for the simulated executor and for calibration.

step time = serving stack (GPU time, the step's rows, tokens, new requests)   engine/simulation/serving_stacks.py
GPU time  = sum over operators of roofline(operator) + communication + the hardware's fixed costs
roofline  = (memory time^k + compute time^k)^(1/k), k = the hardware's roofline_sharpness
memory time = streamed bytes / (bandwidth x bandwidth_efficiency)
              + gathered bytes / (bandwidth x kv_bandwidth_efficiency)
compute time = FLOPs / (peak x compute_efficiency)

Each operator (engine/simulation/operators.py: the dense products, attention, the LM head,
embedding, sampling) is timed at its own roofline and the operators run one after another: a
step does not overlap the weights' stream of one with the K/V gather of another. The smooth
roofline turns from memory- to compute-bound gradually, as GEMM efficiency does with the number
of rows, instead of a kink. On one GPU PP = 1 and there is no communication; several:
engine/simulation/parallel.py. docs/memory.md has the assumptions and the figures it is held to.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.model_spec.model_config import ModelConfig
from engine.scheduling.batch import ScheduledBatch
from engine.simulation import operators
from engine.simulation.catalogue import HardwareProfile
from engine.simulation.operators import OperatorCost
from engine.simulation.parallel import Parallelism
from engine.simulation.serving_stacks import IDEAL, ServingStack


@dataclass(frozen=True)
class StepShape:
    """What a step costs depends on: per sequence, (new tokens, context after the step, samples),
    and how many requests start their prefill in it (the stack's per-request cost)."""

    sequences: tuple[tuple[int, int, bool], ...]
    starting: int = 0
    # Rows that prefill, where the batch says (a speculating decode has several new tokens too);
    # None: told by the rows' shapes (a shape read back from a run log).
    prefill_rows: int | None = None

    @property
    def has_prefill(self) -> bool:
        """A row of more than one new token, or a one-token prompt, makes a step one with prefill
        (unless the batch said how many rows prefill)."""
        if self.prefill_rows is not None:
            return self.prefill_rows > 0
        return any(new_tokens > 1 or context == new_tokens for new_tokens, context, _ in self.sequences)

    @classmethod
    def of(cls, batch: ScheduledBatch) -> StepShape:
        return cls(
            tuple((len(entry.token_ids), entry.context_len, entry.samples) for entry in batch.sequences),
            starting=sum(1 for entry in batch.prefills if entry.start_position == 0),
            prefill_rows=len(batch.prefills),
        )


class CostModel:
    def __init__(
        self,
        model: ModelConfig,
        hardware: HardwareProfile,
        weight_bytes: int,
        kv_bytes_per_token: int,
        parallelism: Parallelism = Parallelism(),
        stack: ServingStack | None = None,
        scheduler_steps: int = 1,
    ):
        self.model, self.hardware, self.parallelism = model, hardware, parallelism
        self.stack = stack if stack is not None else ServingStack(source=IDEAL)
        self.scheduler_steps = scheduler_steps  # the engine's num_scheduler_steps (multi-step scheduling)
        self.weight_bytes, self.kv_bytes_per_token = weight_bytes, kv_bytes_per_token
        # The share of the model's K/V one TP rank reads over all its stages: one GPU's share (more
        # than 1/GPUs where KV heads are replicated) times the PP stages it passes through.
        per_gpu = parallelism.kv_bytes_per_token_per_gpu(model, 2) / model.kv_bytes_per_token(2)
        self.kv_share = per_gpu * parallelism.pipeline
        self.bytes_per_weight = weight_bytes / model.num_parameters
        tables = model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)
        self.dense_weight_bytes = weight_bytes - tables * self.bytes_per_weight

    def operators(self, shape: StepShape) -> list[OperatorCost]:
        """One TP rank's share of each operator over the whole model (all its stages)."""
        model, sequences, tensor = self.model, shape.sequences, self.parallelism.tensor
        return [
            operators.embedding(sequences, model, self.bytes_per_weight),
            operators.dense_products(sequences, model, self.dense_weight_bytes, tensor),
            operators.attention(sequences, model, self.kv_bytes_per_token, self.kv_share, tensor),
            operators.lm_head(sequences, model, self.bytes_per_weight, tensor),
            operators.sampling(sequences, model),
        ]

    def operator_time(self, cost: OperatorCost) -> float:
        hardware = self.hardware
        memory = cost.streamed_bytes / (hardware.bandwidth_bytes_s * hardware.bandwidth_efficiency) + (
            cost.gathered_bytes / (hardware.bandwidth_bytes_s * hardware.kv_bandwidth_efficiency)
        )
        compute = cost.flops / (hardware.peak_flops * hardware.compute_efficiency)
        k = hardware.roofline_sharpness
        return (memory**k + compute**k) ** (1 / k)

    def kv_bytes(self, shape: StepShape) -> float:
        """K/V the step's attention reads, the whole model's (a sliding-window layer at most its window)."""
        return operators.attended_kv_bytes(shape.sequences, self.model, self.kv_bytes_per_token)

    def flops(self, shape: StepShape) -> float:
        """The whole model's FLOPs in the step (every GPU's together)."""
        return sum(cost.flops for cost in self.operators(shape)) * self.parallelism.tensor

    def gpu_time(self, shape: StepShape) -> float:
        """Each stage holds 1/PP of the layers and the batch passes the stages one after another
        (no micro-batches), so the step takes one TP rank's time over the whole model: PP x a
        stage's. Plus the links, and the hardware's own fixed costs (launches; on a profile
        measured on this machine, the engine's whole host time), all times the profile's measured
        factor for steps of this size and kind (1 on catalogued GPUs)."""
        hardware = self.hardware
        layers = sum(self.operator_time(cost) for cost in self.operators(shape))
        tokens = operators.tokens_of(shape.sequences)
        communication = self.parallelism.communication_s(
            tokens, self.model, hardware.link_bytes_s, hardware.link_latency_s
        )
        fixed = hardware.step_overhead_s + hardware.sequence_overhead_s * len(shape.sequences)
        return (layers + communication + fixed) * hardware.step_scale(len(shape.sequences), shape.has_prefill)

    def step_time(self, shape: StepShape) -> float:
        return self.stack.step_s(
            self.gpu_time(shape),
            len(shape.sequences),
            shape.starting,
            tokens=operators.tokens_of(shape.sequences),
            has_prefill=shape.has_prefill,
            layers=max(1, self.model.num_layers // self.parallelism.pipeline),
            scheduler_steps=self.scheduler_steps,
        )
