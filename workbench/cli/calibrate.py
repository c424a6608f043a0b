"""`workbench calibrate`: the cost model fitted to this machine, saved as a hardware profile, and
with --held-out, its error end to end on workloads the fit never saw (workbench/analysis/fidelity.py).
With --published, the simulated GPUs instead, against the published serving runs of
presets/published/corpus.toml (workbench/analysis/published.py)."""

from __future__ import annotations

from pathlib import Path


def add_to(commands) -> None:
    calibrate = commands.add_parser(
        "calibrate", help="fit the cost model to this machine and save it as a hardware profile"
    )
    calibrate.add_argument("--name", default="this-machine-calibrated")
    calibrate.add_argument(
        "--held-out",
        type=Path,
        metavar="OUT",
        help="then run the held-out presets (chat-burst, sharegpt-chat, kv-pressure, azure-conv's bundled variant) "
        "on the real engine and replay each on the calibrated simulator, into OUT; print and write the errors",
    )
    calibrate.add_argument(
        "--presets",
        help="with --held-out: only these of them, comma-separated (e.g. kv-pressure,azure-conv-bundled)",
    )
    calibrate.add_argument(
        "--requests",
        type=int,
        help="at most this many requests per real run: the step-fit runs and --held-out's (default: each preset's)",
    )
    calibrate.add_argument(
        "--published",
        action="store_true",
        help="instead: replay every published run of presets/published/corpus.toml on simulated GPUs with the "
        "catalogued stacks and print each figure's error (fitted and held-out runs apart)",
    )
    calibrate.add_argument(
        "--refit",
        action="store_true",
        help="with --published: first fit each stack's fitted parts to the fitting runs, inside their sources' "
        "bounds (about 30 minutes on 2 cores), and print them",
    )
    calibrate.add_argument(
        "--refit-hardware",
        action="store_true",
        help="with --refit: also fit the GPUs' efficiencies and link latency (shared by every stack; hours on 2 cores)",
    )
    calibrate.add_argument(
        "--no-loso",
        action="store_true",
        help="with --published: skip the leave-one-source-out table (each source's runs on stacks fitted "
        "without them; a few minutes)",
    )
    calibrate.add_argument(
        "--errors-out", type=Path, metavar="FILE", help="with --published: also write the errors as TOML to FILE"
    )
    calibrate.set_defaults(handler=run)


def run(args) -> int:
    if args.published:
        return _published(args)
    from engine import EngineConfig, LLMEngine
    from engine.simulation.catalogue import check_saved_profiles, measure_this_machine, save_profile
    from workbench.analysis.calibration import fit, fit_step_scales, measure

    check_saved_profiles(args.name)  # a damaged profile file or a bad name: refused before minutes of measuring
    chosen = _chosen(args.presets) if args.held_out else []
    # Eager, as the cost model's step times assume (a compile would also take the cores
    # mid-measurement), and one weight format in every step: the cost model streams one set of
    # weight bytes, while the batched bf16 copy switches steps of 8 rows or more to 2 bytes a
    # weight (docs/memory.md, "The simulator's error"). The held-out runs use the same settings.
    engine = LLMEngine(
        EngineConfig(device="auto", kv_cache_memory=256 << 20, compile_decode="off", batched_bf16_copy=False)
    )
    base = measure_this_machine()
    print(
        f"measured: {base.bandwidth_bytes_s / 1e9:.1f} GB/s copy bandwidth, {base.peak_flops / 1e9:.1f} GFLOP/s matmul "
        f"({base.source})"
    )
    points = measure(engine)
    profile, train_error, held_out_error = fit(engine, base, points)
    print(
        f"fitted: bandwidth efficiency {profile.bandwidth_efficiency:.3f} (weights) / "
        f"{profile.kv_bandwidth_efficiency:.3f} (K/V), compute efficiency {profile.compute_efficiency:.3f}, "
        f"step overhead {profile.step_overhead_s * 1000:.2f} ms, per-sequence overhead "
        f"{profile.sequence_overhead_s * 1000:.3f} ms"
    )
    print(
        f"median |prediction error|: {train_error:.1f}% on the {len(points[0::2])} fitted points, "
        f"{held_out_error:.1f}% on the {len(points[1::2])} held-out points"
    )
    profile = fit_step_scales(engine, profile, _steps_of_real_runs(args.held_out, args.requests))
    print(
        "whole engine steps against that: decode-only steps of "
        + ", ".join(
            f"{_rows_of_bucket(bucket, len(profile.decode_scale_by_rows))} rows x{scale:.3f}"
            for bucket, scale in enumerate(profile.decode_scale_by_rows)
        )
        + f"; steps with a prefill x{profile.prefill_step_scale:.3f}"
    )
    path = save_profile(args.name, profile)
    print(f"saved as {args.name!r} in {path}")
    if args.held_out:
        config = engine.config
        engine.close()
        del engine  # the held-out runs build their own
        _held_out(args, config, chosen)
    return 0


