"""`workbench estimate`: memory arithmetic (weights, KV cache, how many requests fit), optionally
against the loaded model."""

from __future__ import annotations

from engine.quantization import all_group_sizes
from workbench.cli.arguments import at_least


def add_to(commands) -> None:
    estimate = commands.add_parser("estimate", help="memory arithmetic: weights, KV cache, how many requests fit")
    estimate.add_argument(
        "--params", type=at_least(float, 0.0, inclusive=False), help="parameter count, e.g. 7e9 (weights only)"
    )
    estimate.add_argument("--model", help="a catalogued model (see presets/catalogue/models.toml)")
    estimate.add_argument("--hardware", help="a catalogued GPU (4xh100-80gb: four of them), or this-machine")
    estimate.add_argument(
        "--tp", type=at_least(int, 1), default=1, help="tensor_parallel_size: GPUs each layer is split across"
    )
    estimate.add_argument(
        "--pp", type=at_least(int, 1), default=1, help="pipeline_parallel_size: stages the layers are split into"
    )
    estimate.add_argument("--bits", type=int, choices=(16, 8, 4), default=16, help="weight bits: 16, 8 or 4")
    estimate.add_argument(
        "--group-size",
        type=int,
        choices=all_group_sizes(),
        help="int4 group size (adds a scale and a minimum per group)",
    )
    estimate.add_argument(
        "--kv-bits",
        type=int,
        choices=(16, 8),
        default=16,
        help="KV cache bits: 16, or 8 (int8 or fp8 codes and a float16 scale per row)",
    )
    estimate.add_argument(
        "--context", type=at_least(int, 1), help="tokens per request, prompt + output (default: the model's maximum)"
    )
    estimate.add_argument(
        "--concurrent", type=at_least(int, 1), default=16, help="requests whose KV cache to add up (without --hardware)"
    )
    estimate.add_argument("--max-num-batched-tokens", type=at_least(int, 1), default=2048)
    estimate.add_argument(
        "--loaded",
        action="store_true",
        help="also load the model (--model when it is a bundled one: smollm2-135m, gemma3-270m; else smollm2-135m) "
        "and compare with measured bytes",
    )
    estimate.set_defaults(handler=run)


def run(args) -> int:
    from engine.configuration.memory import concurrency_lines, model_memory_lines, params_only_line
    from engine.errors import ConfigError
    from engine.simulation.catalogue import hardware_profile, model_shape
    from engine.simulation.parallel import parse_gpu_count

    if args.params is None and args.model is None:
        raise ConfigError("estimate: give --params N (weights only) or --model NAME [--hardware NAME]")
    if args.params is not None:
        line = params_only_line(args.params, args.bits)
        print(f"{line.name}: {line.arithmetic}")
    if args.model is not None:
        shape, source = model_shape(args.model)
        context = args.context or shape.max_position_embeddings
        print(f"{args.model}: {shape.num_parameters / 1e9:.2f} × 10⁹ parameters ({source})")
        if args.hardware is None:
            for line in model_memory_lines(
                shape, args.bits, args.kv_bits // 8, context, args.concurrent, args.group_size
            ):
                print(f"  {line.name:<17} {_size(line.bytes)}  {line.arithmetic}")
            print("  (add --hardware NAME, or this-machine, for how many requests fit on a device)")
        elif args.tp * args.pp > 1 or parse_gpu_count(args.hardware)[0] > 1:
            _print_per_gpu(args, shape, context)
        else:
            profile = hardware_profile(
                args.hardware,
                on_measured=lambda path: print(
                    f"measured this machine and saved the profile to {path} (delete it there to measure again)"
                ),
            )
            lines, fits = concurrency_lines(
                shape,
                profile.memory_bytes,
                args.bits,
                args.kv_bits // 8,
                context,
                args.max_num_batched_tokens,
                256,
                args.group_size,
            )
            print(f"{args.hardware}: {profile.memory_bytes / 1e9:.1f} GB ({profile.source})")
            for line in lines:
                print(
                    f"  {line.name:<17} {line.bytes / 1e9:>8.2f} GB  {'measured' if line.measured else 'estimate'}  "
                    f"{line.arithmetic}"
                )
            weights = lines[0].bytes
            if weights >= profile.memory_bytes:
                print(
                    f"=> impossible: the weights alone ({weights / 1e9:.2f} GB) exceed the device's "
                    f"{profile.memory_bytes / 1e9:.1f} GB"
                )
            else:
                print(f"=> {fits:,} concurrent {context:,}-token requests fit")
    if args.loaded:
        _compare_with_loaded(args.model)
    return 0


