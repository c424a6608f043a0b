"""What each ingredient of quantization "auto" costs in quality, added one at a time:

    python -m benchmarks.quality_breakdown [--model gemma3-270m] [--tokens 1024]

Starting from the unquantized model (float32), each row adds one thing the default configuration
chooses on this CPU for the file: its projections' method (int8 or int4 g32), the int8 LM head
(with the int8 embedding table), the bf16 copy of the weights for many-row steps, and K/V cached in
bf16 (the last row is "auto" itself). Perplexity change, KL(p_none || p_row) and top-1 agreement against the
unquantized model on the same held-out windows as `workbench quality`, each with its n tokens.
"""

from __future__ import annotations

import argparse

import torch

from engine.configuration.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.loading.model_source import read_model
from engine.platform.device import total_memory_bytes
from engine.quantization import get_method
from engine.quantization.auto import choose_quantization
from workbench.quality.measure import WINDOW_TOKENS, held_out_windows, score_windows


def ingredients(source) -> list[tuple[str, dict]]:
    """(label, settings added) per row, cumulative: what "auto" chooses for this file on this
    machine (engine.quantization.auto), one part at a time."""
    choice = choose_quantization(
        source.projection_type,
        source.head_type,
        32,
        source.config,
        "cpu",
        total_memory_bytes(torch.device("cpu")),
    )
    method = choice.method + (f" g{choice.group_size}" if get_method(choice.method).group_sizes else "")
    rows = [
        ("none (the reference)", {"quantization": "none"}),
        (f"+ {method} projections", {"quantization": choice.method, "group_size": choice.group_size}),
    ]
    if choice.quantize_lm_head:
        rows.append(("+ int8 head and embedding", {"quantize_lm_head": True}))
    if choice.batched_copy:
        rows.append(("+ bf16 batched copy", {"batched_bf16_copy": True}))
    if choice.kv_cache_dtype != "auto":
        rows.append((f"+ K/V in {choice.kv_cache_dtype}", {"kv_cache_dtype": choice.kv_cache_dtype}))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--tokens", type=int, default=1024)
    args = parser.parse_args()

    source = read_model(args.model)
    windows, _records = held_out_windows(source, args.tokens)
    settings = dict(dtype="float32", device="cpu", compile_decode="off", num_kv_blocks=WINDOW_TOKENS // 16 + 64)
    print(f"model: {args.model} ({source.path.name}); text: ShareGPT replies, {len(windows)} windows")
    print(f"{'configuration':<30} {'ppl':>8} {'Δppl %':>8} {'KL nats/tok':>12} {'top-1 %':>8} {'n tokens':>9}")
    reference, baseline = None, None
    for label, overrides in ingredients(source):
        settings.update(overrides)
        scores = score_windows(LLMEngine(EngineConfig(**settings), source=source), windows, reference)
        if reference is None:
            reference, baseline = scores.log_probs, scores.perplexity
        print(
            f"{label:<30} {scores.perplexity:>8.3f} {100 * (scores.perplexity / baseline - 1):>+8.2f} "
            f"{scores.kl_nats / scores.tokens:>12.5f} {100 * scores.top1_agreements / scores.tokens:>8.2f} "
            f"{scores.tokens:>9}"
        )


if __name__ == "__main__":
    main()
