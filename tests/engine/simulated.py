"""Engines on a simulated GPU for the scheduler's tests, and a guard that turns a hang into a
failure."""

from __future__ import annotations

import contextlib
import signal

from engine import EngineConfig, LLMEngine

LLAMA_ON_H100 = "simulated:llama-2-7b@h100-80gb"


def sim(**settings):
    return LLMEngine(EngineConfig(model=LLAMA_ON_H100, **settings))


@contextlib.contextmanager
def hang_guard(seconds: int = 30):
    """A simulated step takes microseconds: one still running after 30 s is stuck in a loop
    inside the scheduler. Fail it instead of hanging the suite (a hang detector, not a timing)."""

    def stuck(signum, frame):
        raise AssertionError(f"a step did not return within {seconds} s: an endless loop inside the scheduler")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
