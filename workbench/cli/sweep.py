"""`workbench sweep`: a preset at every combination of some settings and arrival rates (sweep.csv and
its charts), or the highest arrival rate that meets the preset's SLOs."""

from __future__ import annotations

import sys
from pathlib import Path

from workbench.cli.arguments import add_server_model_options, add_set_option, at_least, backend_factory


def add_to(commands) -> None:
    sweep = commands.add_parser(
        "sweep", help="run a preset across settings and arrival rates: sweep.csv, throughput vs p99, goodput vs rate"
    )
    sweep.add_argument("--preset", required=True, help="a preset name (see `workbench presets`) or a .toml file")
    sweep.add_argument("--variant", help="sweep this variant of the preset (default: the preset's own settings)")
    sweep.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="a setting and its values, e.g. engine.max_num_seqs=8,16,32 (repeat for a grid; keys: docs/knobs.md)",
    )
    sweep.add_argument(
        "--rates", metavar="R1,R2,...", help="arrival rates in requests/s to run each combination at (traffic.rate)"
    )
    sweep.add_argument(
        "--find-max-rate",
        action="store_true",
        help="search for the highest arrival rate meeting the preset's SLOs (each combination of --vary)",
    )
    sweep.add_argument(
        "--goodput-target",
        type=at_least(float, 0.0, inclusive=False),
        default=90.0,
        metavar="PERCENT",
        help="with --find-max-rate: the share of arrived requests that must meet every SLO (default 90)",
    )
    sweep.add_argument(
        "--tolerance",
        type=at_least(float, 0.0, inclusive=False),
        default=0.1,
        metavar="FRACTION",
        help="with --find-max-rate: stop when the bracket's ends are within this fraction (default 0.1)",
    )
    add_set_option(sweep, "a setting fixed for every point, e.g. traffic.num_requests=2000")
    sweep.add_argument("--seed", type=at_least(int, 0), help="override the preset's seed")
    sweep.add_argument("--out", required=True, type=Path, help="folder for sweep.csv, the charts and a run per point")
    sweep.add_argument("--no-plots", action="store_true", help="skip the charts")
    sweep.add_argument("--server", metavar="URL", help="run every point against this OpenAI-compatible server")
    add_server_model_options(sweep)
    sweep.set_defaults(handler=run)


MIN_RATE = 1 / 3600  # requests/s: below one an hour a run waits for its first request for hours


def _rates(text: str | None) -> list[float]:
    from engine.errors import ConfigError

    if not text:
        return []
    rates = []
    for item in text.split(","):
        try:
            rate = float(item)
        except ValueError:
            rate = float("nan")
        if not rate >= MIN_RATE or rate == float("inf"):
            raise ConfigError(
                f"--rates: expected requests/s of at least {MIN_RATE:g} (one an hour), got {item.strip()!r}"
            )
        rates.append(rate)
    return rates


