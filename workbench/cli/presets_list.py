"""`workbench presets`: the presets and their variants, one line each."""

from __future__ import annotations

import sys


def add_to(commands) -> None:
    commands.add_parser("presets", help="list the presets").set_defaults(handler=run)


def run(args) -> int:
    from workbench.traffic.presets import PRESET_DIR, load_preset, preset_names

    if not preset_names():
        print(
            f"workbench: no presets found in {PRESET_DIR} (the package data of an incomplete install)", file=sys.stderr
        )
        return 1
    for name in preset_names():
        scenario = load_preset(name)
        variants = f" [variants: {', '.join(scenario.variants)}]" if scenario.variants else ""
        print(f"{name:<24} {scenario.description.splitlines()[0] if scenario.description else ''}{variants}")
    return 0
