"""`SimulatedTarget`: "simulated:MODEL@HARDWARE" parsed in one place (issue 60 #4)."""

from __future__ import annotations

import pytest

from engine.errors import ConfigError
from engine.simulation import SimulatedTarget


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("simulated:llama-3-8b@h100-80gb", ("llama-3-8b", "h100-80gb", "h100-80gb", 1)),
        ("simulated:llama-3-70b@4xh100-80gb", ("llama-3-70b", "4xh100-80gb", "h100-80gb", 4)),
        ("llama-3-70b@8xa100-80gb", ("llama-3-70b", "8xa100-80gb", "a100-80gb", 8)),  # a run log's model identity
        (
            "simulated:smollm2-135m@this-machine-calibrated",
            ("smollm2-135m", "this-machine-calibrated", "this-machine-calibrated", 1),
        ),
    ],
)
def test_a_target_names_its_model_gpu_and_count_and_reads_back_as_written(text, parts):
    target = SimulatedTarget.parse(text)
    assert (target.model, target.hardware, target.gpu, target.gpu_count) == parts
    assert str(target) == "simulated:" + text.removeprefix("simulated:")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("simulated:llama-3-8b", "expected 'simulated:MODEL@HARDWARE'"),
        ("simulated:@h100-80gb", "expected 'simulated:MODEL@HARDWARE'"),
        ("simulated:llama-3-8b@", "expected 'simulated:MODEL@HARDWARE'"),
        ("simulated:llama-3-8b@0xh100-80gb", "expected 1 to"),
        ("simulated:llama-3-8b@1000000xh100-80gb", "got 1,000,000"),
    ],
)
def test_a_malformed_target_is_refused_naming_it(text, said):
    with pytest.raises(ConfigError, match=said.replace("(", r"\(")):
        SimulatedTarget.parse(text)
