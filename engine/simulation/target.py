"""`SimulatedTarget`: what "simulated:MODEL@HARDWARE" names, parsed in one place.

HARDWARE is one catalogued GPU ("h100-80gb") or a group of them ("4xh100-80gb"); every part of the
product that needs the model, the GPU or the count reads them from here, never splitting the
string itself."""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import ConfigError
from engine.simulation.parallel import parse_gpu_count

PREFIX = "simulated:"


def is_simulated(model: str) -> bool:
    """`model` names a simulated target ("simulated:MODEL@HARDWARE"), not a file or a server."""
    return str(model).startswith(PREFIX)


def target_name(model: str, hardware: str) -> str:
    """ "simulated:MODEL@HARDWARE": the one place a target's name is written."""
    return f"{PREFIX}{model}@{hardware}"


@dataclass(frozen=True)
class SimulatedTarget:
    model: str  # the catalogue's model name: "llama-3-70b"
    hardware: str  # as written: "4xh100-80gb"
    gpu: str  # one GPU's catalogue name: "h100-80gb"
    gpu_count: int  # 4

    @classmethod
    def parse(cls, text: str) -> SimulatedTarget:
        """ "simulated:MODEL@HARDWARE" (the prefix may be left off); ConfigError naming the value."""
        name, separator, hardware = text.removeprefix(PREFIX).partition("@")
        if not separator or not name or not hardware:
            raise ConfigError(
                f"model: expected 'simulated:MODEL@HARDWARE', e.g. simulated:llama-2-7b@h100-80gb; got {text!r}"
            )
        count, gpu = parse_gpu_count(hardware)
        return cls(name, hardware, gpu, count)

    def __str__(self) -> str:
        return target_name(self.model, self.hardware)
