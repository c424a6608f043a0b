"""The decoder layers' halves either side of attention, compiled, for the steps that prefill.

A step that prefills runs the eager model: attention loops over the step's prefill chunks in
Python, each chunk's own lengths, which one graph could not hold. Around attention, though, a
layer is the same sequence of operators for any number of tokens: the q/k/v product with the
input norm, q/k norms and RoPE before it; the output product, residual adds, norms and MLP after.
Eagerly each element-wise operator there is a pass over the step's activations in memory (and the
float32 round trips of every norm); compiled with a dynamic token dimension they fuse into a few
generated loops beside the products. One compile of each half serves every layer (the layer is an
argument: its weights are graph inputs) and every token count from 2 up, in two graphs where
the quantized products switch to their bf16 copy at BATCHED_ROWS; a one-token step, which torch
would compile apart, stays eager.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from engine.execution.compile_cache import CompiledPart, with_own_code
from engine.execution.model import LayerHalves, after_attention, before_attention


class CompiledHalves(CompiledPart):
    """`before_attention` and `after_attention` compiled for this executor's model. `compile` runs
    them once on an example; from then on `for_step` hands them out. If compiling or running them
    fails, prefill stays eager for the rest of the engine's life and `mode` says why."""

    def __init__(self):
        super().__init__("prefill step")
        compiled_before = torch.compile(with_own_code(before_attention))
        compiled_after = torch.compile(with_own_code(after_attention))

        def before(layer, hidden, rotary_tables):
            _dynamic_rows(hidden, *rotary_tables)
            return compiled_before(layer, hidden, rotary_tables)

        def after(layer, hidden, attended):
            _dynamic_rows(hidden, attended)
            return compiled_after(layer, hidden, attended)

        self._halves = LayerHalves(before, after)

    def compile(self, run_examples: Callable[[LayerHalves], object]) -> None:
        """`run_examples(halves)` runs the model with these halves on a batch of each size that
        compiles apart (on the scratch block), compiling them; then they are marked usable."""
        try:
            run_examples(self._halves)
        except Exception as exc:  # torch.compile raises many types (backend, codegen, C++ toolchain)
            self.fall_back(exc)
            return
        self.mode = self.COMPILED

    def for_step(self, num_tokens: int) -> LayerHalves | None:
        """The compiled halves for a step of `num_tokens` rows, or None where it runs eagerly."""
        return self._halves if self.usable and num_tokens >= 2 else None


def _dynamic_rows(*tensors: torch.Tensor) -> None:
    """The token dimension varies from step to step: compile it as a symbol, not a constant."""
    for tensor in tensors:
        torch._dynamo.maybe_mark_dynamic(tensor, 0)
