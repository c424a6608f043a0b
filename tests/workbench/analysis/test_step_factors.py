"""This machine's measured step factors (issue 59 #4): a real run's steps read back as the shapes
the cost model prices, the factor per batch-size bucket fitted from them, the cost model applying
it, and the profile that carries it saved and read back."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest

from engine import EngineConfig, LLMEngine
from engine.errors import ConfigError
from engine.simulation.catalogue import PROFILE_BOUNDS, hardware_profile, save_profile
from engine.simulation.cost_model import StepShape
from workbench.analysis.calibration import fit_step_scales, real_steps
from workbench.cli import main
from workbench.runs.run_log import read_run_log
from workbench.runs.run_recorder import RUN_LOG_NAME

SIMULATED = "simulated:llama-3-8b@a100-80gb"


def test_a_runs_steps_read_back_as_the_shapes_its_engine_priced(tmp_path):
    """On a simulated engine a step lasts exactly what the cost model gives its batch, so the shapes
    read back from the run's step traces (new tokens, context, sampling, prefills starting) must
    price to each logged duration: any column misread (a context one short, a chunk taken for a
    start, a prefill chunk sampling) moves some step's price."""
    out = tmp_path / "run"
    arguments = ["bench", "--preset", "chat-steady", "--set", f"engine.model={SIMULATED}", "--set", "trace=full"]
    arguments += [
        "--set",
        "traffic.rate=40",
        "--set",
        "traffic.num_requests=40",
        "--set",
        "engine.max_num_batched_tokens=256",
    ]
    assert main([*arguments, "--no-plots", "--out", str(out)]) == 0
    log = read_run_log(out / RUN_LOG_NAME, with_traces=True)
    steps = real_steps(log)
    assert len(steps) == len(log.steps) > 100
    chunked = [shape for shape, _ in steps if any(new > 1 and context > new for new, context, _ in shape.sequences)]
    assert chunked, "no prefill chunk after cached tokens: the test would not see a start misread"
    model = LLMEngine(EngineConfig(model=SIMULATED)).executor.cost_model
    for shape, seconds in steps:
        assert model.step_time(shape) == pytest.approx(seconds, rel=1e-9)


def decode(rows: int, context: int = 100) -> StepShape:
    return StepShape(tuple((1, context, True) for _ in range(rows)))


def test_the_factors_are_each_buckets_median_and_an_empty_bucket_takes_its_neighbours():
    """Steps measured at a known multiple of the model's price: 1 row x1.1, 2-3 rows x0.9,
    nothing at 4-7, 8-15 rows x1.5 (and one outlier the median ignores), prefills x1.2."""
    engine = LLMEngine(EngineConfig(model=SIMULATED, serving_stack="ideal"))
    profile = engine.executor.cost_model.hardware
    model = engine.executor.cost_model
    prefill = StepShape(((128, 128, True),), starting=1)
    truth = [(decode(1), 1.1), (decode(1, 900), 1.1), (decode(2), 0.9), (decode(3), 0.9), (prefill, 1.2)]
    truth += [(decode(8), 1.5), (decode(12), 1.5), (decode(15, 2000), 1.5), (decode(9), 9.0)]
    steps = [(shape, model.step_time(shape) * factor) for shape, factor in truth]
    fitted = fit_step_scales(engine, profile, steps)
    assert fitted.decode_scale_by_rows == pytest.approx((1.1, 0.9, 0.9, 1.5))
    assert fitted.prefill_step_scale == pytest.approx(1.2)
    # Fitting again from the fitted profile gives the same factors (they are not compounded).
    assert fit_step_scales(engine, fitted, steps).decode_scale_by_rows == pytest.approx((1.1, 0.9, 0.9, 1.5))


def test_the_cost_model_applies_the_factor_of_the_steps_bucket():
    engine = LLMEngine(EngineConfig(model=SIMULATED, serving_stack="ideal"))
    plain = engine.executor.cost_model
    scaled = replace(plain.hardware, decode_scale_by_rows=(1.0, 2.0, 3.0), prefill_step_scale=0.5)
    engine.executor.cost_model.hardware = scaled
    for rows, factor in ((1, 1.0), (2, 2.0), (3, 2.0), (4, 3.0), (100, 3.0)):  # the last bucket: every larger batch
        shape = decode(rows)
        assert engine.executor.cost_model.gpu_time(shape) == pytest.approx(
            factor * LLMEngine(EngineConfig(model=SIMULATED, serving_stack="ideal")).executor.cost_model.gpu_time(shape)
        )
    mixed = StepShape(((1, 300, True), (64, 64, True)), starting=1)  # a decode beside a prefill
    unscaled = LLMEngine(EngineConfig(model=SIMULATED, serving_stack="ideal")).executor.cost_model.gpu_time(mixed)
    assert engine.executor.cost_model.gpu_time(mixed) == pytest.approx(0.5 * unscaled)


