"""What quantization costs in quality, and what it buys in memory and speed, measured.

For each option, on a fixed held-out text set (ShareGPT assistant replies, a seeded subset):
perplexity; mean KL divergence KL(p_none || p_option) and top-1 agreement of the next-token
distributions against the unquantized model on the same tokens (with the first of the KV cache
dtypes asked for: options are measured with each, so "bfloat16,int8" says what the int8 cache
costs against a bfloat16 one); weight bytes; load time; and
decode tokens/s at batch 1 and 32. Every figure carries its unit and the number of tokens.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch

from engine.configuration.config import EngineConfig
from engine.core import EngineCore
from engine.llm_engine import LLMEngine
from engine.loading.model_file import ModelSource
from engine.loading.sharegpt import load_sharegpt
from engine.model_spec.kv_layout import KvLayout
from engine.model_spec.model_config import ModelConfig
from engine.platform.device import dtype_name
from engine.quantization import UNQUANTIZED, check_quantization
from engine.quantization.auto import AUTO
from engine.requests.sampling_params import SamplingParams
from workbench.quality.ledger import configuration_key

WINDOW_TOKENS = 512


@dataclass
class QualityResult:
    option: str  # e.g. "int4 g32"
    configuration: str  # what ran, as the quality ledger keys it
    quantization: str
    group_size: int | None
    perplexity: float
    perplexity_change_perc: float  # against "none" on the same tokens
    kl_divergence_mean_nats: float
    top1_agreement_perc: float
    evaluated_tokens: int
    weight_bytes: int
    unquantized_weight_bytes: int
    load_time_s: float
    decode_tok_s_batch1: float
    decode_tok_s_batch32: float


def held_out_windows(source: ModelSource, total_tokens: int, seed: int = 0) -> tuple[list[list[int]], int]:
    """Seeded ShareGPT replies tokenised into windows of at most WINDOW_TOKENS tokens; also returns
    how many complete records the (truncated) dataset file held."""
    data = load_sharegpt()
    rng = np.random.default_rng(seed)
    windows, count = [], 0
    for index in rng.permutation(len(data.conversations)):
        ids = source.tokenizer.encode(data.conversations[index].reply, add_special_tokens=False)[:WINDOW_TOKENS]
        if len(ids) < 32:
            continue
        ids = ids[: total_tokens - count]
        windows.append(ids)
        count += len(ids)
        if count >= total_tokens:
            break
    return windows, data.num_complete_records


@dataclass
class WindowScores:
    perplexity: float
    kl_nats: float  # summed over tokens: KL(p_reference || p_engine); 0 without a reference
    top1_agreements: int  # tokens whose most likely next token is the reference's
    tokens: int
    log_probs: list[torch.Tensor]  # per window, [tokens - 1, vocab]: the reference for later options


def score_windows(engine: LLMEngine, windows: list[list[int]], reference: list[torch.Tensor] | None) -> WindowScores:
    """The engine's next-token distributions over each window, scored against the text and, when
    given, the reference's distributions on the same windows."""
    nll, kl, agree, count, log_probs_per_window = 0.0, 0.0, 0, 0, []
    for index, window in enumerate(windows):
        log_probs = torch.log_softmax(engine.executor.sequence_logits(window, engine.config.block_size)[:-1], dim=-1)
        targets = torch.tensor(window[1:])
        nll -= log_probs.gather(1, targets[:, None]).sum().item()
        if reference is None:
            log_probs_per_window.append(log_probs)
        else:
            base = reference[index]
            kl += torch.sum(base.exp() * (base - log_probs)).item()
            agree += (base.argmax(-1) == log_probs.argmax(-1)).sum().item()
        count += targets.numel()
    agreements = count if reference is None else agree  # the reference agrees with itself everywhere
    return WindowScores(math.exp(nll / count), kl, agreements, count, log_probs_per_window)


