"""docs/knobs.md, made from the help each EngineConfig field carries (engine/configuration/config.py):

    python -m engine.configuration.knob_table > docs/knobs.md

tests/test_docs.py fails when the page and the fields disagree.
"""

from __future__ import annotations

from dataclasses import fields

from engine.configuration.config import EngineConfig


def toml_value(value: object) -> str:
    """A default as a preset would write it."""
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)


def knobs_markdown() -> str:
    defaults = EngineConfig(compile_decode="background")  # the default outside the test suite's override
    rows = [
        f"| `{knob.name}` | `{toml_value(getattr(defaults, knob.name))}` | {knob.metadata['help']} |"
        for knob in fields(EngineConfig)
    ]
    return "\n".join(
        [
            "# Engine settings",
            "",
            "Every `[engine]` key of a preset, `--set engine.KEY=VALUE` on the command line, and the window's",
            "Engine panel, whose tooltips say the same. Made from `engine/configuration/config.py` by",
            "`python -m engine.configuration.knob_table`.",
            "",
            "| key | default | what it does |",
            "|---|---|---|",
            *rows,
            "",
        ]
    )


if __name__ == "__main__":
    print(knobs_markdown(), end="")