def _rows_of_bucket(bucket: int, buckets: int) -> str:
    """Bucket i's rows, 2^i to 2^(i+1) - 1 ("1", "2-3", ...), the last one open ("32+")."""
    low, high = 2**bucket, 2 ** (bucket + 1) - 1
    return f"{low}+" if bucket == buckets - 1 else (str(low) if low == high else f"{low}-{high}")


def _steps_of_real_runs(held_out: Path | None, requests: int | None) -> list:
    """The steps of the step-fit runs (workbench/analysis/calibration.py, STEP_FIT_RUNS) on the
    real engine, eager as calibrated, with at most `requests` each: into OUT/step-fit with
    --held-out, else into a temporary folder of this command's own."""
    import tempfile

    from workbench.analysis.calibration import STEP_FIT_RUNS, real_steps
    from workbench.runs.run_log import read_run_log
    from workbench.runs.run_recorder import RUN_LOG_NAME

    with tempfile.TemporaryDirectory(prefix="workbench-calibrate-") as scratch:
        home = held_out / "step-fit" if held_out else Path(scratch)
        steps = []
        for name, preset, settings in STEP_FIT_RUNS:
            folder = home / name
            limit = (f"traffic.num_requests={requests}",) if requests else ()
            overrides = [argument for setting in settings + limit for argument in ("--set", setting)]
            _workbench(
                f"step fit {name}",
                ["bench", "--preset", preset, *overrides, "--set", "engine.compile_decode=off"]
                + ["--set", "engine.batched_bf16_copy=false", "--set", "trace=full"]
                + ["--out", str(folder), "--no-plots"],
            )
            steps += real_steps(read_run_log(folder / RUN_LOG_NAME, with_traces=True))
        return steps


def _chosen(presets: str | None) -> list[tuple[str, str | None]]:
    """The held-out workloads --presets names (all of them without it), checked before anything runs."""
    from engine.errors import ConfigError
    from workbench.analysis.fidelity import HELD_OUT, held_out_name

    if not presets:
        return list(HELD_OUT)
    names = {held_out_name(*entry): entry for entry in HELD_OUT}
    unknown = [name for name in presets.split(",") if name not in names]
    if unknown:
        raise ConfigError(f"--presets: {', '.join(unknown)} not held out; expected some of {', '.join(names)}")
    return [names[name] for name in presets.split(",")]


