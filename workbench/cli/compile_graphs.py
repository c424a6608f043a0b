"""`workbench compile`: compile an engine configuration's decode graphs and prefill halves into this machine's caches
(`make setup` runs it for the default configuration). On a machine's first run the compile takes
minutes (about 280 s on the 2-core VM); with these caches, 20-45 s. So the first window a
newcomer opens is warm within a minute instead of serving its first runs eagerly beside the
compiler."""

from __future__ import annotations

import dataclasses
import sys
import time

from workbench.cli.arguments import add_engine_options, engine_config

_REPORT_EVERY_S = 15.0


def add_to(commands) -> None:
    compile_ = commands.add_parser(
        "compile", help="compile an engine configuration's decode graphs into this machine's cache (make setup does)"
    )
    add_engine_options(compile_)
    compile_.set_defaults(handler=run)


def run(args) -> int:
    from engine import LLMEngine

    config = dataclasses.replace(engine_config(args), compile_decode="background")  # its progress can be shown
    started = time.monotonic()
    with LLMEngine(config) as engine:
        executor = engine.executor
        last_report = None
        while (progress := executor.compile_progress) is not None:
            if last_report is None or time.monotonic() - last_report >= _REPORT_EVERY_S:
                print(f"workbench compile: {progress.describe()}", file=sys.stderr, flush=True)
                last_report = time.monotonic()
            time.sleep(0.2)
        modes = f"decode {executor.decode_mode}, prefill {executor.prefill_mode}"
    print(f"workbench compile: {modes} after {time.monotonic() - started:.0f} s ({config.model})")
    return 0
