"""`workbench bench`: a preset run headless (every variant, then the decision), its report files and a summary."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from workbench.cli.arguments import add_server_model_options, add_set_option, at_least, backend_factory


def add_to(commands) -> None:
    bench = commands.add_parser("bench", help="run a preset headless and write its report")
    bench.add_argument("--preset", required=True, help="a preset name (see `workbench presets`) or a .toml file")
    bench.add_argument(
        "--variant",
        action="append",
        help="run only this variant; give it twice for two (default: every variant, then compare)",
    )
    add_set_option(
        bench, "override a preset setting, e.g. engine.max_num_seqs=16 or traffic.rate=4 (engine keys: docs/knobs.md)"
    )
    bench.add_argument("--seed", type=at_least(int, 0), help="override the preset's seed")
    bench.add_argument(
        "--repeat",
        type=at_least(int, 1),
        default=1,
        metavar="N",
        help="run every variant N times, interleaved (A B, B A, A B ...), each repeat with traffic seed + its index; "
        "the decision is judged on the paired repeats (default 1)",
    )
    bench.add_argument(
        "--same-traffic", action="store_true", help="with --repeat: every repeat sends the same traffic (one seed)"
    )
    bench.add_argument(
        "--shuffle",
        action="store_true",
        help="with --repeat: run each repeat's variants in a seeded random order instead of the preset's",
    )
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
    from engine.configuration.config import default_compile_decode
    from engine.errors import ConfigError
    from engine.simulation import is_simulated
    from workbench.analysis.quality_terms import quality_metrics_named, refuse_on_a_server
    from workbench.runs.run_folder import RunFolderLock
    from workbench.traffic.presets import load_preset

    overrides = list(args.overrides) + ([f"seed={args.seed}"] if args.seed is not None else [])
    # A measured run compiles its decode step before the first request unless the preset says
    # otherwise: every step of it, and of each variant, then runs the same way.
    defaults = {"compile_decode": default_compile_decode(otherwise="blocking")}
    base = load_preset(args.preset, overrides, engine_defaults=defaults)
    variants = list(dict.fromkeys(args.variant or base.variants)) or [None]
    schedule = repeat_schedule(variants, args.repeat, base.seed, same_traffic=args.same_traffic, shuffle=args.shuffle)
    scenarios = {
        (variant, seed): load_preset(args.preset, [*overrides, f"seed={seed}"], variant, engine_defaults=defaults)
        for _, variant, seed in schedule
    }  # validate all first
    decision = base.decision
    quality_named = quality_metrics_named(decision.intended + decision.tolerated) if decision else []
    if quality_named and args.server:
        refuse_on_a_server(decision.intended + decision.tolerated, args.server)
    if quality_named and is_simulated(base.engine.model):
        raise ConfigError(f"decision: quality terms need a model's weights; {base.engine.model} has none")
    make_backend, source = backend_factory(args, base)
    if quality_named and source.tokenizer is None:
        raise ConfigError(
            f"decision: quality terms score held-out text, which needs the model's tokenizer; {source.path} has none"
        )
    # Held to the end: a second bench into the same --out is refused rather than deleting this one's logs.
    with RunFolderLock(args.out):
        return _run_schedule(args, schedule, scenarios, variants, decision, quality_named, make_backend, source)


def _run_schedule(args, schedule, scenarios, variants, decision, quality_named, make_backend, source) -> int:
    from workbench.analysis.quality_terms import add_quality_figures
    from workbench.machine.process_tuning import freeze_loaded_heap
    from workbench.runs.run_recorder import RUN_LOG_NAME

    reports: dict[int, dict] = {}  # repeat -> variant -> report
    stopped, failed = None, False
    for repeat, variant, seed in schedule:
        scenario = scenarios[(variant, seed)]
        out_dir = run_folder(args.out, variant, repeat, several_variants=len(variants) > 1, repeats=args.repeat)
        name = f"{scenario.name}{' / ' + variant if variant else ''}" + (
            f" (repeat {repeat} of {args.repeat}, seed {seed})" if args.repeat > 1 else ""
        )
        print(f"running {name} -> {out_dir}", file=sys.stderr)
        backend = make_backend(scenario)
        freeze_loaded_heap()  # no full collection walks the model again during the measured run
        try:
            report = _run_one(scenario, variant, out_dir, backend, not args.no_plots)
            if quality_named and variant in (decision.baseline, decision.candidate):
                report = add_quality_figures(out_dir / "report.json", source, scenario.engine, _say)
            reports.setdefault(repeat, {})[variant] = report
        except KeyboardInterrupt:  # Ctrl+C ends the bench, not just this variant
            if (out_dir / RUN_LOG_NAME).exists():
                print(f"workbench: interrupted; the partial report of {name} is in {out_dir}", file=sys.stderr)
            else:
                print(f"workbench: interrupted while warming up; {name} did not start", file=sys.stderr)
            stopped = 130
            break
        finally:
            backend.close()
        print_summary(reports[repeat][variant])
        if _every_request_failed(reports[repeat][variant]):
            print(f"workbench: every request of {name} failed (the engine's error is in {out_dir})", file=sys.stderr)
            failed = True
    if decision and (stopped is None or args.repeat > 1):
        pairs = [
            (runs[decision.baseline], runs[decision.candidate])
            for runs in reports.values()
            if decision.baseline in runs and decision.candidate in runs
        ]
        if pairs:
            _write_decision(args.out, pairs, decision, args.repeat)
    return stopped or (1 if failed else 0)


def _every_request_failed(report: dict) -> bool:
    """A run that ended every request it sent with an error (each step failed): the bench exits 1."""
    failed = report["metrics"]["requests_failed"]
    return bool(failed["value"]) and failed["value"] == failed["n"]


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def repeat_schedule(
    variants: list, repeats: int, seed: int, same_traffic: bool = False, shuffle: bool = False
) -> list[tuple[int, str | None, int]]:
    """(repeat, variant, traffic seed) in the order to run them: each repeat runs every variant
    before the next repeat starts (interleaved), in the preset's order and its reverse by turns
    (A B, B A, A B, ...: counterbalanced) or in a seeded random order. The machine drifts within
    minutes, and a fixed order hands a drift that lasts a run to one arm: an A/A check in A B
    order once rejected identical arms (docs/scenarios.md, "A/A on the bundled model")."""
    import random

    order = random.Random(seed)
    schedule = []
    for repeat in range(1, repeats + 1):
        names = list(variants) if repeat % 2 else list(reversed(variants))
        if shuffle:
            order.shuffle(names)
        schedule += [(repeat, variant, seed if same_traffic else seed + repeat - 1) for variant in names]
    return schedule


def run_folder(out: Path, variant: str | None, repeat: int, several_variants: bool, repeats: int) -> Path:
    """out/VARIANT, or out/repeat-K/VARIANT when repeating (out itself for a single variant)."""
    folder = out / f"repeat-{repeat}" if repeats > 1 else out
    return folder / variant if variant and several_variants else folder


def _write_decision(out: Path, pairs: list[tuple[dict, dict]], decision, planned: int) -> None:
    from workbench.analysis.compare import compare, compare_repeats, format_comparison

    if planned == 1:
        result = compare(*pairs[0], decision.intended, decision.tolerated)
    else:
        result = compare_repeats(pairs, decision.intended, decision.tolerated)
        if len(pairs) < planned:
            result["verdict"] += f" (from {len(pairs)} of {planned} planned repeats: the others did not complete)"
    text = format_comparison(result)
    (out / "comparison.txt").write_text(text + "\n")
    (out / "comparison.json").write_text(json.dumps(result, indent=2) + "\n")
    print(text)


def _run_one(scenario, variant, out_dir: Path, backend, plots: bool) -> dict:
    from tqdm import tqdm

    from workbench.bench.headless import run_headless
    from workbench.runs.run_log import read_run_log
    from workbench.runs.run_recorder import RUN_LOG_NAME
    from workbench.session.run_session import wait_until_warm

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
        from workbench.gui.charts.report_images import export_plot_images

        export_plot_images(read_run_log(out_dir / RUN_LOG_NAME), out_dir)
    return report


def print_summary(report: dict) -> None:
    from workbench.analysis.report_summary import summary_lines

    print("\n".join(summary_lines(report)))
