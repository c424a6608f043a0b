"""The speculative decoding methods (the `speculative_method` setting): what each is, where it can
run, which requests it serves and which settings it reads. Every choice about a method is made from
these facts, never by comparing its name (tests/test_architecture.py holds that), as the
quantization methods' are from engine.quantization.METHODS: a new method is an entry here, its
proposer (engine/scheduling/speculation.py's PROPOSERS) and, where it needs one, its simulated cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import ConfigError


@dataclass(frozen=True)
class SpeculationMethod:
    name: str
    proposes: bool  # whether a decode step proposes tokens at all ("off" does not)
    on_real_models: bool  # runs on a model file's weights
    on_simulated_gpus: bool  # runs on simulated:MODEL@GPU
    greedy_only: bool  # its tokens are plain decoding's for greedy sampling only; others refused
    simulated_draft_model: bool  # a simulated GPU charges a draft model's steps and draws acceptance
    settings: tuple[str, ...]  # the settings it reads beside num_speculative_tokens and its schedule
    # Why it cannot run where it cannot, and what to choose instead.
    not_on_real_models: str = ""
    not_on_simulated_gpus: str = ""


SPECULATION_METHODS: dict[str, SpeculationMethod] = {
    method.name: method
    for method in (
        SpeculationMethod(
            "off",
            proposes=False,
            on_real_models=True,
            on_simulated_gpus=True,
            greedy_only=False,
            simulated_draft_model=False,
            settings=(),
        ),
        SpeculationMethod(
            "ngram",
            proposes=True,
            on_real_models=True,
            on_simulated_gpus=False,
            greedy_only=True,
            simulated_draft_model=False,
            settings=("prompt_lookup_min", "prompt_lookup_max"),
            not_on_simulated_gpus="a simulated GPU emits placeholder tokens, in which prompt lookup finds nothing; "
            "expected 'draft' (acceptance and cost as settings) or 'off'",
        ),
        SpeculationMethod(
            "draft",
            proposes=True,
            on_real_models=False,
            on_simulated_gpus=True,
            greedy_only=False,
            simulated_draft_model=True,
            settings=("draft_acceptance_rate", "draft_cost_fraction"),
            not_on_real_models="no draft model runs beside it; expected 'ngram' (prompt lookup) or 'off' ('draft' "
            "is for simulated:MODEL@GPU)",
        ),
    )
}


def speculation_method(name: str) -> SpeculationMethod:
    """The method called `name`; ConfigError naming the methods there are."""
    try:
        return SPECULATION_METHODS[name]
    except (KeyError, TypeError):
        expected = ", ".join(SPECULATION_METHODS)
        raise ConfigError(f"speculative_method: expected one of {expected}, got {name!r}") from None
