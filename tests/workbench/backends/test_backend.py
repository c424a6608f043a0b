"""The Backend protocol: the runner and the run log work with any backend, and what a backend
does not expose is reported as not exposed, never as zeros."""

from __future__ import annotations

import dataclasses

from engine import EngineConfig, LLMEngine, SamplingParams
from workbench.analysis.report import NOT_EXPOSED, build_report
from workbench.backends.local import LocalBackend
from workbench.backends.protocol import BLOCK_FREE, BackendCapabilities, BackendUpdate
from workbench.runs.run_log import read_run_log
from workbench.runs.run_recorder import RunRecorder
from workbench.runs.runner import ScenarioRunner
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.scenario import Scenario, ScenarioEvent

SIMULATED = EngineConfig(model="simulated:llama-2-7b@h100-80gb")
TRAFFIC = TrafficProfile(
    arrival="constant",
    rate=50.0,
    num_requests=12,
    prompt_len=LengthDistribution(mean=40),
    output_len=LengthDistribution(mean=6),
)


class TokensOnlyBackend:
    """What a remote OpenAI-compatible server gives: tokens as they stream and finished requests'
    metrics, no server state, no scheduling events, no block map. Built over the local engine so
    that the test needs no server; the runner sees only the protocol."""

    name = "tokens-only test backend"
    capabilities = BackendCapabilities(token_ids=True)

    def __init__(self, local: LocalBackend):
        self._local = local
        for name in (
            "max_model_len",
            "vocab_size",
            "tokenizer",
            "clock",
            "sleep",
            "idle_wait_is_free",
            "submit",
            "abort",
            "has_unfinished",
            "progress",
            "problems",
            "close",
            "stop_background_work",
            "warm_up_progress",
        ):
            setattr(self, name, getattr(local, name))
        self.kv_capacity_tokens = self.kv_cache_bytes = self.num_kv_blocks = None

    def describe(self) -> dict:
        return {"versions": {}, "engine": {}}

    def advance(self, until: float | None = None) -> BackendUpdate:
        return BackendUpdate(outputs=self._local.advance().outputs)

    def block_owners(self, rows):
        return None


def record(backend, tmp_path):
    scenario = Scenario(name="any backend", engine=SIMULATED, traffic=TRAFFIC, seed=1)
    runner = ScenarioRunner(backend, scenario)
    recorder = RunRecorder.for_run(tmp_path / "run.jsonl", backend, runner, dataclasses.asdict(scenario))
    runner.on_step, runner.on_request_end = recorder.update, recorder.request_ended
    recorder.finish(runner.run(runner.start_time))
    return build_report(read_run_log(tmp_path / "run.jsonl"))


def test_a_backend_without_server_state_reports_it_as_not_exposed(tmp_path):
    report = record(TokensOnlyBackend(LocalBackend(LLMEngine(SIMULATED))), tmp_path)
    metrics = report["metrics"]
    assert report["complete"] and metrics["requests_finished"]["value"] == 12
    assert metrics["ttft_p50_ms"]["n"] == 12 and metrics["ttft_p50_ms"]["value"] > 0  # latency needs no server state
    for name in ("kv_usage_peak_perc", "kv_usage_mean_perc", "preemptions", "prefix_cache_hit_perc", "prefill_tok_s"):
        assert metrics[name] == {"value": None, "unit": NOT_EXPOSED, "n": 0, "interval": None}, name
    assert report["backend"]["name"] == "tokens-only test backend"
    assert "kv_cache" in report["backend"]["not_exposed"] and "token_ids" not in report["backend"]["not_exposed"]


def test_the_local_backend_exposes_everything_and_the_same_run(tmp_path):
    report = record(LocalBackend(LLMEngine(SIMULATED)), tmp_path)
    assert report["backend"]["not_exposed"] == [] and report["backend"]["name"] == "in-process engine"
    assert report["versions"]["decode_step"] == "simulated"
    assert report["metrics"]["preemptions"]["unit"] == "events" and report["metrics"]["kv_usage_peak_perc"]["value"] > 0


def test_the_local_backend_colours_the_blocks_its_requests_hold():
    backend = LocalBackend(LLMEngine(dataclasses.replace(SIMULATED, num_kv_blocks=8, block_size=16, max_model_len=128)))
    backend.submit(
        list(range(40)), SamplingParams(max_tokens=4, ignore_eos=True), request_id="a", arrival_time=backend.clock()
    )
    backend.advance()
    owners = backend.block_owners({"a": 5})
    assert list(owners) == [5, 5, 5] + [BLOCK_FREE] * 5  # 41 tokens in 16-token blocks
    assert backend.progress("a").state == "decoding" and backend.progress("a").num_prompt_tokens == 40


def test_a_request_aborted_since_the_last_update_is_kept_when_the_run_is_saved():
    """4 sent, 3 recorded: the engine drops an aborted request at once and reports its end at the
    next step, and a run saved (or ended) in between left it out."""
    backend = LocalBackend(LLMEngine(SIMULATED))
    inject = ScenarioEvent(at_s=0.0, action="inject", count=4, prompt_tokens=32, output_tokens=500)
    runner = ScenarioRunner(backend, Scenario(name="abort", engine=SIMULATED, traffic=None, events=[inject]))
    runner.start()
    while runner.num_in_flight < 4:
        runner.tick()
    first = next(iter(runner._in_flight))
    backend.abort(first)
    saved = {ended.request_id: ended.metrics.finish_reason for ended in runner.in_flight_now("when saved")}
    assert len(saved) == 4 and saved[first] == "abort"
    assert sorted(saved.values()) == ["abort", "unfinished", "unfinished", "unfinished"]