def _print_per_gpu(args, shape, context: int) -> None:
    """The memory of one GPU of a TP x PP group, and how many requests the group holds."""
    from engine.simulation.catalogue import hardware_profile
    from engine.simulation.parallel import Parallelism, parse_gpu_count, per_gpu_lines

    count, single = parse_gpu_count(args.hardware)
    parallelism = Parallelism(args.tp, args.pp)
    count = count if count > 1 else parallelism.gpus  # "h100-80gb --tp 4": four of them
    parallelism.check(shape, args.model, count, f"{count}x{single}")
    profile = hardware_profile(single)
    lines, fits = per_gpu_lines(
        shape,
        parallelism,
        profile.memory_bytes,
        args.bits,
        args.kv_bits // 8,
        context,
        args.max_num_batched_tokens,
        256,
        args.group_size,
    )
    print(
        f"{count}x{single}: TP {args.tp} x PP {args.pp}, each GPU {profile.memory_bytes / 1e9:.1f} GB "
        f"({profile.source}); linked by {profile.link or 'nothing catalogued'}"
    )
    for line in lines:
        print(f"  {line.name:<17} {line.bytes / 1e9:>8.2f} GB  per GPU, estimate  {line.arithmetic}")
    if lines[0].bytes >= profile.memory_bytes:
        print(f"=> impossible: each GPU's share of the weights ({lines[0].bytes / 1e9:.2f} GB) exceeds its memory")
    else:
        bubble = f"; each GPU idles {parallelism.bubble:.0%} of a step (pipeline bubble)" if args.pp > 1 else ""
        print(f"=> {fits:,} concurrent {context:,}-token requests fit{bubble}")


def _size(count: int) -> str:
    """Bytes in the unit that reads best: KiB for a token's KV, GB for the rest."""
    return f"{count / 1024:>8,.0f} KiB" if count < 1 << 20 else f"{count / 1e9:>8.2f} GB "


def _compare_with_loaded(model: str | None) -> int:
    from engine import EngineConfig, LLMEngine
    from engine.configuration.memory import weight_bytes_estimate
    from engine.loading.bundled_models import BUNDLED_MODELS

    # Unquantized float32 weights and cache, as the estimate below assumes (not the default's auto choice).
    engine = LLMEngine(
        EngineConfig(
            model=model if model in BUNDLED_MODELS else EngineConfig.model,
            device="cpu",
            dtype="float32",
            kv_cache_memory=64 << 20,
            compile_decode="off",
            quantization="none",
            kv_cache_dtype="float32",
        )
    )
    estimate = weight_bytes_estimate(engine.model_config, 32)
    # The scheduler's blocks, plus the one scratch block the executor keeps for warm-up and compiling,
    # each holding the K/V of the layers of one KV group (engine/model_spec/kv_layout.py).
    model_config = engine.model_config
    layer_token_bytes = model_config.kv_bytes_per_token(4) // model_config.num_layers
    kv_estimate = (engine.num_kv_blocks + 1) * engine.kv_layout.block_bytes(engine.config.block_size, layer_token_bytes)
    print(
        f"loaded {engine.model_path.name} (float32): weights estimated {estimate / 1e6:.2f} MB, measured "
        f"{engine.weight_bytes / 1e6:.2f} MB "
        f"({100 * (estimate / engine.weight_bytes - 1):+.2f}%); KV cache estimated {kv_estimate / 1e6:.2f} MB, "
        f"measured {engine.kv_cache_bytes / 1e6:.2f} MB ({100 * (kv_estimate / engine.kv_cache_bytes - 1):+.2f}%)"
    )
    return 0
