"""The `workbench` command line: one module per command, each with its parser (`add_to`) and its
run function; `main` only dispatches and turns errors into one line and an exit status.

    workbench                      the desktop app on the bundled model
    workbench gui [--preset NAME] [--run-for SECONDS [--screenshot FILE.png] [--inspect SECONDS]]
    workbench presets              list the presets
    workbench bench --preset NAME [--variant V] [--set table.key=value ...] [--seed N] --out DIR
    workbench quality --quant none,int8,int4 [--group-size 32,64,128] [--json OUT]
    workbench sweep --preset NAME --vary TABLE.KEY=V1,V2 [--rates R1,R2 | --find-max-rate] --out DIR
    workbench compare RUN_A RUN_B [--intended 'metric:+20%' ...] [--tolerated 'metric:+10%' ...]
    workbench trace RUN_DIR [--step N | --request ID]
    workbench explain RUN_DIR [--above p90] [--tag T]
    workbench replay RUN_DIR [--set table.key=value ...] [--backend MODEL|URL] --out DIR
    workbench report RUN_DIR       (a run folder's report files, built again from its log)
    workbench quality | estimate | calibrate | export-hf   (quality, memory, the cost model, a HF copy)
    workbench serve [--preset NAME] [--set engine.KEY=VALUE ...] [--port N]
    workbench compile [--preset NAME] [--set engine.KEY=VALUE ...]   (the decode graphs, into the cache)
"""

from __future__ import annotations

import argparse
import os
import sys

from engine.errors import EngineError
from workbench.cli import (
    bench,
    calibrate,
    compare,
    compile_graphs,
    estimate,
    explain,
    export_hf,
    gui,
    presets_list,
    quality,
    replay,
    report,
    serve,
    sweep,
    trace,
)

COMMANDS = (
    presets_list,
    gui,
    bench,
    sweep,
    compare,
    trace,
    explain,
    replay,
    report,
    quality,
    estimate,
    serve,
    export_hf,
    calibrate,
    compile_graphs,
)  # in --help's order


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="workbench", description="LLM serving workbench")
    commands = parser.add_subparsers(dest="command")
    for command in COMMANDS:
        command.add_to(commands)
    args = parser.parse_args(argv)
    try:
        code = getattr(args, "handler", gui.run_without_arguments)(args)
        sys.stdout.flush()  # here, not at exit: a reader gone (`| head`) is then caught below
        return code
    except EngineError as error:
        print(f"workbench: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl+C while loading, measuring quality, calibrating, exporting...
        print("workbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `workbench ... | head` read what it wanted: end quietly, as `git log | head`
        # Python flushes stdout again at exit: point it at /dev/null so that flush has nowhere to fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as error:  # a path that cannot be read or written: say which, without a traceback
        where = f"{error.filename}: " if error.filename else ""
        print(f"workbench: {where}{error.strerror or error}", file=sys.stderr)
        return 2