def _held_out(args, config, chosen) -> None:
    """Each held-out preset on the real engine (eager, as calibrated), then replayed on the
    simulated engine of the same model and quantization on the profile just saved."""
    import json

    from engine.simulation.target import target_name
    from workbench.analysis.fidelity import (
        figure_errors,
        format_fidelity,
        held_out_name,
        step_terms,
        summarise,
    )
    from workbench.runs.run_log import read_run_log
    from workbench.runs.run_recorder import RUN_LOG_NAME

    simulated = target_name(config.model, args.name)
    errors, terms = [], {}
    for preset, variant in chosen:
        workload = held_out_name(preset, variant)
        real, replayed = args.held_out / workload / "real", args.held_out / workload / "simulated"
        limit = ["--set", f"traffic.num_requests={args.requests}"] if args.requests else []
        _workbench(
            workload,
            ["bench", "--preset", preset, *(["--variant", variant] if variant else []), *limit]
            + ["--set", "engine.compile_decode=off", "--set", "engine.batched_bf16_copy=false"]
            + ["--out", str(real), "--no-plots"],
        )
        real_report = json.loads((real / "report.json").read_text())
        # A simulated engine must hold its longest request; the real one rejects what does not fit
        # (kv-pressure's 64 blocks): the same context, then, for the same requests.
        context = min(real_report["engine"]["max_model_len"], real_report["engine"]["kv_capacity_tokens"])
        _workbench(
            workload,
            ["replay", str(real), "--backend", simulated, "--set", f"engine.quantization={config.quantization}"]
            + ["--set", f"engine.group_size={config.group_size}", "--set", f"engine.max_model_len={context}"]
            + ["--out", str(replayed), "--no-plots"],
        )
        replay_report = json.loads((replayed / "report.json").read_text())
        errors += figure_errors(workload, real_report, replay_report)
        terms[workload] = step_terms(read_run_log(real / RUN_LOG_NAME), read_run_log(replayed / RUN_LOG_NAME))
    summaries = summarise(errors)
    table = format_fidelity(errors, terms, summaries)
    (args.held_out / "fidelity.md").write_text(table + "\n")
    (args.held_out / "fidelity.json").write_text(
        json.dumps(
            {
                "profile": args.name,
                "simulated": simulated,
                "figures": [{**vars(error), "error_perc": error.error_perc} for error in errors],
                "summary": [{**vars(summary), "met": summary.met} for summary in summaries],
            },
            indent=2,
        )
        + "\n"
    )
    print(table)


def _workbench(workload: str, argv: list[str]) -> None:
    from engine.errors import ConfigError
    from workbench.cli import main

    print(f"{workload}: workbench {' '.join(argv)}", flush=True)
    if main(argv) != 0:
        raise ConfigError(f"{workload}: `workbench {' '.join(argv)}` failed (see above)")


def _published(args) -> int:
    import time

    from workbench.analysis.published import errors_of, errors_toml, format_table, load_corpus
    from workbench.analysis.published_fit import fit, format_loso_table, leave_one_source_out

    corpus = load_corpus()
    start = time.monotonic()

    def progress(line: str) -> None:
        print(f"{time.monotonic() - start:6.0f} s  {line}", flush=True)

    stacks = hardware = None
    if args.refit:
        fitted = fit(corpus, fit_hardware=args.refit_hardware, on_step=progress)
        stacks, hardware = fitted.stacks, fitted.hardware
        if hardware:
            print("\nfitted GPU values (every catalogued GPU), for presets/catalogue/hardware.toml:")
            for name, value in hardware.items():
                print(f"  {name} = {value!r}")
        print("fitted parts, for presets/catalogue/stacks.toml:")
        for name, stack in stacks.items():
            parts = ", ".join(f"{key} = {part.value:g}" for key, part in stack.parts().items() if part.fitted)
            print(f"  [{name}] {parts or 'nothing fitted'}")
    rows = errors_of(corpus, corpus.runs, stacks, hardware)
    print(format_table(rows))
    if args.errors_out:
        args.errors_out.write_text(errors_toml(rows))
        print(f"errors written to {args.errors_out}")
    if not args.no_loso:
        print("\nleave one source out: each source's runs on stacks fitted without them")
        print(format_loso_table(leave_one_source_out(corpus, on_step=progress)))
    return 0