def test_a_profile_with_factors_is_saved_and_read_back_beside_one_saved_before_they_existed(tmp_path, monkeypatch):
    """The factors are a TOML array (a tuple's repr, "(1.0, 2.0)", is not TOML: the next read of
    the file failed); a profile written before the field existed still reads, with no factors."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    (tmp_path / "hardware.toml").write_text(
        '[older]\nsource = "measured before the factors"\nmemory_bytes = 1e9\nbandwidth_bytes_s = 1e10\n'
        "peak_flops = 1e11\n"
    )
    profile = replace(hardware_profile("a100-80gb"), decode_scale_by_rows=(1.04, 0.99, 1.31), prefill_step_scale=1.2)
    save_profile("fitted", profile)
    assert hardware_profile("fitted") == profile
    older = hardware_profile("older")
    assert older.decode_scale_by_rows == () and older.prefill_step_scale == 1.0 and older.peak_flops == 1e11


@pytest.mark.parametrize("name", ["my machine", "a.b", "rack [3]", 'say "hi"', "café", "GPU 😀", "del\x7f"])
def test_any_profile_name_is_saved_and_read_back_as_itself_beside_the_others(name, tmp_path, monkeypatch):
    """Issue 77 #10: `calibrate --name "my machine"` wrote an unquoted TOML table, and the file,
    every profile in it, stopped parsing; "a.b" was saved as a table "a"."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    kept = replace(hardware_profile("a100-80gb"), source="kept")
    save_profile("kept", kept)
    profile = replace(hardware_profile("h100-80gb"), source=f"measured as {name}")
    save_profile(name, profile)
    assert hardware_profile(name) == profile and hardware_profile("kept") == kept


def test_a_damaged_profile_file_is_refused_before_calibrate_measures_and_kept(tmp_path, monkeypatch, capsys):
    """Issue 77 #10: calibrate measured for minutes and only then refused the file, losing the fit."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    damaged = "[my machine]\nsource = 'x'\n"
    (tmp_path / "hardware.toml").write_text(damaged)
    measured = []
    monkeypatch.setattr("engine.simulation.catalogue.measure_this_machine", lambda: measured.append(1))
    assert main(["calibrate", "--name", "fitted"]) == 2
    assert f"{tmp_path / 'hardware.toml'}: not valid TOML" in capsys.readouterr().err
    assert measured == [] and (tmp_path / "hardware.toml").read_text() == damaged
    with pytest.raises(ConfigError, match="not valid TOML .* it is kept as it is"):
        save_profile("fitted", hardware_profile("a100-80gb"))
    assert (tmp_path / "hardware.toml").read_text() == damaged


@pytest.mark.parametrize(
    "name, value",
    [
        ("step_overhead_s", 1e9),
        ("sequence_overhead_s", 5.0),
        ("decode_scale_by_rows", (1.0, 1e308)),
        ("prefill_step_scale", float("inf")),
        ("roofline_sharpness", 1e300),
        ("bandwidth_efficiency", float("nan")),
        ("peak_flops", 1e300),
        ("link_latency_s", -1.0),
    ],
)
def test_a_saved_profile_past_its_bounds_is_refused_naming_the_file_key_and_bound(name, value, tmp_path, monkeypatch):
    """Issue 77 #12: profiles that passed validation hung serve (step_overhead_s = 1e9), broke
    report.json (a factor of 1e308 made times infinite) or made every operator free
    (roofline_sharpness = 1e300), without a word."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    save_profile("fitted", hardware_profile("a100-80gb"))
    path = tmp_path / "hardware.toml"
    toml_value = "[" + ", ".join(map(repr, value)) + "]" if isinstance(value, tuple) else repr(value)
    lines = [line for line in path.read_text().splitlines() if not line.startswith(f"{name} =")]
    path.write_text("\n".join([*lines, f"{name} = {toml_value}", ""]))
    low, high, low_included = PROFILE_BOUNDS[name]
    bound = re.escape(f"{'[' if low_included else '('}{low:g}, {high:g}]")
    if math.isfinite(value if isinstance(value, float) else 0.0):
        expected = rf"{path}: fitted: {name}: expected a number in {bound}"
    else:  # the settings' own rule for every number, before the bounds
        expected = rf"{path}: fitted.{name}: expected a finite number"
    with pytest.raises(ConfigError, match=expected):
        hardware_profile("fitted")
