"""A scenario run without a GUI: engine + runner + run log + report files.

This is `workbench bench`'s back end; the GUI's "save run" writes the same files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from engine.llm_engine import LLMEngine
from engine.model_file import ModelSource
from workbench.provenance import environment
from workbench.report import write_report_files
from workbench.run_log import RunLogWriter, read_run_log
from workbench.runner import EndedRequest, ScenarioRunner
from workbench.scenario import Scenario

RUN_LOG_NAME = "run.jsonl"


def engine_summary(engine: LLMEngine) -> dict:
    return {
        "kv_blocks": engine.num_kv_blocks,
        "kv_capacity_tokens": engine.kv_capacity_tokens,
        "kv_cache_bytes": engine.kv_cache_bytes,
        "kv_bytes_per_token": engine.kv_bytes_per_token,
        "weight_bytes": engine.weight_bytes,
        "max_model_len": engine.max_model_len,
        "num_parameters": engine.model_config.num_parameters,
    }


def run_header(engine: LLMEngine, scenario: dict, *, variant: str | None, seed: int, requests_planned: int, start_time: float) -> dict:
    """The run log's first line: everything needed to read and reproduce the run."""
    return {
        "start_time": start_time,
        "scenario": scenario,
        "variant": variant,
        "seed": seed,
        "versions": environment(engine),
        "engine": engine_summary(engine),
        "requests_planned": requests_planned,
    }


def run_headless(
    scenario: Scenario,
    out_dir: Path,
    *,
    variant: str | None = None,
    source: ModelSource | None = None,
    on_progress: Callable[[EndedRequest, int], None] = lambda ended, total: None,
) -> dict:
    """Run the scenario, log it to out_dir/run.jsonl as it happens, then write the report files.
    Ctrl-C ends the run early; the report is then built from the log and marked incomplete."""
    engine = LLMEngine(scenario.engine, source=source)
    runner = ScenarioRunner(engine, scenario)
    log_path = out_dir / RUN_LOG_NAME
    if log_path.exists():
        log_path.unlink()  # a rerun into the same folder starts a fresh log
    writer = RunLogWriter(log_path)
    start_time = engine.clock()
    writer.write("header", run_header(
        engine, dataclasses.asdict(scenario), variant=variant, seed=scenario.seed,
        requests_planned=runner.total_requests, start_time=start_time,
    ))

    def request_ended(ended: EndedRequest) -> None:
        writer.request(ended.request_id, ended.tag, ended.metrics)
        on_progress(ended, runner.total_requests)

    runner.on_step = lambda step: writer.step(step.stats)
    runner.on_request_end = request_ended
    try:
        result = runner.run(start_time)
        writer.write("footer", {
            "duration_s": result.duration_s, "stopped_early": result.interrupted,
            "requests_unfinished": result.num_unfinished, "requests_not_sent": result.num_not_sent,
        })
    except KeyboardInterrupt:
        pass
    finally:
        writer.close()
    return write_report_files(read_run_log(log_path), out_dir)
