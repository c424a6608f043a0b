"""Scenarios on the tiny model for the lab's and the window's tests: a short chat run with a burst,
and a preset with two arms and a decision whose verdict is known."""

from __future__ import annotations

from engine import EngineConfig
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.scenario import SLO, Scenario, ScenarioEvent


def tiny_scenario(directory, **engine_settings) -> Scenario:
    settings = dict(model=str(directory), device="cpu", num_kv_blocks=128, block_size=4, max_num_batched_tokens=64)
    settings.update(engine_settings)
    return Scenario(
        name="tiny-chat",
        engine=EngineConfig(**settings),
        traffic=TrafficProfile(
            arrival="poisson",
            rate=400.0,
            num_requests=12,
            tag="chat",
            prompt_len=LengthDistribution(kind="uniform", low=4, high=24),
            output_len=LengthDistribution(kind="fixed", mean=6),
        ),
        events=[ScenarioEvent(at_s=0.0, action="inject", count=2, prompt_tokens=40, output_tokens=3, tag="burst")],
        slo=SLO(ttft_ms=10_000, tpot_ms=10_000, e2e_ms=60_000),
        seed=3,
    )


def arms_preset(tmp_path, directory) -> str:
    """Two arms on one fixed cache size: float32 weights and cache, against int8 weights with a
    bfloat16 cache (twice the tokens in the same bytes); an intended gain no run can reach (ten more
    points of goodput, both arms meeting their minute-long SLOs with every request), so the verdict
    is known whatever the machine's speed does to the latencies."""
    path = tmp_path / "arms.toml"
    path.write_text(f"""
name = "tiny-arms"
seed = 1

[engine]
model = "{directory}"
device = "cpu"
block_size = 4
kv_cache_memory = 262144
max_num_batched_tokens = 64
compile_decode = "off"

[traffic]
arrival = "poisson"
rate = 200.0
num_requests = 6
prompt_len = {{ kind = "uniform", low = 4, high = 16 }}
output_len = {{ kind = "fixed", mean = 5 }}

[slo]
ttft_ms = 60000
tpot_ms = 60000

[variants.plain]
engine = {{ quantization = "none" }}

[variants.int8]
engine = {{ quantization = "int8", kv_cache_dtype = "bfloat16" }}

[decision]
baseline = "plain"
candidate = "int8"
intended = ["goodput_perc:+10"]
tolerated = ["ttft_p99_ms:+1000%"]
""")
    return str(path)
