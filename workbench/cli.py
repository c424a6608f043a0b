"""The `workbench` command line.

    workbench                      the desktop app on the bundled model
    workbench gui [--preset NAME] [--run-for SECONDS [--screenshot FILE.png] [--inspect SECONDS]]
    workbench presets              list the presets
    workbench bench --preset NAME [--variant V] [--set table.key=value ...] [--seed N] --out DIR
    workbench quality --quant none,int8,int4 [--group-size 32,64,128] [--json OUT]
    workbench compare RUN_A RUN_B [--intended 'metric:+20%' ...] [--tolerated 'metric:+10%' ...]
    workbench trace RUN_DIR [--step N | --request ID]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.errors import EngineError
from engine.quantization import METHODS, all_group_sizes
from workbench.server import DEFAULT_MAX_REQUEST_BYTES


def at_least(kind: type, minimum: float, inclusive: bool = True):
    """An argparse type: a number of this kind, at least (or above) the minimum."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if value < minimum or (value == minimum and not inclusive) or value != value:
            raise argparse.ArgumentTypeError(f"expected {'at least' if inclusive else 'more than'} {minimum:g}, got {text}")
        return value

    return parse


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 1 to 65535."""
    port = at_least(int, 1)(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 1 to 65535, got {text}")
    return port


def add_server_model_options(command: argparse.ArgumentParser) -> None:
    from workbench.backend_loader import SERVER_TOKENIZER
    from workbench.remote_backend import DEFAULT_REQUEST_TIMEOUT_S

    command.add_argument("--served-model", metavar="NAME", help="with --server: the model to ask for (default: the first in /v1/models)")
    command.add_argument("--tokenizer", metavar="MODEL", default=SERVER_TOKENIZER,
                         help="with --server: the served model's tokenizer (a .gguf file or Hugging Face folder), to make prompts")
    command.add_argument("--request-timeout", type=at_least(float, 0.0, inclusive=False), default=DEFAULT_REQUEST_TIMEOUT_S,
                         metavar="SECONDS", help="with --server: end a request with an error when the server sends nothing "
                         f"for this long (default: {DEFAULT_REQUEST_TIMEOUT_S:g})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="workbench", description="LLM serving workbench")
    commands = parser.add_subparsers(dest="command")

    commands.add_parser("presets", help="list the presets")

    gui = commands.add_parser("gui", help="the desktop app (the default command)")
    gui.add_argument("--preset", help="load and run this preset ('name' or 'name / variant', as the window lists "
                     "them); a preset with variants and none chosen runs both arms side by side in the Arms tab")
    gui.add_argument("--variant", help="with --preset: run this variant of it")
    gui.add_argument("--run-for", type=at_least(float, 0.0, inclusive=False), metavar="SECONDS",
                     help="run the traffic this long after loading, then exit (both arms of a preset: until they have run)")
    gui.add_argument("--screenshot", metavar="FILE.png", help="with --run-for: save a screenshot of the window before exiting")
    gui.add_argument("--server", metavar="URL", help="drive this OpenAI-compatible server instead of the in-process engine")
    gui.add_argument("--baseline", metavar="RUN_DIR", help="draw this past run (a bench --out folder) faded under the live plots")
    gui.add_argument("--inspect", type=at_least(float, 0.0), metavar="SECONDS",
                     help="with --run-for: when the time is up, show the step at this time into the run in the Step panel")
    add_server_model_options(gui)

    bench = commands.add_parser("bench", help="run a preset headless and write its report")
    bench.add_argument("--preset", required=True, help="a preset name (see `workbench presets`) or a .toml file")
    bench.add_argument("--variant", help="run only this variant (default: every variant, then compare)")
    bench.add_argument("--set", dest="overrides", action="append", default=[], metavar="TABLE.KEY=VALUE",
                       help="override a preset setting, e.g. engine.max_num_seqs=16 or traffic.rate=4")
    bench.add_argument("--seed", type=at_least(int, 0), help="override the preset's seed")
    bench.add_argument("--out", required=True, type=Path, help="folder for report.json, CSVs, PNGs and the run log")
    bench.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    bench.add_argument("--server", metavar="URL", help="drive this OpenAI-compatible server (vLLM, SGLang, llama.cpp, "
                       "workbench serve) instead of the in-process engine; the preset's [engine] table is then not used")
    add_server_model_options(bench)

    compare = commands.add_parser("compare", help="compare two runs and check a decision")
    compare.add_argument("baseline", help="run folder (or report.json) of the baseline")
    compare.add_argument("candidate", help="run folder (or report.json) of the candidate")
    compare.add_argument("--intended", action="append", help="intended gain, e.g. output_tok_s:+20%%")
    compare.add_argument("--tolerated", action="append", help="tolerated regression, e.g. ttft_p99_ms:+10%%")
    compare.add_argument("--json", type=Path, help="also write the comparison as JSON")

    trace = commands.add_parser("trace", help="a run's step traces: one step in four parts, or one request's history")
    trace.add_argument("run", type=Path, help="a run folder (holding run.jsonl) or the run.jsonl itself")
    which = trace.add_mutually_exclusive_group()
    which.add_argument("--step", type=at_least(int, 0), help="the engine step to print: before, computation, persisted, to the caller")
    which.add_argument("--request", help="a request id: every step that touched it")

    quality = commands.add_parser("quality", help="quantization quality, memory and speed on the bundled model")
    quality.add_argument("--quant", default="none,int8,int4", help=f"comma-separated options: auto (the default configuration),{','.join(METHODS)}")
    quality.add_argument("--group-size", default="32", help="group sizes of grouped formats (int4), comma-separated (32,64,128)")
    quality.add_argument("--tokens", type=at_least(int, 2), default=4096, help="evaluated tokens (at least 2)")
    quality.add_argument("--model", default="smollm2-135m")
    quality.add_argument("--dtype", default="auto")
    quality.add_argument("--json", type=Path, help="also write the results as JSON")

    estimate = commands.add_parser("estimate", help="memory arithmetic: weights, KV cache, how many requests fit")
    estimate.add_argument("--params", type=at_least(float, 0.0, inclusive=False), help="parameter count, e.g. 7e9 (weights only)")
    estimate.add_argument("--model", help="a catalogued model (see presets/catalogue/models.toml)")
    estimate.add_argument("--hardware", help="a catalogued GPU, or this-machine")
    estimate.add_argument("--bits", type=int, choices=(16, 8, 4), default=16, help="weight bits: 16, 8 or 4")
    estimate.add_argument("--group-size", type=int, choices=all_group_sizes(), help="int4 group size (adds a scale and a minimum per group)")
    estimate.add_argument("--kv-bits", type=int, choices=(16, 8), default=16, help="KV cache bits: 16 or 8")
    estimate.add_argument("--context", type=at_least(int, 1), help="tokens per request, prompt + output (default: the model's maximum)")
    estimate.add_argument("--concurrent", type=at_least(int, 1), default=16, help="requests whose KV cache to add up (without --hardware)")
    estimate.add_argument("--max-num-batched-tokens", type=at_least(int, 1), default=2048)
    estimate.add_argument("--loaded", action="store_true", help="also load the bundled model and compare with measured bytes")

    serve = commands.add_parser("serve", help="serve the engine over an OpenAI-compatible HTTP API with vLLM's metrics")
    serve.add_argument("--preset", help="take the engine settings from this preset")
    serve.add_argument("--set", dest="overrides", action="append", default=[], metavar="engine.KEY=VALUE",
                       help="an engine setting, e.g. engine.model=simulated:llama-2-7b@h100-80gb")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    serve.add_argument("--port", type=port_number, default=8000)
    serve.add_argument("--served-model-name", help="the model's name in /v1/models (default: from engine.model)")
    serve.add_argument("--max-request-bytes", type=at_least(int, 1), default=DEFAULT_MAX_REQUEST_BYTES, metavar="BYTES",
                       help=f"refuse request bodies larger than this with 413 (default: {DEFAULT_MAX_REQUEST_BYTES:,})")

    export = commands.add_parser("export-hf", help="write a model as a Hugging Face directory (for vLLM or SGLang to serve)")
    export.add_argument("--model", default="smollm2-135m", help="the bundled alias, a .gguf file or a Hugging Face folder")
    export.add_argument("--out", required=True, type=Path, help="the directory to write")
    export.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")

    calibrate = commands.add_parser("calibrate", help="fit the cost model to this machine and save it as a hardware profile")
    calibrate.add_argument("--name", default="this-machine-calibrated")

    args = parser.parse_args(argv)
    try:
        if args.command == "presets":
            return _list_presets()
        if args.command == "bench":
            return _bench(args)
        if args.command == "compare":
            return _compare(args)
        if args.command == "quality":
            return _quality(args)
        if args.command == "trace":
            return _trace(args)
        if args.command == "estimate":
            return _estimate(args)
        if args.command == "calibrate":
            return _calibrate(args)
        if args.command == "serve":
            return _serve(args)
        if args.command == "export-hf":
            from engine.model_source import read_model
            from workbench.export_hf import export_hf_directory

            print(f"wrote {export_hf_directory(read_model(args.model), args.out, args.dtype)}")
            return 0
        from workbench.gui.app import run_gui

        if args.command == "gui":
            return run_gui(args.preset, args.run_for, args.screenshot, args.server, args.served_model, args.tokenizer,
                           args.baseline, args.inspect, args.request_timeout, args.variant)
        return run_gui()
    except EngineError as error:
        print(f"workbench: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl+C while loading, measuring quality, calibrating, exporting...
        print("workbench: interrupted", file=sys.stderr)
        return 130
    except OSError as error:  # a path that cannot be read or written: say which, without a traceback
        where = f"{error.filename}: " if error.filename else ""
        print(f"workbench: {where}{error.strerror or error}", file=sys.stderr)
        return 2


def _serve(args) -> int:
    from engine import EngineConfig
    from engine.errors import ConfigError
    from engine.settings import apply_override, build
    from workbench.presets import load_preset
    from workbench.server.run import serve

    if args.preset:
        config = load_preset(args.preset, args.overrides).engine
    else:
        raw: dict = {}
        for assignment in args.overrides:
            apply_override(raw, assignment)
        if set(raw) - {"engine"}:
            raise ConfigError(f"--set: serve takes engine.KEY=VALUE settings only, got {', '.join(sorted(set(raw) - {'engine'}))}")
        config = build(EngineConfig, raw.get("engine", {}), "--set", "engine")
    serve(config, args.host, args.port, args.served_model_name, args.max_request_bytes)
    return 0


def _list_presets() -> int:
    from workbench.presets import PRESET_DIR, load_preset, preset_names

    if not preset_names():
        print(f"workbench: no presets found in {PRESET_DIR} (the package data of an incomplete install)", file=sys.stderr)
        return 1
    for name in preset_names():
        scenario = load_preset(name)
        variants = f" [variants: {', '.join(scenario.variants)}]" if scenario.variants else ""
        print(f"{name:<24} {scenario.description.splitlines()[0] if scenario.description else ''}{variants}")
    return 0


def _bench(args) -> int:
    from engine import LLMEngine
    from engine.config import default_compile_decode
    from engine.model_source import read_model
    from engine.simulation import is_simulated
    from workbench.backend_loader import server_tokenizer
    from workbench.compare import compare, format_comparison
    from workbench.local_backend import LocalBackend
    from workbench.presets import load_preset
    from workbench.process_tuning import freeze_loaded_heap
    from workbench.remote_backend import RemoteBackend

    overrides = list(args.overrides) + ([f"seed={args.seed}"] if args.seed is not None else [])
    # A measured run compiles its decode step before the first request unless the preset says
    # otherwise: every step of it, and of each variant, then runs the same way.
    defaults = {"compile_decode": default_compile_decode(otherwise="blocking")}
    base = load_preset(args.preset, overrides, engine_defaults=defaults)
    variants = [args.variant] if args.variant else list(base.variants) or [None]
    scenarios = {variant: load_preset(args.preset, overrides, variant, engine_defaults=defaults)
                 for variant in variants}  # validate all first
    if args.server:
        tokenizer = server_tokenizer(args.tokenizer)
        make_backend = lambda scenario: RemoteBackend(args.server, tokenizer, model=args.served_model,  # noqa: E731
                                                      request_timeout_s=args.request_timeout)
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
            print(f"workbench: interrupted; the partial report of {scenario.name}{' / ' + variant if variant else ''} "
                  f"is in {out_dir}", file=sys.stderr)
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

    from workbench.headless import run_headless
    from workbench.run_recorder import RUN_LOG_NAME
    from workbench.run_log import read_run_log

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

    names = ["output_tok_s", "request_throughput_req_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
             "e2e_p99_ms", "goodput_perc", "preemptions", "kv_usage_peak_perc", "prefix_cache_hit_perc"]
    status = "complete" if report["complete"] else "INCOMPLETE (built from the run log)"
    print(f"{report['scenario']['name']} / {report['variant'] or '-'}: {status}")
    print("\n".join(line(name) for name in names))


def _trace(args) -> int:
    from engine.errors import ConfigError
    from workbench.run_log import read_run_log
    from workbench.run_recorder import RUN_LOG_NAME
    from workbench.trace_log import read_trace, why_no_traces
    from workbench.trace_text import format_request, format_step

    path = args.run / RUN_LOG_NAME if args.run.is_dir() else args.run
    log = read_run_log(path, with_traces=True)
    if log.skipped_lines:
        print(f"workbench: {log.skipped_summary(path)}", file=sys.stderr)
    if not log.traces:
        raise ConfigError(f"{path}: this run log has no step traces: {why_no_traces(log.header)}")
    first, last = log.traces[0]["step"], log.traces[-1]["step"]
    if args.step is not None:
        record = next((record for record in log.traces if record["step"] == args.step), None)
        if record is None:
            raise ConfigError(f"{path}: no trace of step {args.step}; this log traces steps {first}..{last}")
        print(format_step(read_trace(record), log.header["start_time"]))
    elif args.request is not None:
        arrival = next((request["arrival_time"] for request in log.requests if request["request_id"] == args.request), None)
        traces = [read_trace(record) for record in log.traces]
        if arrival is None and not any(args.request in {row.request_id for row in trace.rows} for trace in traces):
            raise ConfigError(f"{path}: no request {args.request!r} in this run")
        print(format_request(traces, args.request, arrival, log.header["start_time"]))
    else:
        full = sum(record["full"] for record in log.traces)
        preemptions = sum(len(record["preemptions"]) for record in log.traces)
        print(f"{path}: steps {first}..{last} traced ({full} in full, {len(log.traces) - full} as summaries); "
              f"{preemptions} preemptions. Print one with --step N, or a request's history with --request ID.")
    return 0


def _quality(args) -> int:
    from dataclasses import asdict

    from engine.errors import ConfigError
    from engine.model_source import read_model
    from engine.quantization import get_method
    from engine.quantization.auto import AUTO
    from workbench.quality import evaluate, format_results, results_json
    from workbench.quality_ledger import record

    options = []
    for method in (name.strip() for name in args.quant.split(",")):
        if method == AUTO:  # the default configuration, as it resolves for this file
            options.append((AUTO, None))
        elif get_method(method).group_sizes:
            try:
                options += [(method, int(size)) for size in args.group_size.split(",")]
            except ValueError as exc:
                raise ConfigError(f"--group-size: expected integers like 32,64,128, got {args.group_size!r}") from exc
        else:
            options.append((method, None))
    source = read_model(args.model)
    results, context = evaluate(source, options, args.tokens, dtype=args.dtype,
                                progress=lambda message: print(message, file=sys.stderr))
    print(format_results(results, context))
    ledger = record(source.path, {result.configuration: asdict(result) for result in results})
    print(f"recorded in {ledger}: the window shows a loaded configuration's figures from there", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results_json(results, context), indent=2) + "\n")
    return 0


def _estimate(args) -> int:
    from engine.catalogue import hardware_profile, model_shape
    from engine.errors import ConfigError
    from engine.memory import concurrency_lines, model_memory_lines, params_only_line

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
            for line in model_memory_lines(shape, args.bits, args.kv_bits // 8, context, args.concurrent, args.group_size):
                print(f"  {line.name:<17} {_size(line.bytes)}  {line.arithmetic}")
            print("  (add --hardware NAME, or this-machine, for how many requests fit on a device)")
        else:
            profile = hardware_profile(args.hardware, on_measured=lambda path: print(
                f"measured this machine and saved the profile to {path} (delete it there to measure again)"))
            lines, fits = concurrency_lines(shape, profile.memory_bytes, args.bits, args.kv_bits // 8, context,
                                            args.max_num_batched_tokens, 256, args.group_size)
            print(f"{args.hardware}: {profile.memory_bytes / 1e9:.1f} GB ({profile.source})")
            for line in lines:
                print(f"  {line.name:<17} {line.bytes / 1e9:>8.2f} GB  {'measured' if line.measured else 'estimate'}  {line.arithmetic}")
            weights = lines[0].bytes
            if weights >= profile.memory_bytes:
                print(f"=> impossible: the weights alone ({weights / 1e9:.2f} GB) exceed the device's {profile.memory_bytes / 1e9:.1f} GB")
            else:
                print(f"=> {fits:,} concurrent {context:,}-token requests fit")
    if args.loaded:
        _compare_with_loaded()
    return 0


def _size(count: int) -> str:
    """Bytes in the unit that reads best: KiB for a token's KV, GB for the rest."""
    return f"{count / 1024:>8,.0f} KiB" if count < 1 << 20 else f"{count / 1e9:>8.2f} GB "


