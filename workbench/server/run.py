"""Start `workbench serve`: load the engine, put it in its loop thread, and run the HTTP API with
uvicorn until interrupted."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import uvicorn

from engine import EngineConfig, LLMEngine
from engine.simulation import is_simulated
from workbench.process_tuning import allow_open_files, freeze_loaded_heap
from workbench.server.engine_loop import EngineLoop
from workbench.server.openai_api import create_app


def served_name(model: str) -> str:
    """The name /v1/models gives: the alias, a file's or folder's name, or the simulated spec."""
    return model if is_simulated(model) or not Path(model).suffix and "/" not in model else Path(model).name


def serve(config: EngineConfig, host: str, port: int, model_name: str | None = None) -> None:
    if is_simulated(config.model):
        # Served in real time (a laptop stands in for the simulated GPU), unless a speed was chosen.
        config = dataclasses.replace(config, simulation_speed=config.simulation_speed or 1.0)
    engine = LLMEngine(config, progress=lambda stage, fraction: print(f"loading: {stage} {fraction:.0%}", file=sys.stderr)
                       if fraction in (0.0, 1.0) else None)
    loop = EngineLoop(engine, model_name or served_name(config.model))
    allow_open_files()  # one socket per client stream
    freeze_loaded_heap()  # no full collection walks the model again while requests run
    loop.start()
    print(f"serving {loop.model_name} on http://{host}:{port} (OpenAI API under /v1, Prometheus metrics at /metrics)",
          file=sys.stderr, flush=True)
    try:
        uvicorn.run(create_app(loop), host=host, port=port, log_level="warning")
    finally:
        loop.stop()