def scoring_blocks(model: ModelConfig, block_size: int) -> int:
    """KV blocks for one window scored in one prefill: a window's blocks in each KV group (Gemma 3
    has six: engine/model_spec/kv_layout.py), and spare ones for the speed runs' 32 short requests."""
    return len(KvLayout.of(model).groups) * -(-WINDOW_TOKENS // block_size) + 64


def _decode_speed(engine: LLMEngine, batch: int, tokens: int = 32) -> float:
    """Output tokens/s of `batch` 16-token prompts generating `tokens` tokens each (ignore_eos),
    timed from the first step after prefill."""
    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    for index in range(batch):
        engine.add_request([1 + (index + position) % 1000 for position in range(16)], params)
    core = EngineCore(engine)
    core.step_or_raise()  # the prefill
    started, produced = time.perf_counter(), 0
    while engine.has_unfinished():
        produced += sum(len(output.new_token_ids) for output in core.step_or_raise().outputs)
    return produced / (time.perf_counter() - started)


def evaluate(
    source: ModelSource,
    options: list[tuple[str, int | None]],
    total_tokens: int = 4096,
    dtype: str = "auto",
    device: str = "auto",
    progress=lambda message: None,
    kv_cache_dtypes: tuple[str, ...] = ("auto",),
) -> tuple[list[QualityResult], dict]:
    for quantization, group_size in options:  # refuse an impossible option before spending minutes
        if quantization != AUTO:
            check_quantization(quantization, group_size or 32, source.config, False)
    windows, records = held_out_windows(source, total_tokens)
    reference: list[torch.Tensor] | None = None
    results = []
    reference_kv = kv_cache_dtypes[0]
    measured = [(UNQUANTIZED, None, reference_kv)] + [
        (quantization, group_size, kv)
        for kv in kv_cache_dtypes
        for quantization, group_size in options
        if (quantization, kv) != (UNQUANTIZED, reference_kv)
    ]
    for quantization, group_size, kv_cache_dtype in measured:
        is_reference = reference is None
        label = quantization if group_size is None else f"{quantization} g{group_size}"
        if kv_cache_dtype != "auto":
            label += f", KV {kv_cache_dtype}"
        progress(f"evaluating {label}")
        config = EngineConfig(
            dtype=dtype,
            device=device,
            quantization=quantization,
            group_size=group_size or 32,
            kv_cache_dtype=kv_cache_dtype,
            num_kv_blocks=scoring_blocks(source.config, 16),
            max_num_seqs=32,
            compile_decode="off",
        )  # it scores whole sequences in prefills
        started = time.perf_counter()
        engine = LLMEngine(config, source=source)
        load_time = time.perf_counter() - started
        if (
            quantization == AUTO
        ):  # what it chose, e.g. "auto = int4 g32 + int8 head, bf16 copy from 8 rows, KV bfloat16"
            label = f"auto = {engine.quantization}, KV {dtype_name(engine.kv_dtype)}"
        scores = score_windows(engine, windows, reference)  # None for the first: it is the reference
        if is_reference:
            reference = scores.log_probs
        baseline = results[0].perplexity if results else scores.perplexity
        results.append(
            QualityResult(
                option=label,
                configuration=configuration_key(
                    engine.quantization, dtype_name(engine.dtype), dtype_name(engine.kv_dtype)
                ),
                quantization=quantization,
                group_size=group_size,
                **quality_figures(scores, baseline),
                weight_bytes=engine.weight_bytes,
                unquantized_weight_bytes=engine.unquantized_weight_bytes,
                load_time_s=load_time,
                decode_tok_s_batch1=_decode_speed(engine, 1),
                decode_tok_s_batch32=_decode_speed(engine, 32),
            )
        )
    context = {
        "text_set": f"ShareGPT assistant replies, seeded subset, windows of <= {WINDOW_TOKENS} tokens",
        "sharegpt_complete_records": records,
        "windows": len(windows),
        "device": str(engine.device),
        "dtype": dtype_name(engine.dtype),
    }
    return results, context


def format_results(results: list[QualityResult], context: dict) -> str:
    lines = [
        f"text set: {context['text_set']} ({context['windows']} windows; the dataset file held "
        f"{context['sharegpt_complete_records']:,} complete records); device {context['device']}, compute dtype "
        f"{context['dtype']}",
        "",
        f"{'option':<18} {'ppl':>8} {'Δppl %':>8} {'KL nats/tok':>12} {'top-1 %':>8} {'tokens':>7} {'weights MB':>11} "
        f"{'load s':>7} {'tok/s b1':>9} {'tok/s b32':>10}",
    ]
    for result in results:
        lines.append(
            f"{result.option:<18} {result.perplexity:>8.3f} {result.perplexity_change_perc:>+8.2f} "
            f"{result.kl_divergence_mean_nats:>12.5f} "
            f"{result.top1_agreement_perc:>8.2f} {result.evaluated_tokens:>7} {result.weight_bytes / 1e6:>11.1f} "
            f"{result.load_time_s:>7.2f} {result.decode_tok_s_batch1:>9.1f} {result.decode_tok_s_batch32:>10.1f}"
        )
    lines.append(
        f"(weights MB of {results[0].unquantized_weight_bytes / 1e6:.1f} MB unquantized, embeddings included; "
        "KL is KL(p_none || p_option) per evaluated token)"
    )
    return "\n".join(lines)


def results_json(results: list[QualityResult], context: dict) -> dict:
    units = {
        "perplexity": "",
        "perplexity_change_perc": "%",
        "kl_divergence_mean_nats": "nats/token",
        "top1_agreement_perc": "%",
        "weight_bytes": "bytes",
        "load_time_s": "s",
        "decode_tok_s_batch1": "tokens/s",
        "decode_tok_s_batch32": "tokens/s",
    }
    return {"context": context, "units": units, "results": [asdict(result) for result in results]}


def score_configuration(source: ModelSource, config: EngineConfig, total_tokens: int = 4096) -> dict:
    """One engine configuration's quality against the file's own weights (unquantized, float32
    on a CPU) on the held-out text: {"perplexity", "perplexity_change_perc",
    "kl_divergence_mean_nats", "top1_agreement_perc", "evaluated_tokens", "configuration"}. Its
    weights, dtypes and kernels are the configuration's; its cache holds one window per sequence
    and nothing is compiled (windows are scored in whole-sequence prefills)."""
    windows, _ = held_out_windows(source, total_tokens)
    scoring = {"num_kv_blocks": scoring_blocks(source.config, config.block_size), "compile_decode": "off"}
    reference_engine = LLMEngine(
        EngineConfig(model=config.model, device=config.device, dtype=config.dtype, quantization=UNQUANTIZED, **scoring),
        source=source,
    )
    reference = score_windows(reference_engine, windows, None)
    del reference_engine
    engine = LLMEngine(replace(config, **scoring), source=source)
    scores = score_windows(engine, windows, reference.log_probs)
    return {
        "configuration": configuration_key(engine.quantization, dtype_name(engine.dtype), dtype_name(engine.kv_dtype)),
        **quality_figures(scores, reference.perplexity),
    }


def quality_figures(scores: WindowScores, reference_perplexity: float) -> dict:
    """What the ledger and the reports keep of one configuration's scores against the reference."""
    return {
        "perplexity": scores.perplexity,
        "perplexity_change_perc": 100.0 * (scores.perplexity / reference_perplexity - 1.0),
        "kl_divergence_mean_nats": scores.kl_nats / scores.tokens,
        "top1_agreement_perc": 100.0 * scores.top1_agreements / scores.tokens,
        "evaluated_tokens": scores.tokens,
    }
