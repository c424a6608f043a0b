"""`workbench quality`: what each quantization costs against the file's own weights, recorded in the quality ledger."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.quantization import METHODS
from workbench.cli.arguments import at_least


def add_to(commands) -> None:
    quality = commands.add_parser("quality", help="quantization quality, memory and speed on the bundled model")
    quality.add_argument(
        "--quant",
        default="none,int8,int4",
        help=f"comma-separated options: auto (the default configuration),{','.join(METHODS)}",
    )
    quality.add_argument(
        "--group-size", default="32", help="group sizes of grouped formats (int4), comma-separated (32,64,128)"
    )
    quality.add_argument("--tokens", type=at_least(int, 2), default=4096, help="evaluated tokens (at least 2)")
    quality.add_argument("--model", default="smollm2-135m")
    quality.add_argument("--dtype", default="auto")
    quality.add_argument(
        "--kv-cache-dtype",
        default="auto",
        help="comma-separated KV cache dtypes, each option measured with each; the first is the reference's "
        "(bfloat16,int8: what an int8 cache costs against a bfloat16 one)",
    )
    quality.add_argument("--json", type=Path, help="also write the results as JSON")
    quality.set_defaults(handler=run)


def run(args) -> int:
    from dataclasses import asdict

    from engine.configuration.config import KV_CACHE_DTYPES
    from engine.errors import ConfigError
    from engine.loading.model_source import read_model
    from engine.quantization import get_method
    from engine.quantization.auto import AUTO
    from workbench.quality.ledger import check_ledger, record
    from workbench.quality.measure import evaluate, format_results, results_json

    options = []
    for method in (name.strip() for name in args.quant.split(",")):
        if method == AUTO:  # the default configuration, as it resolves for this file
            options.append((AUTO, None))
        elif get_method(method).group_sizes:
            try:
                sizes = [int(size) for size in args.group_size.split(",")]
            except ValueError as exc:
                raise ConfigError(f"--group-size: expected integers like 32,64,128, got {args.group_size!r}") from exc
            if unknown := [size for size in sizes if size not in get_method(method).group_sizes]:
                raise ConfigError(
                    f"--group-size: {method} takes group sizes "
                    f"{', '.join(map(str, get_method(method).group_sizes))}, got {', '.join(map(str, unknown))}"
                )
            options += [(method, size) for size in sizes]
        else:
            options.append((method, None))
    # What would be refused after minutes of measuring is refused now: the ledger the results go
    # into, and the folder of --json.
    check_ledger()
    if args.json and not args.json.parent.is_dir():
        raise ConfigError(f"--json {args.json}: the folder {args.json.parent} does not exist")
    source = read_model(args.model)
    kv_cache_dtypes = tuple(name.strip() for name in args.kv_cache_dtype.split(","))
    for name in kv_cache_dtypes:
        if name not in KV_CACHE_DTYPES:
            raise ConfigError(f"--kv-cache-dtype: expected names from {', '.join(KV_CACHE_DTYPES)}, got {name!r}")
    results, context = evaluate(
        source,
        options,
        args.tokens,
        dtype=args.dtype,
        progress=lambda message: print(message, file=sys.stderr),
        kv_cache_dtypes=kv_cache_dtypes,
    )
    print(format_results(results, context))
    ledger = record(source.path, {result.configuration: asdict(result) for result in results})
    print(f"recorded in {ledger}: the window shows a loaded configuration's figures from there", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results_json(results, context), indent=2) + "\n")
    return 0
