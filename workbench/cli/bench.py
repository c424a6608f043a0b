"""`workbench bench`: a preset run headless (every variant, then the decision), its report files and a summary."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from workbench.cli.arguments import add_server_model_options, at_least


def add_to(commands) -> None:
    bench = commands.add_parser("bench", help="run a preset headless and write its report")
    bench.add_argument("--preset", required=True, help="a preset name (see `workbench presets`) or a .toml file")
    bench.add_argument("--variant", help="run only this variant (default: every variant, then compare)")
    bench.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="TABLE.KEY=VALUE",
        help="override a preset setting, e.g. engine.max_num_seqs=16 or traffic.rate=4 (engine keys: docs/knobs.md)",
    )
    bench.add_argument("--seed", type=at_least(int, 0), help="override the preset's seed")
    bench.add_argument("--out", required=True, type=Path, help="folder for report.json, CSVs, PNGs and the run log")
    bench.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    bench.add_argument(
        "--server",
        metavar="URL",
        help="drive this OpenAI-compatible server (vLLM, SGLang, llama.cpp, "
        "workbench serve) instead of the in-process engine; the preset's [engine] table is then not used",
    )
    add_server_model_options(bench)
    bench.set_defaults(handler=run)


def run(args) -> int:
    from engine import LLMEngine
    from engine.config import default_compile_decode
    from engine.loading.model_source import read_model
    from engine.simulation import is_simulated
    from workbench.backends.loader import server_tokenizer
    from workbench.backends.local import LocalBackend
    from workbench.backends.remote import RemoteBackend
    from workbench.compare import compare, format_comparison
    from workbench.presets import load_preset
    from workbench.process_tuning import freeze_loaded_heap
    from workbench.run_recorder import RUN_LOG_NAME

    overrides = list(args.overrides) + ([f"seed={args.seed}"] if args.seed is not None else [])
    # A measured run compiles its decode step before the first request unless the preset says
    # otherwise: every step of it, and of each variant, then runs the same way.
    defaults = {"compile_decode": default_compile_decode(otherwise="blocking")}
    base = load_preset(args.preset, overrides, engine_defaults=defaults)
    variants = [args.variant] if args.variant else list(base.variants) or [None]
    scenarios = {
        variant: load_preset(args.preset, overrides, variant, engine_defaults=defaults) for variant in variants
    }  # validate all first
    if args.server:
        tokenizer = server_tokenizer(args.tokenizer)
        make_backend = lambda scenario: RemoteBackend(
            args.server,
            tokenizer,
            model=args.served_model,  # noqa: E731
            request_timeout_s=args.request_timeout,
        )
    else:
        source = None if is_simulated(base.engine.model) else read_model(base.engine.model)
        make_backend = lambda scenario: LocalBackend(LLMEngine(scenario.engine, source=source))  # noqa: E731
    reports = {}
    for variant, scenario in scenarios.items():
        out_dir = args.out / variant if variant and len(variants) > 1 else args.out
        print(f"running {scenario.name}{' / ' + variant if variant else ''} -> {out_dir}", file=sys.stderr)
        backend = make_backend(scenario)
        freeze_loaded_heap()  # no full collection walks the model again during the measured run
        try:
            reports[variant] = _run_one(scenario, variant, out_dir, backend, plots=not args.no_plots)
        except KeyboardInterrupt:  # Ctrl+C ends the bench, not just this variant
            name = f"{scenario.name}{' / ' + variant if variant else ''}"
            if (out_dir / RUN_LOG_NAME).exists():
                print(f"workbench: interrupted; the partial report of {name} is in {out_dir}", file=sys.stderr)
            else:
                print(f"workbench: interrupted while warming up; {name} did not start", file=sys.stderr)
            return 130
        finally:
            backend.close()
        _print_summary(reports[variant])
    decision = base.decision
    if decision and decision.baseline in reports and decision.candidate in reports:
        result = compare(reports[decision.baseline], reports[decision.candidate], decision.intended, decision.tolerated)
        text = format_comparison(result)
        (args.out / "comparison.txt").write_text(text + "\n")
        (args.out / "comparison.json").write_text(json.dumps(result, indent=2) + "\n")
        print(text)
    return 0


def _run_one(scenario, variant, out_dir: Path, backend, plots: bool) -> dict:
    from tqdm import tqdm

    from workbench.headless import run_headless, wait_until_warm
    from workbench.run_log import read_run_log
    from workbench.run_recorder import RUN_LOG_NAME

    wait_until_warm(backend, lambda message: print(message, file=sys.stderr))  # before the bar's clock starts
    with tqdm(desc="requests", unit="req", file=sys.stderr, dynamic_ncols=True) as bar:
        output_tokens = 0

        def progress(ended, total):
            nonlocal output_tokens
            output_tokens += ended.metrics.num_output_tokens
            bar.total = total
            elapsed = bar.format_dict["elapsed"] or 1e-9
            bar.set_postfix_str(f"{output_tokens / elapsed:.0f} output tok/s of wall-clock time", refresh=False)
            bar.update(1)

        report = run_headless(scenario, out_dir, variant=variant, backend=backend, on_progress=progress)
    if plots:
        from workbench.gui.report_images import export_plot_images

        export_plot_images(read_run_log(out_dir / RUN_LOG_NAME), out_dir)
    return report


def _print_summary(report: dict) -> None:
    metrics = report["metrics"]

    def line(name: str) -> str:
        entry = metrics[name]
        value = "-" if entry["value"] is None else f"{entry['value']:,.1f}"
        return f"  {name:<28} {value:>10} {entry['unit']} (n={entry['n']})"

    names = [
        "output_tok_s",
        "request_throughput_req_s",
        "ttft_p50_ms",
        "ttft_p99_ms",
        "tpot_p50_ms",
        "tpot_p99_ms",
        "e2e_p99_ms",
        "goodput_perc",
        "preemptions",
        "kv_usage_peak_perc",
        "prefix_cache_hit_perc",
    ]
    status = "complete" if report["complete"] else "INCOMPLETE (built from the run log)"
    print(f"{report['scenario']['name']} / {report['variant'] or '-'}: {status}")
    print("\n".join(line(name) for name in names))