def run(args) -> int:
    from engine.configuration.config import default_compile_decode
    from engine.errors import ConfigError
    from workbench.analysis.sweep import (
        RATE_KEY,
        SWEEP_CSV,
        check_search_settings,
        parse_vary,
        plan_points,
        sweep_row,
        write_search_settings,
        write_sweep_csv,
    )
    from workbench.bench.headless import run_headless
    from workbench.cli.bench import print_summary
    from workbench.runs.run_folder import RunFolderLock
    from workbench.traffic.presets import load_preset

    varies = [parse_vary(text) for text in args.vary]
    rates = _rates(args.rates)
    if args.find_max_rate and (rates or any(vary.key == RATE_KEY for vary in varies)):
        raise ConfigError("--find-max-rate searches the rate itself: leave out --rates and --vary traffic.rate")
    if not varies and not rates and not args.find_max_rate:
        raise ConfigError("nothing to sweep: give --vary KEY=V1,V2,..., --rates R1,R2,... or --find-max-rate")
    overrides = list(args.overrides) + ([f"seed={args.seed}"] if args.seed is not None else [])
    defaults = {"compile_decode": default_compile_decode(otherwise="blocking")}

    def scenario_for(point_overrides: list[str]):
        return load_preset(args.preset, [*overrides, *point_overrides], args.variant, engine_defaults=defaults)

    points = plan_points(varies, rates)
    scenarios = {point.index: scenario_for(point.overrides()) for point in points}  # every point checked first
    base = scenarios[points[0].index] if points else scenario_for([])
    if args.find_max_rate:  # every combination searched, and the search's own settings, before anything runs
        for scenario in list(scenarios.values()) or [base]:
            _check_rate_search(scenario)
        check_search_settings(args.goodput_target, args.tolerance)
    make_backend, _ = backend_factory(args, base)
    with RunFolderLock(args.out):  # to the end: a second sweep into the same --out is refused
        if args.find_max_rate:  # the window's Sweep view draws the target from it
            write_search_settings(args.out, args.goodput_target, args.tolerance)
        keys = list(points[0].settings) if points else []
        varied_keys = keys + [RATE_KEY] if args.find_max_rate else keys
        rows = []

        def run_point(point, scenario) -> dict:
            """Run one point, add its row and rewrite sweep.csv (an interrupted sweep keeps its points)."""
            folder = args.out / point.folder
            print(f"running {point.label() or 'the preset'} -> {folder}", file=sys.stderr)
            backend = make_backend(scenario)
            try:
                report = run_headless(scenario, folder, backend=backend)
            finally:
                backend.close()
            print_summary(report)
            rows.append(sweep_row(point, report))
            write_sweep_csv(args.out / SWEEP_CSV, varied_keys, rows)
            return report

        if args.find_max_rate:
            for point in points or [None]:
                _search(args, point, scenario_for, run_point, first_index=len(rows) + 1)
        else:
            for point in points:
                run_point(point, scenarios[point.index])
        print(f"sweep: {len(rows)} points -> {args.out / SWEEP_CSV}")
        if not args.no_plots:
            from workbench.analysis.sweep import read_sweep
            from workbench.gui.charts.sweep_chart import export_sweep_images

            target = args.goodput_target if args.find_max_rate else None
            for path in export_sweep_images(read_sweep(args.out), args.out, target):
                print(f"chart: {path}")
        return 0


def _check_rate_search(scenario) -> None:
    from engine.errors import ConfigError
    from workbench.traffic.arrivals import ARRIVALS
    from workbench.traffic.sources import PROMPT_SOURCES

    traffic = scenario.traffic
    if traffic is None or not ARRIVALS[traffic.arrival].open_loop or PROMPT_SOURCES[traffic.prompts].recorded:
        raise ConfigError(
            "--find-max-rate: the preset's traffic needs an arrival rate (poisson, gamma, constant or ramp); "
            "a trace's pace is traffic.time_scale (sweep it with --vary) and closed-loop traffic has no rate"
        )
    if not any(value is not None for value in (scenario.slo.ttft_ms, scenario.slo.tpot_ms, scenario.slo.e2e_ms)):
        raise ConfigError("--find-max-rate: the preset has no [slo]; goodput needs at least one SLO")


def _search(args, point, scenario_for, run_point, first_index: int) -> None:
    """One search of the highest rate for a combination of the varied settings (or the preset as
    is); its runs are points from `first_index` on."""
    from workbench.analysis.sweep import RATE_KEY, SweepPoint, find_max_rate

    start = scenario_for(point.overrides() if point else []).traffic.rate
    runs = 0

    def run_at(rate: float) -> dict:
        nonlocal runs
        probe = SweepPoint(first_index + runs, {**(point.settings if point else {}), RATE_KEY: f"{rate:.6g}"})
        runs += 1
        return run_point(probe, scenario_for(probe.overrides()))

    result = find_max_rate(run_at, start, args.goodput_target, args.tolerance)
    print(f"{point.label() + ': ' if point else ''}{result.describe()}")
