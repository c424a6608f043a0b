"""`workbench calibrate`: the cost model fitted to this machine, saved as a hardware profile."""

from __future__ import annotations


def add_to(commands) -> None:
    calibrate = commands.add_parser(
        "calibrate", help="fit the cost model to this machine and save it as a hardware profile"
    )
    calibrate.add_argument("--name", default="this-machine-calibrated")
    calibrate.set_defaults(handler=run)


def run(args) -> int:
    from engine import EngineConfig, LLMEngine
    from engine.simulation.catalogue import measure_this_machine, save_profile
    from workbench.analysis.calibration import fit, measure

    # Eager, as the cost model's step times assume (a compile would also take the cores mid-measurement).
    engine = LLMEngine(EngineConfig(device="auto", kv_cache_memory=256 << 20, compile_decode="off"))
    base = measure_this_machine()
    print(
        f"measured: {base.bandwidth_bytes_s / 1e9:.1f} GB/s copy bandwidth, {base.peak_flops / 1e9:.1f} GFLOP/s matmul "
        f"({base.source})"
    )
    points = measure(engine)
    profile, train_error, held_out_error = fit(engine, base, points)
    path = save_profile(args.name, profile)
    print(
        f"fitted: bandwidth efficiency {profile.bandwidth_efficiency:.3f} (weights) / "
        f"{profile.kv_bandwidth_efficiency:.3f} (K/V), compute efficiency {profile.compute_efficiency:.3f}, "
        f"step overhead {profile.step_overhead_s * 1000:.2f} ms, per-sequence overhead "
        f"{profile.sequence_overhead_s * 1000:.3f} ms"
    )
    print(
        f"median |prediction error|: {train_error:.1f}% on the {len(points[0::2])} fitted points, "
        f"{held_out_error:.1f}% on the {len(points[1::2])} held-out points; saved as {args.name!r} in {path}"
    )
    return 0