def _compare_with_loaded() -> int:
    from engine import EngineConfig, LLMEngine
    from engine.memory import weight_bytes_estimate

    # Unquantized float32 weights and cache, as the estimate below assumes (not the default's auto choice).
    engine = LLMEngine(EngineConfig(device="cpu", dtype="float32", kv_cache_memory=64 << 20, compile_decode="off",
                                    quantization="none", kv_cache_dtype="float32"))
    estimate = weight_bytes_estimate(engine.model_config, 32)
    # The scheduler's blocks, plus the one scratch block the executor keeps for warm-up and compiling.
    kv_estimate = (engine.num_kv_blocks + 1) * engine.config.block_size * engine.model_config.kv_bytes_per_token(4)
    print(f"loaded {engine.model_path.name} (float32): weights estimated {estimate / 1e6:.2f} MB, measured {engine.weight_bytes / 1e6:.2f} MB "
          f"({100 * (estimate / engine.weight_bytes - 1):+.2f}%); KV cache estimated {kv_estimate / 1e6:.2f} MB, "
          f"measured {engine.kv_cache_bytes / 1e6:.2f} MB ({100 * (kv_estimate / engine.kv_cache_bytes - 1):+.2f}%)")
    return 0


def _calibrate(args) -> int:
    from engine import EngineConfig, LLMEngine
    from workbench.calibration import fit, measure
    from engine.catalogue import measure_this_machine, save_profile

    # Eager, as the cost model's step times assume (a compile would also take the cores mid-measurement).
    engine = LLMEngine(EngineConfig(device="auto", kv_cache_memory=256 << 20, compile_decode="off"))
    base = measure_this_machine()
    print(f"measured: {base.bandwidth_bytes_s / 1e9:.1f} GB/s copy bandwidth, {base.peak_flops / 1e9:.1f} GFLOP/s matmul ({base.source})")
    points = measure(engine)
    profile, train_error, held_out_error = fit(engine, base, points)
    path = save_profile(args.name, profile)
    print(f"fitted: bandwidth efficiency {profile.bandwidth_efficiency:.3f} (weights) / {profile.kv_bandwidth_efficiency:.3f} (K/V), compute efficiency {profile.compute_efficiency:.3f}, "
          f"step overhead {profile.step_overhead_s * 1000:.2f} ms, per-sequence overhead {profile.sequence_overhead_s * 1000:.3f} ms")
    print(f"median |prediction error|: {train_error:.1f}% on the {len(points[0::2])} fitted points, "
          f"{held_out_error:.1f}% on the {len(points[1::2])} held-out points; saved as {args.name!r} in {path}")
    return 0


def _compare(args) -> int:
    from workbench.compare import compare, format_comparison, load_report

    baseline, candidate = load_report(args.baseline), load_report(args.candidate)
    intended, tolerated = args.intended, args.tolerated
    if intended is None and tolerated is None:
        # Fall back to the decision the scenario declared before the runs.
        declared = candidate["scenario"].get("decision") or {}
        intended, tolerated = declared.get("intended", []), declared.get("tolerated", [])
    result = compare(baseline, candidate, intended or [], tolerated or [])
    print(format_comparison(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
